"""Attention mechanisms of Bahdanau et al. (2015) and Luong et al. (2015), one class each.

Every class follows the same two-call interface so that decoders and searches never care which
one they hold:

- `prepare(memory, mask) -> keys`: everything that depends only on the encoder annotations
  (U_a h_j, W_a h_j, ...), computed once per batch and shared by every step and every beam.
- `forward(query, keys, memory, mask, positions, state) -> (context, weights)`: `query` holds T
  queries per sentence, `(B, T, d)`: one decoder step (T = 1), all steps at once (Luong's
  parallel path) or the K beams of a sentence; `mask` is True on real source positions;
  `positions` `(B, T)` are the target positions the queries stand for (local-m centres its
  window there).

Scores are masked and soft-maxed in fp32, so padding gets exactly zero weight even under AMP,
and a row with no real position gives zero weights instead of NaN.

A stateful attention (location-aware, coverage: the attentions that read the previous step's
weights or their running sum) defines `initial_state` and, unless its state is the previous
weights, `next_state`; its `score` then takes the state too, `(B, T, S, ...)`, one per query.
The decoder keeps the state with the rest of its own (`DecoderState.attention`), so the searches
reorder it with the beams and carry it through their pools, and zeroes it at padded positions.

Adding an attention is one subclass, here or in a plugin file of one's own (`nmt.plugins`):
`class Mine(Attention, name="mine")`, with its settings in an `Options` dataclass.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from nmt.config import AttentionConfig, plugin_options
from nmt.model.dropout import Dropout
from nmt.model.linear import Linear
from nmt.registry import Registry


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis of `scores` (B, T, S), restricted to `mask` (B, 1|T, S).

    The fill value is the dtype's minimum rather than -inf: a row with real positions still
    gives exactly 0 to the masked ones (exp underflows), and an all-masked row gives a uniform
    row that the final multiplication zeroes, instead of NaN.
    """
    scores = scores.float().masked_fill(~mask, torch.finfo(torch.float32).min)
    return torch.softmax(scores, dim=-1) * mask


class Attention(Registry, nn.Module, kind="attention"):
    """Base class: score every source position, masked softmax, weighted sum of the memory."""

    Options: ClassVar[type | None] = None  # a plugin's own settings: a dataclass of `nmt.config.setting`s

    def __init__(self, query_dim: int, memory_dim: int, cfg: AttentionConfig):
        super().__init__()
        self.dropout = Dropout(cfg.dropout)
        # model.attention.options, as this class's `Options` (checked with the config)
        self.options = self.Options and plugin_options(self.Options, cfg.options, "model.attention")

    @property
    def stateful(self) -> bool:
        """Whether each step reads a state the previous steps left (`initial_state`)."""
        return type(self).initial_state is not Attention.initial_state

    def initial_state(self, memory: Tensor, mask: Tensor) -> Tensor | None:
        """A stateful attention's state before the first step, (B, S, ...) (e.g. zeros: no
        weight spent yet); None for a stateless one."""
        return None

    def next_state(self, state: Tensor, weights: Tensor) -> Tensor:
        """The state (B, T, S, ...) after a step that gave `weights` (B, T, S): by default the
        weights themselves, what location-aware attention reads."""
        return weights

    def prepare(self, memory: Tensor, mask: Tensor) -> Tensor:
        return memory

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """(B, T, d) queries x (B, S, ...) keys -> (B, T, S) unnormalised scores; a stateful
        attention's takes the state (B, T, S, ...) third."""
        raise NotImplementedError

    def weights(
        self, query: Tensor, keys: Tensor, mask: Tensor, positions: Tensor, state: Tensor | None = None
    ) -> Tensor:
        scores = self.score(query, keys) if state is None else self.score(query, keys, state)
        return masked_softmax(scores, mask[:, None, :])

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        memory: Tensor,
        mask: Tensor,
        positions: Tensor,
        state: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """query (B, T, d) -> context (B, T, M) and weights (B, T, S), in fp32."""
        weights = self.weights(query, keys, mask, positions, state)
        context = torch.bmm(self.dropout(weights).to(memory.dtype), memory)
        return context, weights


class NoAttention(Attention, name="none"):
    """The Sutskever et al. (2014) / Cho et al. (2014) baseline: no context at all.

    The context is a zero vector and the weights are all zero, so the decoder sees the source
    only through its initial state (the bridge), while sharing every other line of code.
    """

    def forward(self, query, keys, memory, mask, positions, state=None):
        B, T, _ = query.shape
        return memory.new_zeros(B, T, memory.size(-1)), query.new_zeros(B, T, memory.size(1)).float()


class DotAttention(Attention, name="dot"):
    """Luong (2015) §3.1 `dot`: score(h_t, h_s) = h_t^T h_s. Needs equal sizes."""

    def score(self, query, keys):
        return torch.bmm(query, keys.transpose(1, 2))


class ScaledDotAttention(Attention, name="scaled_dot"):
    """`dot` divided by sqrt(d) (Vaswani et al. 2017), which keeps softmax out of saturation."""

    def score(self, query, keys):
        return torch.bmm(query, keys.transpose(1, 2)) / math.sqrt(query.size(-1))


class GeneralAttention(Attention, name="general"):
    """Luong (2015) §3.1 `general`: score(h_t, h_s) = h_t^T W_a h_s; W_a h_s is precomputed."""

    def __init__(self, query_dim, memory_dim, cfg):
        super().__init__(query_dim, memory_dim, cfg)
        self.W_a = Linear(memory_dim, query_dim, bias=False, once_per_batch=True)

    def prepare(self, memory, mask):
        return self.W_a(memory)  # (B, S, d)

    def score(self, query, keys):
        return torch.bmm(query, keys.transpose(1, 2))


class AdditiveAttention(Attention, name="bahdanau"):
    """Bahdanau (2015) eq. 6 / App. A.1.2: e_tj = v_a^T tanh(W_a s_{t-1} + U_a h_j) (+ b if `bias`).

    U_a h_j is precomputed once per batch. Which state is the query (s_{t-1} or h_t) is the
    decoder's business, not the score's.
    """

    use_bias: ClassVar[bool | None] = None  # None: take `bias` from the config

    def __init__(self, query_dim, memory_dim, cfg):
        super().__init__(query_dim, memory_dim, cfg)
        dim = cfg.dim or query_dim
        bias = cfg.bias if self.use_bias is None else self.use_bias
        self.W_a = Linear(query_dim, dim, bias=bias)
        self.U_a = Linear(memory_dim, dim, bias=False, once_per_batch=True)
        self.v_a = Linear(dim, 1, bias=False)

    def prepare(self, memory, mask):
        return self.U_a(memory)  # (B, S, A)

    def score(self, query, keys):
        hidden = torch.tanh(self.W_a(query).unsqueeze(2) + keys.unsqueeze(1))  # (B, T, S, A)
        return self.v_a(hidden).squeeze(-1)


class ConcatAttention(AdditiveAttention, name="concat"):
    """Luong (2015) §3.1 `concat`: score = v_a^T tanh(W_a [h_t; h_s]), without bias.

    W_a [h_t; h_s] = W_q h_t + W_k h_s, so the memory half is precomputed exactly like
    Bahdanau's U_a h_j; the two differ in which decoder state asks (see the decoders).
    """

    use_bias = False


class LocalAttention(GeneralAttention):
    """Luong (2015) §3.2 local attention with the `general` score, over the window
    [p_t - D, p_t + D] clipped to the real source positions."""

    def __init__(self, query_dim, memory_dim, cfg):
        super().__init__(query_dim, memory_dim, cfg)
        self.D = cfg.window

    def centre(self, query: Tensor, src_len: Tensor, positions: Tensor) -> Tensor:
        """p_t for every query: (B, T) floats."""
        raise NotImplementedError

    def weights(self, query, keys, mask, positions, state=None):
        src_len = mask.sum(-1, keepdim=True)  # (B, 1) the true length S of each source
        p = self.centre(query, src_len, positions)  # (B, T)
        s = torch.arange(mask.size(1), device=mask.device)  # (S,)
        distance = s[None, None, :] - p.unsqueeze(-1)  # (B, T, S)
        window = (distance.abs() <= self.D) & mask[:, None, :]
        align = masked_softmax(self.score(query, keys), window)
        return align * self.window_factor(distance)

    def window_factor(self, distance: Tensor) -> Tensor:
        return torch.ones((), device=distance.device)


class LocalMonotonicAttention(LocalAttention, name="local_m"):
    """local-m: p_t = t (clamped to the last real position), a_t = align(h_t, h_s) in the window."""

    def centre(self, query, src_len, positions):
        return torch.minimum(positions.float(), (src_len - 1).float())  # (B, T)


class LocalPredictiveAttention(LocalAttention, name="local_p"):
    """local-p, eqs. 9-10: p_t = S sigmoid(v_p^T tanh(W_p h_t)) and
    a_t(s) = align(h_t, h_s) exp(-(s - p_t)^2 / (2 sigma^2)) with sigma = D / 2.

    As in the paper the Gaussian is applied after the softmax, so the weights sum to at most 1;
    p_t is a real number, so gradients reach W_p and v_p through the Gaussian.
    """

    def __init__(self, query_dim, memory_dim, cfg):
        super().__init__(query_dim, memory_dim, cfg)
        self.W_p = Linear(query_dim, query_dim, bias=False)
        self.v_p = Linear(query_dim, 1, bias=False)

    def centre(self, query, src_len, positions):
        gate = torch.sigmoid(self.v_p(torch.tanh(self.W_p(query)))).squeeze(-1)  # (B, T)
        return src_len.float() * gate.float()

    def window_factor(self, distance):
        sigma = self.D / 2
        return torch.exp(-(distance**2) / (2 * sigma**2))


class MultiHeadAttention(Attention, name="multihead"):
    """Scaled dot-product cross attention with H heads (Vaswani et al. 2017, §3.2.2):
    head_i = softmax(Q_i K_i^T / sqrt(d_h)) V_i, context = W_o [head_1; ...; head_H].

    The weights it returns (for plots and analysis) are the mean over heads.
    """

    def __init__(self, query_dim, memory_dim, cfg):
        super().__init__(query_dim, memory_dim, cfg)
        self.heads = cfg.heads
        self.W_q = Linear(query_dim, memory_dim, bias=False)
        self.W_kv = Linear(memory_dim, 2 * memory_dim, bias=False, once_per_batch=True)
        self.W_o = Linear(memory_dim, memory_dim, bias=False)

    def prepare(self, memory, mask):
        return self.W_kv(memory)  # (B, S, 2M): keys and values side by side

    def _split(self, x: Tensor) -> Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.heads, -1).transpose(1, 2)  # (B, H, L, d_h)

    def forward(self, query, keys, memory, mask, positions, state=None):
        B, T, _ = query.shape
        k, v = (self._split(x) for x in keys.chunk(2, dim=-1))
        q = self._split(self.W_q(query))  # (B, H, T, d_h)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))  # (B, H, T, S)
        weights = masked_softmax(scores, mask[:, None, None, :])
        heads = self.dropout(weights).to(v.dtype) @ v  # (B, H, T, d_h)
        context = self.W_o(heads.transpose(1, 2).reshape(B, T, -1))  # (B, T, M)
        return context, weights.mean(1)
