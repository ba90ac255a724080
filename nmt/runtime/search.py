"""Greedy and beam search in numpy over `OnnxModel`, step for step the algorithms of
`nmt.decode.search` (read that module's docstrings for the why): a finished sentence leaves the
batch; beam search takes the best 2K candidates a step, finishes those among the top K that end
in EOS (or reach the cap), keeps the K best that do not, and stops a sentence by
`ranking.search_is_over`. Finished hypotheses are ranked by the same `final_score`.
"""

from __future__ import annotations

import numpy as np

from nmt.config import DecodeConfig
from nmt.runtime.model import OnnxModel
from nmt.text.ranking import Hypothesis, final_score, restrict, search_is_over
from nmt.vocab import BOS, EOS


def greedy_search(
    model: OnnxModel, src: np.ndarray, src_len: np.ndarray, max_lens: list[int], cfg: DecodeConfig
) -> list[Hypothesis]:
    state = model.encode(src, src_len)
    B = src.shape[0]
    alive = list(range(B))
    y = np.full(B, BOS, dtype=np.int64)
    history = np.empty((B, 0), dtype=np.int64)
    tokens: list[list[int]] = [[] for _ in range(B)]
    weights: list[list[np.ndarray]] = [[] for _ in range(B)]
    log_prob = [0.0] * B
    for t in range(max(max_lens)):
        logp, state, w = model.step(y, state, t)
        logp = restrict(logp, np.full(len(y), t), history.tolist() if cfg.no_repeat_ngram else None, cfg)
        y = logp.argmax(-1)
        best = logp[np.arange(len(y)), y]
        history = np.concatenate([history, y[:, None]], 1)
        keep = []
        for row, (b, token, lp) in enumerate(zip(alive, y.tolist(), best.tolist(), strict=True)):
            tokens[b].append(token)
            weights[b].append(w[row])
            log_prob[b] += lp
            if token != EOS and t + 1 < max_lens[b]:
                keep.append(row)
        if not keep:
            break
        if len(keep) < len(alive):
            rows = np.array(keep)
            state, y, history = state.select(rows), y[rows], history[rows]
            alive = [alive[r] for r in keep]
    out = []
    for b in range(B):
        attention = np.stack(weights[b])
        score = final_score(log_prob[b], len(tokens[b]), attention, int(src_len[b]), cfg)
        out.append(Hypothesis(tokens[b], score, log_prob[b], attention))
    return out


def top_sorted(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries of each row of x, largest first."""
    if k < x.shape[1]:
        part = np.argpartition(-x, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(x.shape[1]), x.shape)
    order = np.argsort(-np.take_along_axis(x, part, 1), axis=1, kind="stable")
    return np.take_along_axis(part, order, 1)


def beam_search(
    model: OnnxModel,
    src: np.ndarray,
    src_len: np.ndarray,
    max_lens: list[int],
    cfg: DecodeConfig,
    nbest: int = 1,
) -> list[list[Hypothesis]]:
    K = max(cfg.beam, nbest)
    B, S = src.shape
    state = model.encode(src, src_len).select(np.repeat(np.arange(B), K))  # K rows per sentence
    lengths = src_len.tolist()
    alive = list(range(B))
    scores = np.full((B, K), -np.inf)
    scores[:, 0] = 0.0  # all beams start identical: only the first may spread
    y = np.full(B * K, BOS, dtype=np.int64)
    history = np.empty((B * K, 0), dtype=np.int64)
    attention = np.empty((B * K, 0, S), dtype=np.float32)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    for t in range(max(max_lens)):
        logp, state, w = model.step(y, state, t)
        logp = restrict(logp, np.full(len(y), t), history.tolist() if cfg.no_repeat_ngram else None, cfg)
        n_alive = len(alive)
        # the best 2K candidates overall are among each beam's own best 2K tokens
        per_beam = min(2 * K, logp.shape[-1])
        beam_token = top_sorted(logp, per_beam)  # (B*K, per_beam)
        beam_logp = np.take_along_axis(logp, beam_token, 1).astype(np.float64)
        total = (scores[:, :, None] + beam_logp.reshape(n_alive, K, per_beam)).reshape(n_alive, K * per_beam)
        n = min(2 * K, K * per_beam)
        idx = top_sorted(total, n)  # (B, n)
        top = np.take_along_axis(total, idx, 1)
        origin = idx // per_beam
        token = np.take_along_axis(beam_token.reshape(n_alive, K * per_beam), idx, 1)
        rows = (np.arange(n_alive)[:, None] * K + origin).ravel()  # parent rows
        cand_history = np.concatenate([history[rows], token.reshape(-1, 1)], 1)
        cand_attention = np.concatenate([attention[rows], w[rows][:, None]], 1)
        # finish: among the top K, those that end in EOS or reach the cap
        position = np.arange(n)
        at_cap = np.array([t + 1 >= max_lens[b] for b in alive])
        ends = ((token == EOS) | at_cap[:, None]) & (position < K) & np.isfinite(top)
        for i, c in np.argwhere(ends).tolist():
            flat, b = i * n + c, alive[i]
            lp, att = float(top[i, c]), cand_attention[flat]
            finished[b].append(
                Hypothesis(cand_history[flat].tolist(), final_score(lp, t + 1, att, lengths[b], cfg), lp, att)
            )
        # advance: the K best candidates that do not end in EOS
        live = np.argsort((token == EOS) * n + position, axis=1, kind="stable")[:, :K]
        scores = np.take_along_axis(top, live, 1)
        y = np.take_along_axis(token, live, 1).ravel()
        pick = (np.arange(n_alive)[:, None] * n + live).ravel()
        history, attention = cand_history[pick], cand_attention[pick]
        parent_rows = (np.arange(n_alive)[:, None] * K + np.take_along_axis(origin, live, 1)).ravel()
        still = [
            i
            for i, b in enumerate(alive)
            if not search_is_over(
                finished[b], float(scores[i].max()), t + 1 >= max_lens[b], max_lens[b], nbest, cfg
            )
        ]
        if not still:
            break
        if len(still) < n_alive:  # finished sentences leave the batch
            blocks = np.array(still)
            block_rows = (blocks[:, None] * K + np.arange(K)).ravel()
            y, history, attention, scores = (
                y[block_rows],
                history[block_rows],
                attention[block_rows],
                scores[blocks],
            )
            alive = [alive[i] for i in still]
            parent_rows = parent_rows[block_rows]
        state = state.select(parent_rows)
    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]
