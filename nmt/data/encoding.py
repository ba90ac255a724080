"""Stage 4 of preparation: cleaned text -> subword ids, and the training pairs kept by length.

A chunk of cleaned pairs is encoded with both tokenizers into compact arrays; training pairs
with more than `data.max_len` subwords on a side, or sides whose lengths differ by more than
`data.max_ratio`, are dropped and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from nmt.config import DataConfig
from nmt.data.cleaning import Cleaned
from nmt.data.corpus import EncodedCorpus
from nmt.data.tokenizer import TokenizerPair


@dataclass
class Encoded:
    """A chunk's training pairs as ids, and its pairs dropped so far (cleaning's too), by reason."""

    corpus: EncodedCorpus
    dropped: Counter
    read: int  # pairs of the split read for it
    part: int = 0  # which of `data.corpora` it comes from


def encode(sources: list[str], targets: list[str], tok: TokenizerPair) -> EncodedCorpus:
    """Already normalised text -> compact arrays."""
    return EncodedCorpus.from_lists(tok.src.encode_batch(sources), tok.tgt.encode_batch(targets))


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


def kept_by_length(corpus: EncodedCorpus, cfg: DataConfig) -> tuple[EncodedCorpus, Counter]:
    keep, too_long = length_filter(corpus.src.lengths, corpus.tgt.lengths, cfg)
    return (corpus.select(keep) if len(keep) < len(corpus) else corpus), too_long


def encode_chunks(chunks: Iterable[Cleaned], tok: TokenizerPair, cfg: DataConfig) -> Iterator[Encoded]:
    """Each cleaned chunk encoded and filtered by length, each pair with its line (`lines`)."""
    for chunk in chunks:
        encoded = encode(chunk.sources, chunk.targets, tok)
        encoded.lines = chunk.lines
        corpus, too_long = kept_by_length(encoded, cfg)
        yield Encoded(corpus, chunk.dropped + too_long, chunk.read, chunk.part)
