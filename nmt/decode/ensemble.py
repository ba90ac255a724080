"""Several models decoding as one: the per-step log-probabilities are averaged (a log-linear
ensemble). `Ensemble` implements the searches' `StepModel` protocol, so any search works on it
unchanged."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.model.seq2seq import Seq2Seq


@dataclass
class Members:
    """The per-model memories or decoder states, reordered together."""

    items: list

    def select(self, index: Tensor) -> Members:
        return Members([item.select(index) for item in self.items])

    def rows(self, index: Tensor, length: int) -> Members:
        return Members([item.rows(index, length) for item in self.items])

    def compact(self, rows: int, holes: Tensor, fillers: Tensor) -> Members:
        return Members([item.compact(rows, holes, fillers) for item in self.items])

    def share(self, beams: int) -> Members:
        return Members([item.share(beams) for item in self.items])

    def join(self, other: Members, *longest: int) -> Members:
        """`longest`: memories only, the longest source of this pool's sentences."""
        return Members([a.join(b, *longest) for a, b in zip(self.items, other.items, strict=True)])


class Ensemble:
    def __init__(self, models: list[Seq2Seq]):
        self.models = models

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Members, Members]:
        encoded = [model.encode(src, src_len) for model in self.models]
        return Members([m for m, _ in encoded]), Members([s for _, s in encoded])

    def step(
        self, y: Tensor, state: Members, mem: Members, positions: Tensor, vocabulary=None
    ) -> tuple[Tensor, Members, Tensor]:
        """Mean log-probabilities (R, V), or (R, U) over a `vocabulary`'s pieces, and mean
        attention weights (R, S) of the members."""
        outputs = [
            model.step(y, s, m, positions, vocabulary)
            for model, s, m in zip(self.models, state.items, mem.items, strict=True)
        ]
        log_probs = torch.stack([torch.log_softmax(logits.float(), -1) for logits, _, _ in outputs]).mean(0)
        weights = torch.stack([w.float() for _, _, w in outputs]).mean(0)
        return log_probs, Members([s for _, s, _ in outputs]), weights
