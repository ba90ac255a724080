"""How finished hypotheses are ranked and when a beam may stop: the rules every search engine
shares (the torch searches in `nmt.decode.search`, the onnxruntime ones in `nmt.runtime`).

No torch here: attention matrices and score rows may be torch tensors or numpy arrays, so both
engines rank with the same arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from nmt.config import DecodeConfig
from nmt.vocab import BOS, EOS, PAD, UNK

NEG_INF = float("-inf")


@dataclass
class Source:
    """One sentence to translate: the caller's key for it, its ids (ending in EOS) and the cap
    on its output length (EOS included)."""

    key: Any  # returned with the hypotheses: the line number, or a server's (job, sentence)
    ids: list[int]
    max_len: int
    prefix: list[int] = field(default_factory=list)  # target ids every hypothesis starts with
    include: list[list[int]] = field(default_factory=list)  # phrases (target ids) it must contain
    avoid: list[list[int]] = field(default_factory=list)  # phrases it must not contain
    avoiding: Any = None  # the phrases to avoid as text (`constraints.Avoiding`), when there are any
    vocabulary: Any = None  # (V,) bool: the target pieces it may write (a shortlist's); None: all

    @property
    def steered(self) -> bool:
        """Whether it has lexical constraints (`nmt.text.constraints`)."""
        return bool(self.include or self.avoid)


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, ending in EOS unless the length cap stopped it
    score: float  # the ranking score: log_prob / length_penalty + coverage_penalty
    log_prob: float  # sum of the tokens' log-probabilities
    attention: Any  # (len(tokens), S) weights (a tensor or an array); None when not kept
    unmet: int = 0  # constraints it misses: phrases not written, phrases to avoid in its text


def beam_width(cfg: DecodeConfig, nbest: int) -> int:
    """Hypotheses a sentence's search keeps: the beam, widened to hold the `nbest` asked for."""
    return max(cfg.beam, nbest)


def is_greedy(cfg: DecodeConfig, nbest: int) -> bool:
    """Whether a search keeps one hypothesis (greedy) or a beam: decided here for both engines,
    so the torch and onnxruntime decoders of one model always run the same search."""
    return beam_width(cfg, nbest) == 1


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


def final_score(log_prob: float, length: int, attention: Any, src_len: int, cfg: DecodeConfig) -> float:
    """`attention` may be None unless the coverage penalty is on."""
    coverage = coverage_penalty(attention, src_len, cfg) if cfg.coverage else 0.0
    return log_prob / length_penalty(length, cfg) + coverage


def restrict(logp: Any, positions: Any, histories: list[list[int]] | None, cfg: DecodeConfig) -> Any:
    """Forbid tokens the settings rule out, in place: logp (N, V) for rows at target `positions`
    (N,) (torch tensors or numpy arrays); `histories`, each row's tokens so far, is needed only
    with `no_repeat_ngram`."""
    logp[:, PAD] = NEG_INF  # one column at a time: a list index is sent to a GPU, waiting for it
    logp[:, BOS] = NEG_INF
    if cfg.min_len:
        early = positions + 1 < cfg.min_len
        if hasattr(logp, "masked_fill_"):  # torch: a boolean-mask index would read the mask back
            logp[:, EOS].masked_fill_(early, NEG_INF)
        else:
            logp[early, EOS] = NEG_INF
    if not cfg.allow_unk:
        logp[:, UNK] = NEG_INF
    n = cfg.no_repeat_ngram
    if n:
        for row, seq in enumerate(histories):
            t = len(seq)
            if t + 1 < n:
                continue
            prefix = seq[t - n + 1 :] if n > 1 else []
            banned = [seq[i + n - 1] for i in range(t - n + 1) if seq[i : i + n - 1] == prefix]
            logp[row, banned] = NEG_INF
    return logp


def search_is_over(
    finished: list[Hypothesis], best_live: float, capped: bool, max_len: int, nbest: int, cfg: DecodeConfig
) -> bool:
    """Whether a sentence's beam search is over: at the length cap, or when no live hypothesis
    can still beat the `nbest`-th best finished one.

    A live log-prob can only fall, its length penalty can grow at most to the length cap's, and
    the coverage penalty is never above 0, so the bound is best_live / lp(max_len). For nbest 1
    this compares with the best finished hypothesis: it stops earlier than waiting for K finished
    ones and is just as exact. (Stopping as soon as the top beam ends would be wrong once a length
    penalty is on.)
    """
    if capped:
        return True
    threshold = stop_threshold(finished, nbest)
    return threshold is not None and out_of_reach(threshold, best_live, length_penalty(max_len, cfg))


def out_of_reach(threshold: Any, best_live: Any, cap_penalty: Any) -> Any:
    """Whether no live hypothesis can reach `threshold` any more: the best live log-prob over the
    length penalty at the cap (floats, or numpy arrays elementwise with the same IEEE arithmetic,
    `nmt.decode.rows` following many steps at once; a NaN threshold is never reached)."""
    return threshold >= best_live / cap_penalty


def stop_threshold(finished: list[Hypothesis], nbest: int) -> float | None:
    """The score of the `nbest`-th best finished hypothesis, which the live ones must be able to
    beat for a search to go on (None: fewer have finished)."""
    if len(finished) < nbest:
        return None
    return sorted((h.score for h in finished), reverse=True)[nbest - 1]
