"""Greedy and beam search over a batch of sentences at once, through `decoder.step()`.

Beam search keeps K live hypotheses per sentence flattened into the batch (B*K rows). Each step
takes the best 2K candidates so that hypotheses ending in EOS leave the live beam without
shrinking it; every piece of decoder state follows the back-pointers (`DecoderState.select`).

`model` is anything with `encode(src, src_len) -> (memory, state)` and
`decoder.step(y, state, memory, t) -> (logits, state, weights)`: a Seq2Seq or an Ensemble.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.data.tokenizer import BOS, EOS, PAD, UNK

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, ending in EOS unless the length cap stopped it
    score: float  # the ranking score: log_prob / length_penalty + coverage_penalty
    log_prob: float  # sum of the tokens' log-probabilities
    attention: Tensor  # (len(tokens), S) weights, one row per output token


def length_penalty(length: int, cfg: DecodeConfig) -> float:
    """|Y| counts EOS. `avg`: |Y|^alpha (alpha = 1: mean log-prob); `gnmt` (Wu et al. 2016):
    ((5 + |Y|) / 6)^alpha. Both grow with |Y|, which the beam's stop rule relies on."""
    if cfg.length_penalty == "avg":
        return length**cfg.alpha
    if cfg.length_penalty == "gnmt":
        return ((5 + length) / 6) ** cfg.alpha
    return 1.0


def coverage_penalty(attention: Tensor, src_len: int, cfg: DecodeConfig) -> float:
    """GNMT: beta * sum_i log(min(sum_j a_ji, 1)) over the real source words i; at most 0.

    Coverage is floored at 1e-6 so a word that got exactly zero weight (outside every local
    window) costs a finite amount instead of -inf.
    """
    if cfg.coverage == 0:
        return 0.0
    covered = attention[:, :src_len].sum(0).clamp(1e-6, 1.0)
    return cfg.coverage * float(covered.log().sum())


def final_score(log_prob: float, attention: Tensor, src_len: int, cfg: DecodeConfig) -> float:
    return log_prob / length_penalty(attention.size(0), cfg) + coverage_penalty(attention, src_len, cfg)


def restrict(logp: Tensor, t: int, history: Tensor, cfg: DecodeConfig) -> Tensor:
    """Forbid tokens the settings rule out at step t: logp (N, V), history (N, t) tokens so far."""
    logp[:, [PAD, BOS]] = NEG_INF
    if t + 1 < cfg.min_len:
        logp[:, EOS] = NEG_INF
    if not cfg.allow_unk:
        logp[:, UNK] = NEG_INF
    n = cfg.no_repeat_ngram
    if n and t + 1 >= n:
        rows = history.tolist()
        for row, seq in enumerate(rows):
            prefix = seq[t - n + 1 :] if n > 1 else []
            banned = [seq[i + n - 1] for i in range(t - n + 1) if seq[i : i + n - 1] == prefix]
            logp[row, banned] = NEG_INF
    return logp


@torch.no_grad()
def greedy_search(
    model, src: Tensor, src_len: Tensor, max_lens: list[int], cfg: DecodeConfig
) -> list[Hypothesis]:
    """The most probable next token at every step, for B sentences at once."""
    mem, state = model.encode(src, src_len)
    B = src.size(0)
    y = torch.full((B,), BOS, dtype=torch.long, device=src.device)
    limit = torch.tensor(max_lens, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    log_prob = torch.zeros(B, dtype=torch.float64, device=src.device)
    history = torch.empty(B, 0, dtype=torch.long, device=src.device)
    weights = []
    for t in range(max(max_lens)):
        logits, state, w = model.decoder.step(y, state, mem, t)
        logp = restrict(torch.log_softmax(logits.float(), dim=-1), t, history, cfg)
        y = logp.argmax(-1)
        log_prob += logp.gather(1, y[:, None]).squeeze(1).masked_fill(finished, 0.0)
        history = torch.cat([history, y[:, None]], 1)
        weights.append(w)
        finished |= (y == EOS) | (t + 1 >= limit)
        if bool(finished.all()):
            break
    tokens, attention = history.tolist(), torch.stack(weights, 1).float().cpu()
    out = []
    for b in range(B):
        seq = tokens[b][: max_lens[b]]
        if EOS in seq:
            seq = seq[: seq.index(EOS) + 1]
        lp, att = float(log_prob[b]), attention[b, : len(seq)]
        out.append(Hypothesis(seq, final_score(lp, att, int(src_len[b]), cfg), lp, att))
    return out


@torch.no_grad()
def beam_search(
    model, src: Tensor, src_len: Tensor, max_lens: list[int], cfg: DecodeConfig, nbest: int = 1
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each sentence, by `final_score`.

    A sentence is finished when it has K complete hypotheses and no live one can still beat the
    worst of them. A live log-prob can only fall, its length penalty can grow at most to the
    length cap's, and the coverage penalty is never above 0, so the bound is
    best_live / lp(max_len). (Stopping as soon as the top hypothesis ends is wrong once a length
    penalty is on.)
    """
    device = src.device
    B, K = src.size(0), max(cfg.beam, nbest)
    mem, state = model.encode(src, src_len)
    expand = torch.arange(B, device=device).repeat_interleave(K)
    mem, state = mem.select(expand), state.select(expand)
    scores = torch.full((B, K), NEG_INF, dtype=torch.float64, device=device)
    scores[:, 0] = 0.0  # all beams start identical: only the first may spread
    y = torch.full((B * K,), BOS, dtype=torch.long, device=device)
    history = torch.empty(B * K, 0, dtype=torch.long, device=device)
    attention = torch.empty(B * K, 0, src.size(1), device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    done = [False] * B
    lengths = src_len.tolist()
    row_base = torch.arange(B, device=device)[:, None] * K
    position = torch.arange(2 * K, device=device)

    for t in range(max(max_lens)):
        logits, state, w = model.decoder.step(y, state, mem, t)
        logp = restrict(torch.log_softmax(logits.float(), dim=-1), t, history, cfg).double()
        V = logp.size(-1)
        top, idx = (scores[:, :, None] + logp.view(B, K, V)).view(B, K * V).topk(2 * K, dim=1)
        origin, token = idx // V, idx % V  # (B, 2K) back-pointer and token of each candidate
        rows = (row_base + origin).flatten()  # flat row of each candidate's parent
        cand_history = torch.cat([history[rows], token.flatten()[:, None]], 1)  # (B*2K, t+1)
        cand_attention = torch.cat([attention[rows], w[rows].float()[:, None]], 1)

        # Hypotheses leave the beam when they end in EOS among the top K, or reach the cap.
        at_cap = torch.tensor([t + 1 >= m for m in max_lens], device=device)[:, None]
        ends = ((token == EOS) | at_cap) & (position < K) & torch.isfinite(top)
        for b, c in ends.nonzero().tolist():
            if not done[b]:
                flat = b * 2 * K + c
                lp, att = float(top[b, c]), cand_attention[flat]
                hyp = Hypothesis(
                    cand_history[flat].tolist(), final_score(lp, att, lengths[b], cfg), lp, att.cpu()
                )
                finished[b].append(hyp)

        # The live beam: the K best candidates that do not end in EOS.
        live = ((token == EOS).long() * 2 * K + position).topk(K, dim=1, largest=False).indices  # (B, K)
        scores = top.gather(1, live)
        state = state.select((row_base + origin.gather(1, live)).flatten())
        y = token.gather(1, live).flatten()
        pick = (torch.arange(B, device=device)[:, None] * 2 * K + live).flatten()
        history, attention = cand_history[pick], cand_attention[pick]

        for b in range(B):
            if done[b]:
                continue
            if t + 1 >= max_lens[b]:
                done[b] = True
            elif len(finished[b]) >= K:
                worst = sorted(h.score for h in finished[b])[-K]
                bound = float(scores[b].max()) / length_penalty(max_lens[b], cfg)
                done[b] = worst >= bound
            if done[b]:
                scores[b] = NEG_INF
        if all(done):
            break

    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]
