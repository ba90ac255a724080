"""Greedy and beam search over a batch of sentences at once, through the `StepModel` protocol.

Beam search keeps K live hypotheses per sentence flattened into the batch (B*K rows). Each step
takes the best 2K candidates so that hypotheses ending in EOS leave the live beam without
shrinking it; every piece of decoder state follows the back-pointers (`select`). The memory keeps
one row per sentence: `select` keeps sentences, `share(K)` lets K beams read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.decode.ranking import NEG_INF, Hypothesis, final_score, restrict, search_is_over
from nmt.vocab import BOS, EOS


class StepModel(Protocol):
    """What a search needs from a model: a Seq2Seq, or an Ensemble of them.

    `encode` returns the memory (with `select(index)` and `share(beams)`) and the first decoder
    state (with `select(index)`); `step` maps the previous tokens y (R,) at target `positions`
    (R,) to logits (R, V), the next state and the attention weights (R, S).
    """

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Any, Any]: ...

    def step(self, y: Tensor, state: Any, memory: Any, positions: Tensor) -> tuple[Tensor, Any, Tensor]: ...


def next_log_probs(model: StepModel, y: Tensor, state, mem, t: int, history: Tensor, cfg: DecodeConfig):
    """One decoder step for every row at target position t -> restricted log-probabilities
    (R, V) in fp32, the next state and the attention weights (R, S)."""
    positions = torch.full_like(y, t)
    logits, state, weights = model.step(y, state, mem, positions)
    return restrict(torch.log_softmax(logits.float(), dim=-1), t, history, cfg), state, weights


@torch.no_grad()
def greedy_search(
    model: StepModel, src: Tensor, src_len: Tensor, max_lens: list[int], cfg: DecodeConfig
) -> list[Hypothesis]:
    """The most probable next token at every step, for B sentences at once; a sentence leaves
    the batch as soon as it ends, so no step is spent on it again."""
    mem, state = model.encode(src, src_len)
    B = src.size(0)
    alive = list(range(B))  # the sentence of each row
    y = torch.full((B,), BOS, dtype=torch.long, device=src.device)
    history = torch.empty(B, 0, dtype=torch.long, device=src.device)
    tokens: list[list[int]] = [[] for _ in range(B)]
    weights: list[list[Tensor]] = [[] for _ in range(B)]
    log_prob = [0.0] * B
    for t in range(max(max_lens)):
        logp, state, w = next_log_probs(model, y, state, mem, t, history, cfg)
        best, y = logp.max(-1)
        history = torch.cat([history, y[:, None]], 1)
        keep = []
        for row, (b, token, lp, weight) in enumerate(
            zip(alive, y.tolist(), best.tolist(), w.float().cpu(), strict=True)
        ):
            tokens[b].append(token)
            weights[b].append(weight)
            log_prob[b] += lp
            if token != EOS and t + 1 < max_lens[b]:
                keep.append(row)
        if not keep:
            break
        if len(keep) < len(alive):
            rows = torch.tensor(keep, device=src.device)
            state, mem, y, history = state.select(rows), mem.select(rows), y[rows], history[rows]
            alive = [alive[r] for r in keep]
    out = []
    for b in range(B):
        attention = torch.stack(weights[b])
        out.append(
            Hypothesis(
                tokens[b], final_score(log_prob[b], attention, int(src_len[b]), cfg), log_prob[b], attention
            )
        )
    return out


@dataclass
class Candidates:
    """The best n = 2K extensions of each live sentence's beams at one step, best first."""

    scores: Tensor  # (B, n) cumulative log-probabilities, float64
    origin: Tensor  # (B, n) the beam each candidate extends (a back-pointer)
    token: Tensor  # (B, n)
    history: Tensor  # (B*n, t+1) tokens so far
    attention: Tensor  # (B*n, t+1, S) weights so far


class BeamSearch:
    """The live beams of the sentences still searched, and the hypotheses they have finished
    (a sentence is finished by `ranking.search_is_over`)."""

    def __init__(self, B: int, K: int, S: int, src_len: Tensor, max_lens: list[int], cfg: DecodeConfig):
        device = src_len.device
        self.K, self.cfg, self.max_lens, self.lengths = K, cfg, max_lens, src_len.tolist()
        self.alive = list(range(B))  # the sentences still searched, in the order of their rows
        self.scores = torch.full((B, K), NEG_INF, dtype=torch.float64, device=device)
        self.scores[:, 0] = 0.0  # all beams start identical: only the first may spread
        self.y = torch.full((B * K,), BOS, dtype=torch.long, device=device)
        self.history = torch.empty(B * K, 0, dtype=torch.long, device=device)
        self.attention = torch.empty(B * K, 0, S, device=device)
        self.finished: list[list[Hypothesis]] = [[] for _ in range(B)]

    def candidates(self, logp: Tensor, w: Tensor) -> Candidates:
        """The best 2K candidates overall are among each beam's own best 2K tokens."""
        B, K = len(self.alive), self.K
        per_beam = min(2 * K, logp.size(-1))
        beam_logp, beam_token = logp.topk(per_beam, dim=-1)  # (B*K, per_beam)
        total = self.scores[:, :, None] + beam_logp.double().view(B, K, per_beam)
        n = min(2 * K, K * per_beam)
        top, idx = total.view(B, K * per_beam).topk(n, dim=1)  # (B, n)
        origin = idx // per_beam
        token = beam_token.view(B, K * per_beam).gather(1, idx)
        rows = (torch.arange(B, device=logp.device)[:, None] * K + origin).flatten()  # parent rows
        history = torch.cat([self.history[rows], token.flatten()[:, None]], 1)  # (B*n, t+1)
        attention = torch.cat([self.attention[rows], w[rows].float()[:, None]], 1)
        return Candidates(top, origin, token, history, attention)

    def finish(self, cand: Candidates, t: int) -> None:
        """Hypotheses leave the beam when they end in EOS among the top K, or reach the cap."""
        n = cand.token.size(1)
        position = torch.arange(n, device=cand.token.device)
        at_cap = torch.tensor([t + 1 >= self.max_lens[b] for b in self.alive], device=cand.token.device)
        ends = ((cand.token == EOS) | at_cap[:, None]) & (position < self.K) & torch.isfinite(cand.scores)
        for i, c in ends.nonzero().tolist():
            flat, b = i * n + c, self.alive[i]
            lp, att = float(cand.scores[i, c]), cand.attention[flat]
            score = final_score(lp, att, self.lengths[b], self.cfg)
            self.finished[b].append(Hypothesis(cand.history[flat].tolist(), score, lp, att.cpu()))

    def advance(self, cand: Candidates) -> Tensor:
        """Keep the K best candidates that do not end in EOS; returns their parent rows."""
        B, n = cand.token.shape
        device = cand.token.device
        position = torch.arange(n, device=device)
        live = ((cand.token == EOS).long() * n + position).topk(self.K, dim=1, largest=False).indices
        self.scores = cand.scores.gather(1, live)
        self.y = cand.token.gather(1, live).flatten()
        pick = (torch.arange(B, device=device)[:, None] * n + live).flatten()
        self.history, self.attention = cand.history[pick], cand.attention[pick]
        return (torch.arange(B, device=device)[:, None] * self.K + cand.origin.gather(1, live)).flatten()

    def still_searching(self, t: int) -> list[int]:
        """Indices (into `alive`) of the sentences whose search goes on after step t."""
        return [
            i
            for i, b in enumerate(self.alive)
            if not search_is_over(self.finished[b], self.scores[i], t, self.max_lens[b], self.K, self.cfg)
        ]

    def keep_sentences(self, still: list[int], parent_rows: Tensor) -> tuple[Tensor, Tensor]:
        """Drop the finished sentences' beams; returns the kept sentences and their parent rows."""
        K = self.K
        blocks = torch.tensor(still, device=parent_rows.device)
        block_rows = (blocks[:, None] * K + torch.arange(K, device=blocks.device)).flatten()
        self.y, self.history = self.y[block_rows], self.history[block_rows]
        self.attention, self.scores = self.attention[block_rows], self.scores[blocks]
        self.alive = [self.alive[i] for i in still]
        return blocks, parent_rows[block_rows]

    def best(self, nbest: int) -> list[list[Hypothesis]]:
        return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in self.finished]


@torch.no_grad()
def beam_search(
    model: StepModel, src: Tensor, src_len: Tensor, max_lens: list[int], cfg: DecodeConfig, nbest: int = 1
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each sentence, by `final_score` (see `BeamSearch`)."""
    K = max(cfg.beam, nbest)
    B = src.size(0)
    mem, state = model.encode(src, src_len)
    expand = torch.arange(B, device=src.device).repeat_interleave(K)
    mem, state = mem.share(K), state.select(expand)  # K state rows per sentence, one memory
    beams = BeamSearch(B, K, src.size(1), src_len.to(src.device), max_lens, cfg)
    for t in range(max(max_lens)):
        logp, state, w = next_log_probs(model, beams.y, state, mem, t, beams.history, cfg)
        cand = beams.candidates(logp, w)
        beams.finish(cand, t)
        parent_rows = beams.advance(cand)
        still = beams.still_searching(t)
        if not still:
            break
        if len(still) < len(beams.alive):  # finished sentences leave the batch
            blocks, parent_rows = beams.keep_sentences(still, parent_rows)
            mem = mem.select(blocks)
        state = state.select(parent_rows)
    return beams.best(nbest)
