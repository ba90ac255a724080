"""Dropout whose mask is drawn as uniform numbers on a CPU.

Why: torch's CPU dropout draws its mask with `bernoulli_`, which runs on one thread; a bench
training step's three dropouts (source and target embeddings, the output layer's input) spent
4% of a bf16 step there at 2 threads, as long as at one. `rand_like` draws on every thread:
the same mask distribution (each entry kept with probability 1 - p, the kept ones scaled by
1 / (1 - p)) 2.4-2.7x faster (docs/notes/performance-history.md §23.15). A GPU keeps torch's
fused dropout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """F.dropout(x, p, training), its mask from `torch.rand_like` on a CPU."""
    if not training or p == 0 or x.device.type != "cpu":
        return F.dropout(x, p, training)
    scale = 1 / (1 - p) if p < 1 else 0.0
    keep = torch.rand_like(x, dtype=torch.float32) >= p  # drawn in fp32 whatever x's dtype
    return x * (keep * scale).to(x.dtype)


class Dropout(nn.Dropout):
    """nn.Dropout through `dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
