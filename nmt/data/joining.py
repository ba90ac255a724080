"""Consecutive lines joined into one: how a corpus of single sentences yields longer inputs of
the same text, to train on (`data.join`) and to test length on (`nmt compare --join`).

A model trained only on single captions learns that a sentence's final period ends the output;
joined pairs show it inputs of several sentences with the same words, the same domain and exact
references, where a longer corpus would bring other text.
"""

from __future__ import annotations


def joined(lines: list[str], k: int) -> list[str]:
    """Each run of k consecutive lines as one line (a last, shorter run is dropped)."""
    return [" ".join(lines[i : i + k]) for i in range(0, len(lines) - k + 1, k)]


def joined_pairs(pairs: list[tuple[str, str]], up_to: int) -> list[tuple[str, str]]:
    """For k = 2 .. `up_to`, every run of k consecutive pairs as one pair, sources and targets
    joined alike (none below 2)."""
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    return [
        pair for k in range(2, up_to + 1) for pair in zip(joined(sources, k), joined(targets, k), strict=True)
    ]
