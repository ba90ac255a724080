"""The output layer restricted to a shortlist (`nmt.text.shortlist`) for a pool of sentences.

A step computes the logits of the pieces the pool's sentences may write only (the output layer's
rows of those pieces, copied as sentences bring new ones), then a mask keeps each sentence to
its own pieces before the softmax, so a sentence decodes the same whatever shares
its pool. The log-probabilities are spread back to the whole vocabulary (-inf elsewhere), so the
searches and their rules (EOS, bans, prefixes, constraints) work on token ids as without one.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from nmt.model.linear import decoding_linear
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
        if entry is None:  # room for every piece, and the padding past the last
            shape = (-(-layer.out_features // COLUMNS) * COLUMNS, layer.in_features)
            bias = None if layer.bias is None else layer.bias.new_zeros(shape[0])
            entry = self._rows[id(layer)] = [layer.weight.new_zeros(shape), bias, 0]
        weight, bias, filled = entry
        n = len(self.ids)
        if filled < n:  # the rows of the pieces added since the last step
            new = self._ids[filled:]
            weight[filled:n] = layer.weight[new]
            if bias is not None:
                bias[filled:n] = layer.bias[new]
            entry[2] = n
        padded = -(-n // COLUMNS) * COLUMNS
        return decoding_linear(x, weight[:padded], None if bias is None else bias[:padded])

    def log_probs(self, logits: Tensor) -> Tensor:
        """(R, U) logits (and padding columns), the pool's sentences' rows in order (R a multiple
        of the sentences) -> (R, V) log-probabilities over each sentence's own pieces, -inf for
        every other piece.

        The (R, V) tensor is kept from step to step: the searches only ever write -inf into it,
        so its columns outside `ids` stay -inf and a step writes the R x U scores alone."""
        n = len(self.ids)
        scores = (logits[:, :n].reshape(len(self.mask), -1, n) + self.mask[:, None]).view(-1, n)
        torch.log_softmax(scores, dim=-1, out=scores)
        rows = len(scores)
        if self._spread is None or len(self._spread) < rows:
            self._spread = scores.new_full((rows, len(self.scored)), NEG_INF)
        return self._spread[:rows].index_copy_(1, self._ids, scores)
