"""How finished hypotheses are ranked and when a beam may stop: the rules every search engine
shares (the torch searches in `nmt.decode.search`, the onnxruntime ones in `nmt.runtime`).

No torch here: attention matrices and score rows may be torch tensors or numpy arrays, so both
engines rank with the same arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nmt.config import DecodeConfig
from nmt.vocab import BOS, EOS, PAD, UNK

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, ending in EOS unless the length cap stopped it
    score: float  # the ranking score: log_prob / length_penalty + coverage_penalty
    log_prob: float  # sum of the tokens' log-probabilities
    attention: Any  # (len(tokens), S) weights, one row per output token (a tensor or an array)


def length_penalty(length: int, cfg: DecodeConfig) -> float:
    """|Y| counts EOS. `avg`: |Y|^alpha (alpha = 1: mean log-prob); `gnmt` (Wu et al. 2016):
    ((5 + |Y|) / 6)^alpha. Both grow with |Y|, which the beam's stop rule relies on."""
    if cfg.length_penalty == "avg":
        return length**cfg.alpha
    if cfg.length_penalty == "gnmt":
        return ((5 + length) / 6) ** cfg.alpha
    return 1.0


def coverage_penalty(attention: Any, src_len: int, cfg: DecodeConfig) -> float:
    """GNMT: beta * sum_i log(min(sum_j a_ji, 1)) over the real source words i; at most 0.

    Coverage is floored at 1e-6 so a word that got exactly zero weight (outside every local
    window) costs a finite amount instead of -inf.
    """
    if cfg.coverage == 0:
        return 0.0
    covered = attention[:, :src_len].sum(0).tolist()
    return cfg.coverage * sum(math.log(min(max(c, 1e-6), 1.0)) for c in covered)


def final_score(log_prob: float, attention: Any, src_len: int, cfg: DecodeConfig) -> float:
    return log_prob / length_penalty(len(attention), cfg) + coverage_penalty(attention, src_len, cfg)


def restrict(logp: Any, t: int, history: Any, cfg: DecodeConfig) -> Any:
    """Forbid tokens the settings rule out at step t, in place: logp (N, V), history (N, t)
    tokens so far (torch tensors or numpy arrays)."""
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


def search_is_over(
    finished: list[Hypothesis], live_scores: Any, t: int, max_len: int, K: int, cfg: DecodeConfig
) -> bool:
    """Whether a sentence's search is over after step t.

    Over when it has K complete hypotheses and no live one can still beat the worst of them. A
    live log-prob can only fall, its length penalty can grow at most to the length cap's, and the
    coverage penalty is never above 0, so the bound is best_live / lp(max_len). (Stopping as soon
    as the top hypothesis ends is wrong once a length penalty is on.)
    """
    if t + 1 >= max_len:
        return True
    if len(finished) < K:
        return False
    worst = sorted(h.score for h in finished)[-K]
    return worst >= float(live_scores.max()) / length_penalty(max_len, cfg)
