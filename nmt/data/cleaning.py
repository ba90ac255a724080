"""Text clean-up before tokenisation, and the training-pair filters, each drop counted."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable

import numpy as np

from nmt.config import DataConfig


def normalize(text: str, form: str) -> str:
    """Unicode normalisation and trimmed whitespace (internal runs of spaces become one)."""
    if form != "none":
        text = unicodedata.normalize(form, text)
    return " ".join(text.split())


def clean_pairs(pairs: Iterable[tuple[str, str]], cfg: DataConfig) -> tuple[list[tuple[str, str]], Counter]:
    """Normalise every pair and drop those with an empty side; `Counter` says how many and why."""
    kept, dropped = [], Counter()
    for src, tgt in pairs:
        src, tgt = normalize(src, cfg.normalize), normalize(tgt, cfg.normalize)
        if not src or not tgt:
            dropped["empty side"] += 1
        else:
            kept.append((src, tgt))
    return kept, dropped


def length_filter(src_lens, tgt_lens, cfg: DataConfig) -> tuple[np.ndarray, Counter]:
    """Indices of the pairs to keep by subword length; the rest are counted by reason."""
    s, t = np.asarray(src_lens, dtype=np.int64), np.asarray(tgt_lens, dtype=np.int64)
    too_long = (s > cfg.max_len) | (t > cfg.max_len)
    lopsided = ~too_long & (np.maximum(s, t) > cfg.max_ratio * np.maximum(1, np.minimum(s, t)))
    dropped = Counter()
    if too_long.any():
        dropped[f"longer than {cfg.max_len} subwords"] = int(too_long.sum())
    if lopsided.any():
        dropped[f"length ratio above {cfg.max_ratio:g}"] = int(lopsided.sum())
    return np.flatnonzero(~(too_long | lopsided)), dropped


def describe_dropped(dropped: Counter) -> str:
    """`12 empty side, 3 longer than 100 subwords`, or `none`."""
    return ", ".join(f"{n} {why}" for why, n in sorted(dropped.items())) or "none"
