"""Text clean-up before tokenisation, and the training-pair filters, each drop counted."""

from __future__ import annotations

import unicodedata
from collections import Counter

from nmt.config import DataConfig


def normalize(text: str, form: str) -> str:
    """Unicode normalisation and trimmed whitespace (internal runs of spaces become one)."""
    if form != "none":
        text = unicodedata.normalize(form, text)
    return " ".join(text.split())


def clean_pairs(pairs: list[tuple[str, str]], cfg: DataConfig) -> tuple[list[tuple[str, str]], Counter]:
    """Normalise every pair and drop those with an empty side; `Counter` says how many and why."""
    kept, dropped = [], Counter()
    for src, tgt in pairs:
        src, tgt = normalize(src, cfg.normalize), normalize(tgt, cfg.normalize)
        if not src or not tgt:
            dropped["empty side"] += 1
        else:
            kept.append((src, tgt))
    return kept, dropped


def length_filter(src_lens, tgt_lens, cfg: DataConfig) -> tuple[list[int], Counter]:
    """Indices of the pairs to keep by subword length; the rest are counted by reason."""
    keep, dropped = [], Counter()
    for i, (s, t) in enumerate(zip(src_lens, tgt_lens, strict=True)):
        if s > cfg.max_len or t > cfg.max_len:
            dropped[f"longer than {cfg.max_len} subwords"] += 1
        elif max(s, t) > cfg.max_ratio * max(1, min(s, t)):
            dropped[f"length ratio above {cfg.max_ratio:g}"] += 1
        else:
            keep.append(i)
    return keep, dropped


def describe_dropped(dropped: Counter) -> str:
    """`12 empty side, 3 longer than 100 subwords`, or `none`."""
    return ", ".join(f"{n} {why}" for why, n in sorted(dropped.items())) or "none"
