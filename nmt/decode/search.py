"""Greedy and beam search over a batch of sentences at once, through `decoder.step()`.

Beam search keeps K live hypotheses per sentence flattened into the batch (B*K rows). Each step
takes the best 2K candidates so that hypotheses ending in EOS leave the live beam without
shrinking it; every piece of decoder state follows the back-pointers (`DecoderState.select`).

`model` is anything with `encode(src, src_len) -> (memory, state)` and
`decoder.step(y, state, memory, t) -> (logits, state, weights)`: a Seq2Seq or an Ensemble. The
memory keeps one row per sentence: `select` keeps sentences, `share(K)` lets K beams read it.
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
        logits, state, w = model.decoder.step(y, state, mem, t)
        logp = restrict(torch.log_softmax(logits.float(), dim=-1), t, history, cfg)
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


def search_is_over(
    finished: list[Hypothesis], live_scores: Tensor, t: int, max_len: int, K: int, cfg: DecodeConfig
) -> bool:
    """Whether a sentence's search is over after step t (see `beam_search`)."""
    if t + 1 >= max_len:
        return True
    if len(finished) < K:
        return False
    worst = sorted(h.score for h in finished)[-K]
    return worst >= float(live_scores.max()) / length_penalty(max_len, cfg)


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
    K = max(cfg.beam, nbest)
    mem, state = model.encode(src, src_len)
    expand = torch.arange(src.size(0), device=device).repeat_interleave(K)
    mem, state = mem.share(K), state.select(expand)  # K state rows per sentence, one memory
    alive = list(range(src.size(0)))  # the sentences still searched, in the order of their rows
    scores = torch.full((len(alive), K), NEG_INF, dtype=torch.float64, device=device)
    scores[:, 0] = 0.0  # all beams start identical: only the first may spread
    y = torch.full((len(alive) * K,), BOS, dtype=torch.long, device=device)
    history = torch.empty(len(alive) * K, 0, dtype=torch.long, device=device)
    attention = torch.empty(len(alive) * K, 0, src.size(1), device=device)
    finished: list[list[Hypothesis]] = [[] for _ in alive]
    lengths = src_len.tolist()

    for t in range(max(max_lens)):
        B = len(alive)
        logits, state, w = model.decoder.step(y, state, mem, t)
        logp = restrict(torch.log_softmax(logits.float(), dim=-1), t, history, cfg)
        # The best 2K candidates overall are among each beam's own best 2K tokens.
        per_beam = min(2 * K, logp.size(-1))
        beam_logp, beam_token = logp.topk(per_beam, dim=-1)  # (B*K, per_beam)
        total = scores[:, :, None] + beam_logp.double().view(B, K, per_beam)
        n = min(2 * K, K * per_beam)
        top, idx = total.view(B, K * per_beam).topk(n, dim=1)  # (B, n)
        origin = idx // per_beam  # back-pointer: the beam each candidate extends
        token = beam_token.view(B, K * per_beam).gather(1, idx)
        rows = (torch.arange(B, device=device)[:, None] * K + origin).flatten()  # parent rows
        cand_history = torch.cat([history[rows], token.flatten()[:, None]], 1)  # (B*n, t+1)
        cand_attention = torch.cat([attention[rows], w[rows].float()[:, None]], 1)

        # Hypotheses leave the beam when they end in EOS among the top K, or reach the cap.
        position = torch.arange(n, device=device)
        at_cap = torch.tensor([t + 1 >= max_lens[b] for b in alive], device=device)[:, None]
        ends = ((token == EOS) | at_cap) & (position < K) & torch.isfinite(top)
        for i, c in ends.nonzero().tolist():
            flat, b = i * n + c, alive[i]
            lp, att = float(top[i, c]), cand_attention[flat]
            hyp = Hypothesis(
                cand_history[flat].tolist(), final_score(lp, att, lengths[b], cfg), lp, att.cpu()
            )
            finished[b].append(hyp)

        # The live beam: the K best candidates that do not end in EOS.
        live = ((token == EOS).long() * n + position).topk(K, dim=1, largest=False).indices  # (B, K)
        scores = top.gather(1, live)
        keep_rows = (torch.arange(B, device=device)[:, None] * K + origin.gather(1, live)).flatten()
        y = token.gather(1, live).flatten()
        pick = (torch.arange(B, device=device)[:, None] * n + live).flatten()
        history, attention = cand_history[pick], cand_attention[pick]

        # Finished sentences leave the batch, so no step is spent on them again.
        still = [
            i
            for i, b in enumerate(alive)
            if not search_is_over(finished[b], scores[i], t, max_lens[b], K, cfg)
        ]
        if not still:
            break
        if len(still) < B:
            blocks = torch.tensor(still, device=device)
            block_rows = (blocks[:, None] * K + torch.arange(K, device=device)).flatten()
            keep_rows, y = keep_rows[block_rows], y[block_rows]
            history, attention, scores = history[block_rows], attention[block_rows], scores[blocks]
            mem = mem.select(blocks)
            alive = [alive[i] for i in still]
        state = state.select(keep_rows)

    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]
