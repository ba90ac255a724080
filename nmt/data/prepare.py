"""Raw parallel text -> cleaned, tokenised, encoded splits, cached on disk: the pipeline.

    source (sources) -> clean (cleaning) -> tokenize (tokenizer) -> encode (encoding) -> cache (cache)

Each stage takes the previous stage's output. The training split streams through them a chunk
at a time, so a corpus of millions of pairs is prepared in the memory of one chunk plus the
tokenizer's sample; the cache is keyed by the raw text and every setting that affects it, so a
second run reads it at once. Validation and test are normalised but never filtered, and their
raw references are kept for scoring.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from nmt.config import Config, TokenizerConfig
from nmt.data import cache
from nmt.data.cleaning import clean_chunks, clean_held_out, clean_pairs, describe_dropped
from nmt.data.corpus import EncodedCorpus
from nmt.data.encoding import encode, encode_chunks
from nmt.data.sources import (
    CorporaPairs,
    DatasetPairs,
    Pairs,
    TextPairs,
    describe_split,
    load_split,
    pick,
    train_pairs,
)
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError

CHUNK = 20_000  # training pairs read, cleaned and encoded at a time


@dataclass
class Split:
    corpus: EncodedCorpus
    pairs: Pairs  # source normalised (as encoded), target raw (the reference to score against)


@dataclass
class PreparedData:
    tokenizers: TokenizerPair
    train: EncodedCorpus
    held_out: dict[str, Split]  # valid, test
    dropped: Counter = field(default_factory=Counter)  # training pairs removed, by reason
    cache_dir: Path | None = None
    from_cache: bool = False
    parts: list[int] = field(default_factory=list)  # training pairs of each of `data.corpora`, in order


def prepare(
    cfg: Config,
    held_out: tuple[str, ...] = ("valid",),
    tokenizers: TokenizerPair | None = None,
    progress: bool = False,
) -> PreparedData:
    """Training data and the `held_out` splits, from the cache when it is current. `tokenizers`
    (from a checkpoint, when resuming) are used instead of training or loading the cached ones.
    `progress` shows a bar (pairs/s and time left) while the training split is encoded.

    The training split is scanned and the held-out splits read before anything is trained or
    written, so an empty split fails in seconds, not after the tokenizer and the cache."""
    source = train_pairs(cfg.data)
    scan = source.scan()
    raw = {name: load_split(cfg.data, name) for name in held_out}
    _check_not_empty(cfg, scan.pairs, raw)
    folder, cached = cache.find(cfg, scan.digest, tokenizers)
    found = cached is not None
    if cached is None:
        tok = tokenizers or train_tokenizers(source, scan.pairs, cfg)
        encoded = encode_chunks(clean_chunks(source.chunks(CHUNK), cfg.data), tok, cfg.data)
        cached = cache.write(folder, cfg, tok, encoded, scan.pairs, progress)
    splits = {
        name: held_out_split(cfg, name, pairs, cached.tokenizers, folder) for name, pairs in raw.items()
    }
    return PreparedData(cached.tokenizers, cached.train, splits, cached.dropped, folder, found, cached.parts)


def _check_not_empty(cfg: Config, train: int, held_out: dict[str, Pairs]) -> None:
    """Refuse an empty training split, and an empty validation split (training validates on it)."""
    if not train:
        raise NMTError(
            f"{describe_split(cfg.data, 'train')}: the training split is empty; give it some pairs"
        )
    if "valid" in held_out and not held_out["valid"]:
        raise NMTError(
            f"{describe_split(cfg.data, 'valid')}: the validation split is empty, and training "
            "validates on it; give it some pairs (data.valid names the split)"
        )


def train_tokenizers(
    source: TextPairs | DatasetPairs | CorporaPairs, pairs: int, cfg: Config
) -> TokenizerPair:
    """SentencePiece models learnt from the cleaned training pairs: every pair while the corpus
    fits in `tokenizer.input_sentence_size` sentences, else a seeded uniform sample of that many,
    so memory stops growing with the corpus here too."""
    lines = sample_lines(pairs, cfg.tokenizer)
    chunks = source.chunks(CHUNK) if lines is None else pick(source.chunks(CHUNK), lines)
    sample = [
        pair
        for chunk in chunks
        for pair in clean_pairs(zip(chunk.sources, chunk.targets, strict=True), cfg.data)[0]
    ]
    if not sample:
        raise NMTError("data: the training set is empty after dropping pairs with an empty side")
    tags = [c.tag for c in cfg.data.corpora if c.tag and c.tag not in cfg.tokenizer.user_symbols]
    return TokenizerPair.train(
        sample, replace(cfg.tokenizer, user_symbols=[*cfg.tokenizer.user_symbols, *tags])
    )


def sample_lines(pairs: int, cfg: TokenizerConfig) -> np.ndarray | None:
    """The sorted line numbers the tokenizer learns from, or None for all of them (a joint
    model sees both sides of a pair, so it takes half as many pairs)."""
    wanted = max(1, cfg.input_sentence_size // (2 if cfg.joint else 1))
    return None if pairs <= wanted else np.sort(random.Random(0).sample(range(pairs), wanted))


def held_out_split(cfg: Config, name: str, raw: Pairs, tok: TokenizerPair, folder: Path) -> Split:
    """A validation or test split (its `raw` pairs as read): normalised and encoded (cached
    beside the training data), never filtered; the reference stays as written."""
    pairs, targets = clean_held_out(raw, cfg.data.normalize)
    path = cache.held_out_path(folder, name, raw, tok)
    corpus = cache.read_held_out(path)
    if corpus is None:  # missing or damaged: encode again
        corpus = encode([s for s, _ in pairs], targets, tok)
        if folder.is_dir():
            corpus.save(path)
    return Split(corpus, pairs)


def prepare_report(cfg: Config) -> str:
    """`nmt data prepare`: build (or find) the cache for every split and say what it holds."""
    import time

    start = time.perf_counter()
    data = prepare(cfg, ("valid", "test"), progress=True)
    sizes = ", ".join(f"{len(s.corpus)} {name}" for name, s in data.held_out.items())
    dropped = describe_dropped(data.dropped)
    state = "already prepared" if data.from_cache else "prepared"
    return (
        f"{state}: {len(data.train)} train, {sizes} pairs in {data.cache_dir} "
        f"({time.perf_counter() - start:.1f} s); training pairs dropped: {dropped}"
    )
