"""Forced decoding: the model's log-probability and attention on a GIVEN target.

It steps through the reference with the same `StepModel.step` the searches use (so a Seq2Seq and
an Ensemble score alike, and the forced log-probability of a hypothesis is exactly the one its
search accumulated), feeding each reference token as the next input. Its attention is comparable
across systems: every system's rows are the same reference words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.decode.search import StepModel
from nmt.vocab import BOS, PAD
from nmt.words import WordMap


@dataclass
class ForcedScore:
    src_pieces: list[str]  # with the final "</s>"
    tgt_pieces: list[str]  # the reference's pieces with the final "</s>"
    token_log_probs: list[float]  # one per target piece, "</s>" included
    attention: Tensor  # (len(tgt_pieces), len(src_pieces)) weights
    truncated: bool = False  # the source was cut to the model's limit

    @property
    def log_prob(self) -> float:
        return sum(self.token_log_probs)

    @property
    def length(self) -> int:
        """Target pieces scored, "</s>" included (as the training loss counts them)."""
        return len(self.token_log_probs)

    @property
    def ppl(self) -> float:
        return math.exp(min(-self.log_prob / max(1, self.length), 50.0))

    def word_log_probs(self) -> list[tuple[str, float]]:
        """Per target word: the sum of its pieces' log-probabilities (see nmt.words)."""
        words = WordMap.of(self.tgt_pieces)
        return list(zip(words.words, words.sum_pieces(self.token_log_probs).tolist(), strict=True))


@torch.no_grad()
def forced_decode(
    model: StepModel, src: Tensor, src_len: Tensor, targets: list[list[int]]
) -> list[tuple[list[float], Tensor]]:
    """Per sentence: the log-probability of each target id (each list ends in EOS) and the
    attention weights (T, S) while producing it. Log-probabilities are the log-softmax of what
    `step` returns, as in `search.step_log_probs` (an Ensemble's mean is renormalised there too)."""
    B, T = len(targets), max(len(t) for t in targets)
    tgt = torch.full((B, T), PAD, dtype=torch.long)
    for b, row in enumerate(targets):
        tgt[b, : len(row)] = torch.tensor(row)
    tgt = tgt.to(src.device)
    mem, state = model.encode(src, src_len)
    y = torch.full((B,), BOS, dtype=torch.long, device=src.device)
    log_probs, weights = [], []
    for t in range(T):
        logits, state, w = model.step(y, state, mem, torch.full_like(y, t))
        logp = torch.log_softmax(logits.float(), dim=-1)
        log_probs.append(logp.gather(1, tgt[:, t : t + 1]).squeeze(1))
        weights.append(w.float())
        y = tgt[:, t]
    lp = torch.stack(log_probs, 1).cpu()  # (B, T)
    att = torch.stack(weights, 1).cpu()  # (B, T, S)
    return [(lp[b, : len(row)].tolist(), att[b, : len(row)]) for b, row in enumerate(targets)]
