"""`nmt shortlist` as a function: a lexical shortlist for a model from parallel text."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

from nmt.data.cleaning import normalize
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import check_outputs, iter_lines
from nmt.text.shortlist import Shortlist

CHUNK = 10_000  # lines tokenised at a time


def run_shortlist(
    model: Path, src: Path, tgt: Path, output: Path, best: int, frequent: int, iterations: int, max_lines: int
) -> str:
    """The whole `nmt shortlist`: the pairs (at most `max_lines`, each side normalised and
    tokenised as the model's training data, pairs longer than its length limit left out) read,
    the shortlist estimated and written; returns the line it ends with."""
    from nmt.checkpoint import load_model

    check_outputs({"-o": output}, {"--src": src, "--tgt": tgt, "-m": model})
    loaded = load_model(model, "cpu")
    data = loaded.config.data
    pairs = list(encoded_pairs(src, tgt, loaded.tokenizers, data.normalize, data.max_len, max_lines))
    shortlist = Shortlist.build(pairs, loaded.tokenizers, best, frequent, iterations)
    shortlist.save(output)
    sample = pairs[:1000]
    mean = sum(shortlist.allowed(s).sum() for s, _ in sample) / len(sample)
    return (
        f"{output}: from {len(pairs):,} pairs, the {best} likeliest target pieces of each source "
        f"piece and the {frequent} most frequent; a training sentence may write {mean:,.0f} of the "
        f"{len(loaded.tokenizers.tgt):,} target pieces on average"
    )


def encoded_pairs(
    src: Path, tgt: Path, tok: TokenizerPair, form: str, max_len: int, max_lines: int
) -> Iterator[tuple[list[int], list[int]]]:
    """The first `max_lines` pairs of the two files as piece ids, those of a side longer than
    `max_len` pieces left out; files of different lengths are refused naming the line."""
    ends = object()
    lines = itertools.islice(
        itertools.zip_longest(iter_lines(src), iter_lines(tgt), fillvalue=ends), max_lines
    )
    start = 0
    while chunk := list(itertools.islice(lines, CHUNK)):
        for offset, (s, t) in enumerate(chunk):
            if s is ends or t is ends:
                shorter = src if s is ends else tgt
                raise NMTError(
                    f"{shorter}: ends at line {start + offset}; --src and --tgt must be line-aligned"
                )
        sources = tok.src.encode_batch([normalize(s, form) for s, _ in chunk])
        targets = tok.tgt.encode_batch([normalize(t, form) for _, t in chunk])
        for s, t in zip(sources, targets, strict=True):
            if s and t and len(s) <= max_len and len(t) <= max_len:
                yield s, t
        start += len(chunk)
