"""Stage 2 of preparation: text clean-up before tokenisation, each drop counted.

Every input is normalised (Unicode form, whitespace); a training pair with an empty side is
dropped. With `data.join: K` the cleaned pairs of a chunk also yield their runs of 2 .. K
consecutive pairs joined into one (`nmt.data.joining`), so that a model of single sentences
learns to translate several.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from nmt.config import DataConfig
from nmt.data.joining import joined_pairs
from nmt.data.sources import Chunk


def normalize(text: str, form: str) -> str:
    """Unicode normalisation and trimmed whitespace (internal runs of spaces become one)."""
    if form != "none":
        text = unicodedata.normalize(form, text)
    return " ".join(text.split())


def clean_pairs(pairs: Iterable[tuple[str, str]], cfg: DataConfig) -> tuple[list[tuple[str, str]], Counter]:
    """Normalise every pair and drop those with an empty side; `Counter` says how many and why."""
    kept, _, dropped = _cleaned(pairs, cfg)
    return kept, dropped


def _cleaned(
    pairs: Iterable[tuple[str, str]], cfg: DataConfig
) -> tuple[list[tuple[str, str]], list[int], Counter]:
    """`clean_pairs`, with the position of each kept pair among `pairs`."""
    kept, positions, dropped = [], [], Counter()
    for position, (src, tgt) in enumerate(pairs):
        src, tgt = normalize(src, cfg.normalize), normalize(tgt, cfg.normalize)
        if not src or not tgt:
            dropped["empty side"] += 1
        else:
            kept.append((src, tgt))
            positions.append(position)
    return kept, positions, dropped


def clean_held_out(pairs: Iterable[tuple[str, str]], form: str) -> tuple[list[tuple[str, str]], list[str]]:
    """A validation or test split, normalised and never filtered: (source, reference) pairs
    with the reference as written, to score against, and the normalised targets, to encode."""
    pairs = list(pairs)
    return [(normalize(s, form), t) for s, t in pairs], [normalize(t, form) for _, t in pairs]


@dataclass
class Cleaned:
    """A chunk's training pairs after cleaning (and joining), and the pairs dropped, by reason."""

    sources: list[str]
    targets: list[str]
    dropped: Counter
    read: int  # pairs of the split read for it (before cleaning and joining)
    part: int = 0  # which of `data.corpora` it comes from
    lines: np.ndarray | None = None  # each pair's line in the split (1-based, across corpora); 0: joined


def clean_chunks(chunks: Iterable[Chunk], cfg: DataConfig) -> Iterator[Cleaned]:
    """Each chunk's pairs as training sees them: cleaned, and with their joined runs
    (`data.join`; runs stay inside the chunk)."""
    for chunk in chunks:
        cleaned, positions, dropped = _cleaned(zip(chunk.sources, chunk.targets, strict=True), cfg)
        joined = joined_pairs(cleaned, cfg.join)
        pairs = cleaned + joined
        lines = np.zeros(len(pairs), dtype=np.int64)
        lines[: len(cleaned)] = np.asarray(positions, dtype=np.int64) + chunk.first
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        yield Cleaned(sources, targets, dropped, len(chunk), chunk.part, lines)


def describe_dropped(dropped: Counter) -> str:
    """`12 empty side, 3 longer than 100 subwords`, or `none`."""
    return ", ".join(f"{n} {why}" for why, n in sorted(dropped.items())) or "none"
