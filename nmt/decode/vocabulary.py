"""The output layer restricted to a shortlist (`nmt.text.shortlist`) for a pool of sentences.

A step computes the logits of the pieces the pool's sentences may write only (the output layer's
rows of those pieces, copied as sentences bring new ones), then a mask keeps each sentence to
its own pieces before the softmax, so a sentence decodes the same whatever shares
its pool. The log-probabilities are spread back to the whole vocabulary (-inf elsewhere), so the
searches and their rules (EOS, bans, prefixes, constraints) work on token ids as without one.
`FixedVocabulary` does the same for fixed rows (`nmt.decode.rows`), in buffers a CUDA graph reads.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from nmt.device import to_device
from nmt.model.linear import decoding_linear, operands
from nmt.text.ranking import NEG_INF

# The pieces scored are padded to a multiple of this, so the output layer's product meets a few
# shapes (oneDNN compiles a primitive for each shape it meets); the padding's logits are dropped.
COLUMNS = 256
# The pieces scored grow as sentences join with pieces of their own; once they are more than
# this many times the pool's own, they start again from the pool's.
SLACK = 2.0


class Vocabulary:
    """The pieces a pool scores (`ids`, in column order) and each sentence's mask over them."""

    def __init__(self, device: torch.device):
        self.device = device
        self.ids = np.empty(0, dtype=np.int64)
        self.scored: np.ndarray | None = None  # (V,) bool: whether a piece is in `ids`
        self.mask = torch.empty(0, 0, device=device)  # (sentences, columns): 0 or -inf
        self._ids = torch.empty(0, dtype=torch.long, device=device)
        self._rows: dict[int, list] = {}  # id(layer) -> [weight rows, bias rows, rows filled]
        self._spread: Tensor | None = None  # (rows, V): -inf but in the columns of `ids`

    def update(self, allowed: list[np.ndarray]) -> Vocabulary:
        """This vocabulary (or a new one) covering a pool whose sentences may write `allowed`
        ((V,) bool each, in pool order): the pieces it lacks are added (their rows of the output
        layer copied when the next step needs them), so a joining sentence costs its new pieces."""
        stacked = np.stack(allowed)
        union = stacked.any(0)
        if len(self.ids) > SLACK * np.count_nonzero(union):
            return Vocabulary(self.device).update(allowed)
        if self.scored is None:
            self.scored = np.zeros(len(union), dtype=bool)
        missing = np.flatnonzero(union & ~self.scored)
        if len(missing):
            self.ids = np.concatenate([self.ids, missing])
            self.scored[missing] = True
            self._ids = torch.from_numpy(self.ids).to(self.device)
        keep = torch.from_numpy(stacked[:, self.ids]).to(self.device)
        self.mask = torch.zeros(keep.shape, device=self.device).masked_fill_(~keep, NEG_INF)
        return self

    def keep(self, sentences: Tensor) -> None:
        """The pool kept these sentences (in this order)."""
        self.mask = self.mask[sentences]

    def logits(self, layer: nn.Linear, x: Tensor) -> Tensor:
        """`layer`'s logits (R, U) of the vocabulary's pieces only, for decoding (no dropout),
        and padding columns past them."""
        entry = self._rows.get(id(layer))
        if entry is None:
            entry = self._rows[id(layer)] = [*room_for_rows(layer), 0]
        weight, bias, filled = entry
        n = len(self.ids)
        if filled < n:  # the rows of the pieces added since the last step
            new = self._ids[filled:]
            weight[filled:n] = layer.weight[new]
            if bias is not None:
                bias[filled:n] = layer.bias[new]
            entry[2] = n
        padded = -(-n // COLUMNS) * COLUMNS
        bias = None if bias is None else bias[:padded]
        return decoding_linear(x, weight[:padded], bias, operands(layer.weight))

    def log_probs(self, logits: Tensor) -> Tensor:
        """(R, U) logits (and padding columns), the pool's sentences' rows in order (R a multiple
        of the sentences) -> (R, V) log-probabilities over each sentence's own pieces, -inf for
        every other piece.

        The (R, V) tensor is kept from step to step: the searches only ever write -inf into it,
        so its columns outside `ids` stay -inf and a step writes the R x U scores alone."""
        rows = len(logits)
        if self._spread is None or len(self._spread) < rows:
            self._spread = logits.new_full((rows, len(self.scored)), NEG_INF)
        return spread_log_probs(logits, self.mask, self._ids, self._spread[:rows])


def room_for_rows(layer: nn.Linear) -> tuple[Tensor, Tensor | None]:
    """Zeroed weight and bias rows for every piece of the output layer `layer`, and the padding
    past the last (a multiple of COLUMNS): the pieces scored are copied in, in column order."""
    rows = -(-layer.out_features // COLUMNS) * COLUMNS
    bias = None if layer.bias is None else layer.bias.new_zeros(rows)
    return layer.weight.new_zeros(rows, layer.in_features), bias


def spread_log_probs(logits: Tensor, mask: Tensor, ids: Tensor, spread: Tensor) -> Tensor:
    """(R, >= U) logits of the U columns `ids` names, R a multiple of the sentences of `mask`
    (each sentence's 0 or -inf a column) -> each sentence's log-softmax over its own pieces,
    written into those columns of `spread` (R, V), which it returns."""
    n = len(ids)
    scores = (logits[:, :n].reshape(len(mask), -1, n) + mask[:, None, :n]).view(-1, n)
    torch.log_softmax(scores, dim=-1, out=scores)
    return spread.index_copy_(1, ids, scores)


class FixedVocabulary:
    """`Vocabulary`'s scores for fixed rows (`nmt.decode.rows`), in buffers that keep their place
    from window to window, so that a CUDA graph captured over them reads what each refill writes
    there: the pieces and their rows of the output layer are copied when sentences join (never
    inside a step), the pieces scored are padded to a multiple of COLUMNS with columns every
    sentence masks (a graph per padded `width`, not per count), and the padding's scores go to a
    column past the vocabulary. Rows without a sentence score every piece, to no effect."""

    def __init__(self, layer: nn.Linear, blocks: int, beam: int):
        self.layer, self.size = layer, layer.out_features
        self.weight, self.bias = room_for_rows(layer)
        columns, device = len(self.weight), layer.weight.device
        self.index = torch.empty(columns, dtype=torch.long, device=device)  # column -> piece
        self.mask = torch.empty(blocks, columns, device=device)  # per block: 0 or -inf
        self.spread = torch.empty(blocks * beam, self.size + 1, device=device)
        self.scored = np.zeros(self.size, dtype=bool)
        self.clear()

    @property
    def width(self) -> int:
        """The columns a step scores: the pieces padded to COLUMNS times 1, 2, 3, 4, 6, 8, 12, ...
        (at most half again as many), so that a long file meets a few widths, each a graph to
        capture (steps of COLUMNS made nine for test_2016 at batch 64)."""
        blocks, size = -(-len(self.ids) // COLUMNS), 1
        while size < blocks:
            size = size * 3 // 2 if size > 1 and size & (size - 1) == 0 else 1 << size.bit_length()
        return min(size * COLUMNS, self.mask.size(1))

    def clear(self) -> None:
        """No piece scored, at a search's start or when the pieces start again."""
        self.ids = np.empty(0, dtype=np.int64)
        self.scored[:] = False
        self.index.fill_(self.size)
        self.mask.zero_()
        self.spread.fill_(NEG_INF)

    def update(self, allowed: dict[int, np.ndarray], joining: list[int]) -> None:
        """Blocks `joining` took sentences; `allowed`: the (V,) bool pieces of every block with a
        sentence. Their new pieces get columns after the others (the masks of the blocks already
        there are -inf in them), or, past SLACK times the pool's own, every piece starts again."""
        union = np.logical_or.reduce(list(allowed.values()))
        if len(self.ids) > SLACK * np.count_nonzero(union):
            self.clear()
            joining = list(allowed)
        missing = np.flatnonzero(union & ~self.scored)
        start, end = len(self.ids), len(self.ids) + len(missing)
        if len(missing):
            self.ids = np.concatenate([self.ids, missing])
            self.scored[missing] = True
            new = to_device(torch.from_numpy(missing), self.index.device)
            self.index[start:end] = new
            self.weight[start:end] = self.layer.weight[new]
            if self.bias is not None:
                self.bias[start:end] = self.layer.bias[new]
        keep = np.stack([allowed[b] for b in joining])[:, self.ids]
        keep = to_device(torch.from_numpy(keep), self.mask.device, torch.bool)
        masks = self.mask.new_full((len(joining), self.mask.size(1)), NEG_INF)
        masks[:, :end].masked_fill_(keep, 0.0)
        self.mask[to_device(joining, self.mask.device)] = masks

    def logits(self, layer: nn.Linear, x: Tensor) -> Tensor:
        """The logits (R, width) of the pieces scored, from the rows of `layer` (the output layer
        this vocabulary was made for) that `update` copied."""
        assert layer is self.layer
        width = self.width
        bias = None if self.bias is None else self.bias[:width]
        return decoding_linear(x, self.weight[:width], bias, operands(layer.weight))

    def log_probs(self, logits: Tensor) -> Tensor:
        """(R, width) logits -> (R, V) log-probabilities over each sentence's own pieces, -inf for
        every other piece (a view of the kept `spread`, whose padding column is left out)."""
        return spread_log_probs(logits, self.mask, self.index[: self.width], self.spread)[:, : self.size]
