"""Greedy and beam search over a batch of sentences at once, through `decoder.step()`.

Beam search keeps K live hypotheses per sentence flattened into the batch (B*K rows). Each step
takes the best 2K candidates so that hypotheses ending in EOS leave the live beam without
shrinking it; every piece of decoder state follows the back-pointers (`DecoderState.select`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.data.tokenizer import BOS, EOS
from nmt.model.seq2seq import Seq2Seq


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, ending in EOS unless the length cap stopped it
    score: float  # the ranking score: log_prob / length_penalty(len(tokens))
    log_prob: float  # sum of the tokens' log-probabilities
    attention: Tensor  # (len(tokens), S) weights, one row per output token


def length_penalty(length: int, alpha: float) -> float:
    """GNMT (Wu et al. 2016): ((5 + |Y|) / 6)^alpha, |Y| counting EOS; alpha = 0 gives 1."""
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def greedy_search(model: Seq2Seq, src: Tensor, src_len: Tensor, max_lens: list[int]) -> list[Hypothesis]:
    """The most probable next token at every step, for B sentences at once."""
    mem, state = model.encode(src, src_len)
    B = src.size(0)
    y = torch.full((B,), BOS, dtype=torch.long, device=src.device)
    limit = torch.tensor(max_lens, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    log_prob = torch.zeros(B, device=src.device)
    tokens, weights = [], []
    for t in range(max(max_lens)):
        logits, state, w = model.decoder.step(y, state, mem, t)
        logp = torch.log_softmax(logits.float(), dim=-1)
        y = logp.argmax(-1)
        log_prob += logp.gather(1, y[:, None]).squeeze(1).masked_fill(finished, 0.0)
        tokens.append(y)
        weights.append(w)
        finished |= (y == EOS) | (t + 1 >= limit)
        if bool(finished.all()):
            break
    tokens_bt, weights_bts = torch.stack(tokens, 1).tolist(), torch.stack(weights, 1).cpu()
    out = []
    for b in range(B):
        seq = tokens_bt[b][: max_lens[b]]
        if EOS in seq:
            seq = seq[: seq.index(EOS) + 1]
        out.append(Hypothesis(seq, float(log_prob[b]), float(log_prob[b]), weights_bts[b, : len(seq)]))
    return out


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    max_lens: list[int],
    beam: int,
    alpha: float = 0.0,
    nbest: int = 1,
) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each sentence, by length-normalised log-probability.

    A sentence is finished when it has `beam` complete hypotheses and no live one can still beat
    the worst of them: a live score can only fall, but its length penalty can still grow up to
    the length cap, so the bound is best_live / lp(max_len). With alpha = 0 that is stopping
    when the best live hypothesis is worse than the K-th finished one.
    """
    device = src.device
    B, K = src.size(0), beam
    mem, state = model.encode(src, src_len)
    expand = torch.arange(B, device=device).repeat_interleave(K)
    mem, state = mem.select(expand), state.select(expand)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: only the first may spread
    y = torch.full((B * K,), BOS, dtype=torch.long, device=device)
    history = torch.empty(B * K, 0, dtype=torch.long, device=device)
    attention = torch.empty(B * K, 0, src.size(1), device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    done = [False] * B
    row_base = torch.arange(B, device=device)[:, None] * K
    position = torch.arange(2 * K, device=device)

    for t in range(max(max_lens)):
        logits, state, w = model.decoder.step(y, state, mem, t)
        V = logits.size(-1)
        logp = torch.log_softmax(logits.float(), dim=-1).view(B, K, V)
        top, idx = (scores[:, :, None] + logp).view(B, K * V).topk(min(2 * K, K * V), dim=1)
        origin, token = idx // V, idx % V  # (B, 2K) back-pointer and token of each candidate
        rows = row_base + origin  # (B, 2K) flat row of the candidate's parent
        is_eos = token == EOS

        # Hypotheses leave the beam when they end in EOS (among the top K) or hit the cap.
        new_history = torch.cat([history[rows.flatten()], token.flatten()[:, None]], 1)
        new_attention = torch.cat([attention[rows.flatten()], w[rows.flatten()][:, None]], 1)
        ends = (is_eos & (position < K)) | torch.tensor([[t + 1 >= m] for m in max_lens], device=device) & (
            position < K
        )
        for b, c in (ends & torch.isfinite(top)).nonzero().tolist():
            if done[b]:
                continue
            flat = b * top.size(1) + c
            log_prob = float(top[b, c])
            n = t + 1
            finished[b].append(
                Hypothesis(
                    new_history[flat].tolist(),
                    log_prob / length_penalty(n, alpha),
                    log_prob,
                    new_attention[flat].cpu(),
                )
            )

        # The live beam: the K best candidates that do not end in EOS.
        live = (is_eos.long() * 2 * K + position).topk(K, dim=1, largest=False).indices  # (B, K)
        scores = top.gather(1, live)
        keep = (row_base + origin.gather(1, live)).flatten()
        y = token.gather(1, live).flatten()
        state = state.select(keep)
        pick = (torch.arange(B, device=device)[:, None] * top.size(1) + live).flatten()
        history, attention = new_history[pick], new_attention[pick]

        for b in range(B):
            if done[b]:
                continue
            if t + 1 >= max_lens[b]:
                done[b] = True
            elif len(finished[b]) >= K:
                worst = sorted(h.score for h in finished[b])[-K]
                best_live = float(scores[b].max())
                done[b] = worst >= best_live / length_penalty(max_lens[b], alpha)
            if done[b]:
                scores[b] = float("-inf")
        if all(done):
            break

    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]
