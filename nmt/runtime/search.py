"""Greedy and beam search in numpy over `OnnxModel`, step for step the algorithms of
`nmt.decode.search` (read that module's docstrings for the why): a finished sentence leaves the
batch; beam search takes the best 2K candidates a step, finishes those among the top K that end
in EOS (or reach the cap), keeps the K best that do not, and stops a sentence by
`ranking.search_is_over`. Finished hypotheses are ranked by the same `final_score`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nmt.config import DecodeConfig
from nmt.runtime.model import OnnxModel
from nmt.text.ranking import Hypothesis, beam_width, final_score, restrict, search_is_over
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
    K = beam_width(cfg, nbest)
    B, S = src.shape
    state = model.encode(src, src_len).select(np.repeat(np.arange(B), K))  # K rows per sentence
    lengths = src_len.tolist()
    beams = Beams.start(B, K, S)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    for t in range(max(max_lens)):
        logp, state, w = model.step(beams.y, state, t)
        history = beams.history.tolist() if cfg.no_repeat_ngram else None
        logp = restrict(logp, np.full(len(beams.y), t), history, cfg)
        c = extend(beams, logp, w, K)
        at_cap = np.array([t + 1 >= max_lens[b] for b in beams.alive])
        for i, j in np.argwhere(c.ends(K, at_cap)).tolist():
            b = beams.alive[i]
            finished[b].append(c.hypothesis(i, j, t, lengths[b], cfg))
        beams, parent_rows = advance(c, beams.alive, K)
        still = [
            i
            for i, b in enumerate(beams.alive)
            if not search_is_over(
                finished[b], float(beams.scores[i].max()), t + 1 >= max_lens[b], max_lens[b], nbest, cfg
            )
        ]
        if not still:
            break
        if len(still) < len(beams.alive):  # finished sentences leave the batch
            parent_rows = parent_rows[beams.keep(still, K)]
        state = state.select(parent_rows)
    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]


@dataclass
class Beams:
    """The K beams of every sentence still searched: row i * K + k is beam k of sentence alive[i]."""

    alive: list[int]  # the sentences, by their index in the batch
    scores: np.ndarray  # (A, K) log-probabilities, A = len(alive)
    y: np.ndarray  # (A * K,) each beam's last token
    history: np.ndarray  # (A * K, t) its tokens
    attention: np.ndarray  # (A * K, t, S) its attention weights

    @classmethod
    def start(cls, B: int, K: int, S: int) -> Beams:
        scores = np.full((B, K), -np.inf)
        scores[:, 0] = 0.0  # all beams start identical: only the first may spread
        y = np.full(B * K, BOS, dtype=np.int64)
        history = np.empty((B * K, 0), dtype=np.int64)
        return cls(list(range(B)), scores, y, history, np.empty((B * K, 0, S), dtype=np.float32))

    def keep(self, still: list[int], K: int) -> np.ndarray:
        """Only the sentences at positions `still` of `alive` go on; returns the rows they had."""
        blocks = np.array(still)
        rows = (blocks[:, None] * K + np.arange(K)).ravel()
        self.y, self.history, self.attention = self.y[rows], self.history[rows], self.attention[rows]
        self.scores, self.alive = self.scores[blocks], [self.alive[i] for i in still]
        return rows


@dataclass
class Candidates:
    """Each sentence's n best one-token extensions of its beams, best first (n = 2K, fewer for a
    tiny vocabulary); row i * n + j of `history` and `attention` is candidate j of sentence i."""

    scores: np.ndarray  # (A, n) log-probabilities
    origin: np.ndarray  # (A, n) the beam each extends
    token: np.ndarray  # (A, n) the token it adds
    history: np.ndarray  # (A * n, t + 1)
    attention: np.ndarray  # (A * n, t + 1, S)

    def ends(self, K: int, at_cap: np.ndarray) -> np.ndarray:
        """(A, n): the candidates among the top K that end in EOS or reach the cap (`at_cap`: (A,))."""
        position = np.arange(self.token.shape[1])
        return ((self.token == EOS) | at_cap[:, None]) & (position < K) & np.isfinite(self.scores)

    def hypothesis(self, i: int, j: int, t: int, source_length: int, cfg: DecodeConfig) -> Hypothesis:
        """Candidate j of sentence i, finished at step t."""
        flat = i * self.token.shape[1] + j
        lp, att = float(self.scores[i, j]), self.attention[flat]
        return Hypothesis(
            self.history[flat].tolist(), final_score(lp, t + 1, att, source_length, cfg), lp, att
        )


def extend(beams: Beams, logp: np.ndarray, w: np.ndarray, K: int) -> Candidates:
    """The 2K best candidates of each sentence, found among each beam's own best 2K tokens
    (`logp`: (A * K, V) log-probabilities of the next token, `w`: (A * K, S) attention)."""
    n_alive = len(beams.alive)
    per_beam = min(2 * K, logp.shape[-1])
    beam_token = top_sorted(logp, per_beam)  # (A*K, per_beam)
    beam_logp = np.take_along_axis(logp, beam_token, 1).astype(np.float64)
    grown = beams.scores[:, :, None] + beam_logp.reshape(n_alive, K, per_beam)  # (A, K, per_beam)
    total = grown.reshape(n_alive, K * per_beam)
    idx = top_sorted(total, min(2 * K, K * per_beam))  # (A, n)
    origin = idx // per_beam
    token = np.take_along_axis(beam_token.reshape(n_alive, K * per_beam), idx, 1)
    rows = (np.arange(n_alive)[:, None] * K + origin).ravel()  # parent rows
    history = np.concatenate([beams.history[rows], token.reshape(-1, 1)], 1)
    attention = np.concatenate([beams.attention[rows], w[rows][:, None]], 1)
    return Candidates(np.take_along_axis(total, idx, 1), origin, token, history, attention)


def advance(c: Candidates, alive: list[int], K: int) -> tuple[Beams, np.ndarray]:
    """The next beams: each sentence's K best candidates that do not end in EOS; and the rows of
    their parents, whose decoder states they carry on."""
    n_alive, n = c.token.shape
    live = np.argsort((c.token == EOS) * n + np.arange(n), axis=1, kind="stable")[:, :K]
    pick = (np.arange(n_alive)[:, None] * n + live).ravel()
    parent_rows = (np.arange(n_alive)[:, None] * K + np.take_along_axis(c.origin, live, 1)).ravel()
    scores, y = np.take_along_axis(c.scores, live, 1), np.take_along_axis(c.token, live, 1).ravel()
    return Beams(alive, scores, y, c.history[pick], c.attention[pick]), parent_rows
