"""The two decoder step orders, kept apart because they are different models.

- `LuongDecoder` (Luong 2015 §3): RNN step first, then attend with the new h_t, then the
  attentional state h~_t = tanh(W_c [c_t; h_t]) and p(y_t) = softmax(W_s h~_t). With input
  feeding (§3.3) h~_{t-1} joins the next input; without it, training runs the LSTM over the
  whole target in one call and attends for all steps in one batched matmul.
- `BahdanauDecoder` (Bahdanau 2015 §3.1, App. A): attend with the previous state s_{t-1} first,
  then the RNN step on [y_{t-1}; c_t], then the output from [s_t; c_t; y_{t-1}] (linear or maxout).

Both share `step()`, used by every search, and `features()` / `forward()` for teacher forcing.
Decoder state lives in a `DecoderState` outside the module, so beams can reorder it; each query
carries its target position (a tensor), so rows at different steps can share a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import ModelConfig
from nmt.model.attention import Attention
from nmt.model.dropout import Dropout, dropout
from nmt.model.linear import Linear, linear, one_weight_gradient
from nmt.model.output import OutputLayer
from nmt.registry import Registry
from nmt.vocab import PAD


def lstm_cell(
    x: Tensor, state: tuple[Tensor, Tensor], w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor
) -> tuple[Tensor, Tensor]:
    """torch.lstm_cell written out in matrix products (gates in PyTorch's order i, f, g, o): the
    same maths, in operations every ONNX exporter and runtime has, and its products on oneDNN
    (`nmt.model.linear`)."""
    h, c = state
    i, f, g, o = (linear(x, w_ih, b_ih) + linear(h, w_hh, b_hh)).chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


@dataclass
class Memory:
    """Everything the decoder reads from the encoder.

    In a search's pool the tensors are the first rows of `buffers`, which keep their size while
    sentences leave and join: copying the whole pool whenever a sentence left (1 GB of copies to
    decode 1,000 sentences) fragmented the allocator's pages and raised a long decode's peak
    (10,000 lines greedy: 439-452 MiB, 422-434 without the copies; docs/notes/performance-history.md, 10.4).
    """

    memory: Tensor  # (B, S, M) annotations
    mask: Tensor  # (B, S) True on real source positions
    keys: Tensor  # (B, S, ...) attention.prepare(memory, mask)
    beams: int = 1  # decoder rows per sentence: beam search's K rows share one memory
    buffers: tuple[Tensor, Tensor, Tensor] | None = None  # what memory, mask, keys are the first rows of

    def rows(self, index: Tensor, length: int) -> Memory:
        """The memory of sentences `index` only, cut to `length`, the longest of them (the caller
        knows it: counting it here would read the mask back from a GPU, waiting for it)."""
        return Memory(
            self.memory[index, :length], self.mask[index, :length], self.keys[index, :length], self.beams
        )

    def last(self, rows: int) -> Memory:
        """The last `rows` sentences, as views."""
        return Memory(self.memory[-rows:], self.mask[-rows:], self.keys[-rows:], self.beams)

    def share(self, beams: int) -> Memory:
        """The same memory for `beams` consecutive decoder rows per sentence, without copies."""
        return Memory(self.memory, self.mask, self.keys, beams, self.buffers)

    @property
    def tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        return self.memory, self.mask, self.keys

    def compact(self, rows: int, holes: Tensor, fillers: Tensor) -> Memory:
        """The first `rows` sentences, after sentences `fillers` (all at or beyond `rows`) moved
        into the rows `holes` (all before it), in place: sentences leave without a copy."""
        for tensor in self.tensors:
            tensor[holes] = tensor[fillers]
        return self._first(rows, self.buffers or self.tensors)

    def join(self, other: Memory, longest: int) -> Memory:
        """This pool's sentences, then `other`'s (continuous batching: sentences join a search
        under way), written into the buffers' spare rows when they fit. New buffers are made
        only when the rows or the source length outgrow them, or when the longest source left
        (`longest`, which the caller knows) is under 3/4 of their length; their length is
        rounded up to a multiple of 4, so a length-sorted input makes a few sizes, not one per
        sentence length."""
        rows, new_rows, new_len = self.mask.size(0), other.mask.size(0), other.mask.size(1)
        buffers = self.buffers or self.tensors
        capacity, length = buffers[1].shape
        longest = max(new_len, longest)
        wanted = -(-longest // 4) * 4
        if rows + new_rows > capacity or wanted > length or wanted * 4 <= length * 3:
            length = wanted
            buffers = tuple(old.new_zeros(rows + new_rows, length, *old.shape[2:]) for old in self.tensors)
            kept = min(length, self.mask.size(1))
            for buffer, old in zip(buffers, self.tensors, strict=True):
                buffer[:rows, :kept] = old[:, :kept]
        for buffer, new in zip(buffers, other.tensors, strict=True):
            buffer[rows : rows + new_rows, :new_len] = new
            buffer[rows : rows + new_rows, new_len:] = 0
        return self._first(rows + new_rows, buffers)

    def _first(self, rows: int, buffers: tuple[Tensor, Tensor, Tensor]) -> Memory:
        memory, mask, keys = (buffer[:rows] for buffer in buffers)
        return Memory(memory, mask, keys, self.beams, buffers)


def fit(state: Tensor, length: int) -> Tensor:
    """An attention state (R, S, ...) cut or zero-padded to `length` source positions: it is zero
    beyond each sentence's source, so neither loses anything (pools change their memory's length
    as sentences leave and join)."""
    S = state.size(1)
    if length == S:
        return state
    if length < S:
        return state[:, :length]
    return torch.cat([state, state.new_zeros(state.size(0), length - S, *state.shape[2:])], 1)


@dataclass
class DecoderState:
    h: Tensor  # (L, B, D)
    c: Tensor  # (L, B, D)
    feed: Tensor | None = None  # (B, D) h~_{t-1}, Luong input feeding only
    attention: Tensor | None = None  # (B, S, ...) a stateful attention's state (`Attention.initial_state`)

    def last(self, rows: int) -> DecoderState:
        """The last `rows` rows, as views."""
        feed, att = (None if t is None else t[-rows:] for t in (self.feed, self.attention))
        return DecoderState(self.h[:, -rows:], self.c[:, -rows:], feed, att)

    def select(self, index: Tensor) -> DecoderState:
        """Reorder (or expand) the batch by `index`: beams follow their back-pointers."""
        feed, att = (None if t is None else t[index] for t in (self.feed, self.attention))
        return DecoderState(self.h[:, index], self.c[:, index], feed, att)

    def join(self, other: DecoderState) -> DecoderState:
        """This batch's rows, then `other`'s."""
        feed = None if self.feed is None else torch.cat([self.feed, other.feed])
        att = None
        if self.attention is not None:
            length = max(self.attention.size(1), other.attention.size(1))
            att = torch.cat([fit(self.attention, length), fit(other.attention, length)])
        return DecoderState(torch.cat([self.h, other.h], 1), torch.cat([self.c, other.c], 1), feed, att)

    def put(self, index: Tensor, other: DecoderState) -> None:
        """In place: rows `index` take `other`'s rows (a fixed pool's new sentences)."""
        self.h[:, index], self.c[:, index] = other.h, other.c
        if self.feed is not None:
            self.feed[index] = other.feed
        if self.attention is not None:
            self.attention[index] = fit(other.attention, self.attention.size(1))

    def copy_(self, other: DecoderState) -> None:
        """In place: every row takes `other`'s (a fixed pool keeps its state in one place)."""
        self.h.copy_(other.h)
        self.c.copy_(other.c)
        if self.feed is not None:
            self.feed.copy_(other.feed)
        if self.attention is not None:
            self.attention.copy_(fit(other.attention, self.attention.size(1)))


def _zero_padding(state: Tensor, mask: Tensor, at: int = 1) -> Tensor:
    """A stateful attention's state, its source positions on axis `at` ((B, S, ...) or
    (B, K, S, ...)), with zeros where `mask` (B, S) is False."""
    shape = [mask.size(0)] + [1] * (at - 1) + [mask.size(1)] + [1] * (state.dim() - at - 1)
    return state.masked_fill(~mask.view(shape), 0)


def _live_rows(tgt_in: Tensor) -> list[int]:
    """How many rows a teacher-forced step runs at each target position. Training batches on a
    CPU come shortest target first (`length_grouped_batches`), so the rows whose target has
    ended are the first ones and leave the later steps: the decoder does no work on padding
    (docs/notes/performance-history.md §21). Any other order, and any device but the CPU (a
    GPU's graphs want fixed shapes; checking the order would wait for it), runs every row at
    every step."""
    B, T = tgt_in.shape
    if tgt_in.device.type != "cpu":
        return [B] * T
    lengths = (tgt_in != PAD).sum(1)
    if not bool((lengths[:-1] <= lengths[1:]).all()):
        return [B] * T
    return (lengths[None] > torch.arange(T)[:, None]).sum(1).tolist()  # the longest row: every step


class Decoder(Registry, nn.Module, kind="decoder"):
    def __init__(self, vocab_size: int, memory_dim: int, cfg: ModelConfig):
        super().__init__()
        dec = cfg.decoder
        self.hidden, self.layers = dec.hidden, dec.layers
        self.embed = nn.Embedding(vocab_size, cfg.embedding, padding_idx=PAD)
        self.dropout = Dropout(cfg.dropout)
        self.attention = Attention.build(cfg.attention.type, dec.hidden, memory_dim, cfg.attention)
        self.rnn = nn.LSTM(
            self.rnn_input_size(cfg, memory_dim),
            dec.hidden,
            num_layers=dec.layers,
            batch_first=True,
            dropout=dec.dropout if dec.layers > 1 else 0.0,
        )

    def rnn_input_size(self, cfg: ModelConfig, memory_dim: int) -> int:
        raise NotImplementedError

    quantized = False  # True: `rnn` is an int8 LSTM (nmt/decode/quantize.py), without plain weights

    def run_rnn(self, x: Tensor, state: DecoderState) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """The LSTM over x (B, k, I) from state -> outputs (B, k, D) and the new (h, c).

        A single step (every decoding step; training with input feeding or Bahdanau's order)
        goes through `lstm_cell` with the LSTM's own weights: its products on oneDNN beat one
        nn.LSTM call at every row count measured, 1 to 320 rows, 1 and 2 threads, in decoding
        and in training (docs/notes/performance-history.md §9); it is also what exports to ONNX.
        """
        if x.size(1) > 1 or self.quantized:
            return self.rnn(x, (state.h, state.c))
        layer_input, hs, cs = x[:, 0], [], []
        for layer in range(self.layers):
            weights = [
                getattr(self.rnn, f"{w}_l{layer}") for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            ]
            h, c = lstm_cell(layer_input, (state.h[layer], state.c[layer]), *weights)
            hs.append(h)
            cs.append(c)
            # as nn.LSTM: dropout on every layer's output but the last, in training only
            layer_input = h if layer == self.layers - 1 else dropout(h, self.rnn.dropout, self.training)
        return layer_input[:, None], (torch.stack(hs), torch.stack(cs))

    def init_state(self, h0: Tensor, c0: Tensor, mem: Memory) -> DecoderState:
        """The first state: (h0, c0) from the bridge, and a stateful attention's first state of
        `mem`'s sources (zero at their padding)."""
        att = self.attention.initial_state(mem.memory, mem.mask)
        return DecoderState(
            h0, c0, self.first_feed(h0), None if att is None else _zero_padding(att, mem.mask)
        )

    def first_feed(self, h0: Tensor) -> Tensor | None:
        """Input feeding's h~_0 (`LuongDecoder`), None for a decoder without it."""
        return None

    def prepare(self, memory: Tensor, mask: Tensor) -> Memory:
        """The encoder's annotations (B, S, M) and mask (B, S), with what the attention
        precomputes from them once per batch."""
        return Memory(memory, mask, self.attention.prepare(memory, mask))

    def attend(
        self, query: Tensor, mem: Memory, positions: Tensor, state: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """query (R, k, d) at target `positions` (R, k) -> context (R, k, M), weights (R, k, S)
        and a stateful attention's next state (R, S, ...) from `state` (k is 1 then), where
        R = B * mem.beams.

        Under beam search a sentence's K beams attend as K query positions over its one memory,
        so neither the memory nor its keys are copied K times (docs/notes/performance-history.md §8).
        """
        K = mem.beams
        if state is not None:  # (R, S, ...) -> one per query, (B, K, S, ...) (k is 1)
            state = fit(state, mem.mask.size(1))
            state = state.unsqueeze(1) if K == 1 else state.unflatten(0, (-1, K))
        if K == 1:
            context, weights = self.attention(query, mem.keys, mem.memory, mem.mask, positions, state)
            shaped = weights
        else:
            R, k = query.shape[:2]
            B = R // K
            context, shaped = self.attention(
                query.reshape(B, K * k, -1), mem.keys, mem.memory, mem.mask, positions.reshape(B, -1), state
            )
            context, weights = context.reshape(R, k, -1), shaped.reshape(R, k, -1)
        if state is not None:
            state = _zero_padding(self.attention.next_state(state, shaped), mem.mask, 2)
            state = state.squeeze(1) if K == 1 else state.flatten(0, 1)
        return context, weights, state

    parallel = False  # True when the recurrence does not read the attention (whole-target path)

    def recur(
        self, y_prev: Tensor, state: DecoderState, mem: Memory, positions: Tensor, y: Tensor | None = None
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """y_prev (B, k) at target `positions` (B, k) -> pre-output vectors (B, k, P), new state,
        weights (B, k, S). `y`: y_prev already embedded (with dropout), when teacher forcing
        embedded the whole target at once.

        Everything but the output layer, which needs no recurrence and so can run once over
        all steps in training. k > 1 only where the step order allows it (`parallel`).
        """
        raise NotImplementedError

    def step(
        self, y_prev: Tensor, state: DecoderState, mem: Memory, positions: Tensor, vocabulary=None
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One target position per row: y_prev (B,) at `positions` (B,) -> logits (B, V), new
        state, weights (B, S). With a `vocabulary` (`nmt.decode.vocabulary`): the logits of its
        pieces only, (B, U)."""
        pre_output, state, weights = self.recur(y_prev[:, None], state, mem, positions[:, None])
        pre_output = pre_output.squeeze(1)
        if vocabulary is not None:
            return vocabulary.logits(self.output_layer, pre_output), state, weights.squeeze(1)
        return self.output_layer(pre_output), state, weights.squeeze(1)

    def features(self, tgt_in: Tensor, state: DecoderState, mem: Memory) -> tuple[Tensor, Tensor]:
        """Teacher forcing over the whole target (B, T) -> pre-output vectors (B, T, P) and
        weights (B, T, S): everything but the output layer, which the training loss fuses."""
        B, T = tgt_in.shape
        positions = torch.arange(T, device=tgt_in.device).expand(B, T)
        if self.parallel:
            pre_output, _, weights = self.recur(tgt_in, state, mem, positions)  # one LSTM call
            return pre_output, weights
        # the whole target embedded at once: one embedding gradient a step, where one a position
        # made a dense (V, E) gradient and added it up T times (12 x 8 MB a bench step)
        # (unbound, so its gradient is one stack, not a zero-padded slice added up per position)
        embedded = self.embedded(tgt_in).unbind(1)
        pre_outputs, weights = [], []
        with one_weight_gradient():  # each weight's gradient over all positions at once
            for t, rows in enumerate(_live_rows(tgt_in)):
                y_prev, y, at = tgt_in[:, t : t + 1], embedded[t][:, None], positions[:, t : t + 1]
                if rows < B:  # the first rows' targets have ended: they leave the step
                    y_prev, y, at = y_prev[-rows:], y[-rows:], at[-rows:]
                    state, mem = state.last(rows), mem.last(rows)
                pre_output, state, step_weights = self.recur(y_prev, state, mem, at, y)
                if rows < B:  # zeros where the targets ended
                    pre_output, step_weights = (
                        F.pad(x, (0, 0, 0, 0, B - rows, 0)) for x in (pre_output, step_weights)
                    )
                pre_outputs.append(pre_output)
                weights.append(step_weights)
        return torch.cat(pre_outputs, 1), torch.cat(weights, 1)

    def embedded(self, y_prev: Tensor) -> Tensor:
        """Target pieces (B, k) -> their embeddings with dropout (B, k, E)."""
        return self.dropout(self.embed(y_prev))

    def forward(self, tgt_in: Tensor, state: DecoderState, mem: Memory) -> tuple[Tensor, Tensor]:
        """Teacher forcing over the whole target (B, T) -> logits (B, T, V), weights (B, T, S)."""
        pre_output, weights = self.features(tgt_in, state, mem)
        return self.output_layer(pre_output), weights


class LuongDecoder(Decoder, name="luong"):
    def __init__(self, vocab_size, memory_dim, cfg):
        self.input_feeding = cfg.decoder.input_feeding
        super().__init__(vocab_size, memory_dim, cfg)
        self.parallel = not (self.input_feeding or self.attention.stateful)
        self.W_c = Linear(memory_dim + cfg.decoder.hidden, cfg.decoder.hidden, bias=False)
        self.output_layer = OutputLayer(cfg.decoder.hidden, vocab_size, cfg.dropout)  # eq. 6: W_s h~_t

    def rnn_input_size(self, cfg, memory_dim):
        return cfg.embedding + (cfg.decoder.hidden if cfg.decoder.input_feeding else 0)

    def first_feed(self, h0):
        return h0.new_zeros(h0.size(1), self.hidden) if self.input_feeding else None

    def recur(self, y_prev, state, mem, positions, y=None):
        x = self.embedded(y_prev) if y is None else y  # (B, k, E)
        if self.input_feeding:
            assert y_prev.size(1) == 1, "input feeding makes every step depend on the last"
            x = torch.cat([x, state.feed[:, None]], dim=-1)
        h, (h_n, c_n) = self.run_rnn(x, state)  # (B, k, D): the RNN step comes first
        context, weights, att = self.attend(h, mem, positions, state.attention)  # attend with h_t
        h_tilde = torch.tanh(self.W_c(torch.cat([context, h], dim=-1)))  # eq. 5
        feed = h_tilde[:, -1] if self.input_feeding else None
        return h_tilde, DecoderState(h_n, c_n, feed, att), weights


class BahdanauDecoder(Decoder, name="bahdanau"):
    def __init__(self, vocab_size, memory_dim, cfg):
        super().__init__(vocab_size, memory_dim, cfg)
        self.maxout = cfg.decoder.output == "maxout"
        pre_output = cfg.embedding  # so the output layer can be tied to the target embedding
        self.W_o = Linear(
            cfg.decoder.hidden + memory_dim + cfg.embedding, pre_output * (2 if self.maxout else 1)
        )
        self.output_layer = OutputLayer(pre_output, vocab_size, cfg.dropout)

    def rnn_input_size(self, cfg, memory_dim):
        return cfg.embedding + memory_dim

    def recur(self, y_prev, state, mem, positions, y=None):
        assert y_prev.size(1) == 1, "every Bahdanau step attends with the state before it"
        y = self.embedded(y_prev) if y is None else y  # (B, 1, E)
        s_prev = state.h[-1]  # (B, D): s_{t-1}, the top layer
        context, weights, att = self.attend(s_prev[:, None], mem, positions, state.attention)
        s, (h_n, c_n) = self.run_rnn(torch.cat([y, context], dim=-1), state)
        t_out = self.W_o(torch.cat([s, context, y], dim=-1))  # (B, 1, P or 2P)
        if self.maxout:  # App. A.2.2: t_i = max(t~_{i,2j-1}, t~_{i,2j})
            t_out = t_out.unflatten(-1, (-1, 2)).amax(-1)
        return t_out, DecoderState(h_n, c_n, None, att), weights
