"""Raw parallel text -> cleaned, tokenised, encoded splits, cached on disk by a fingerprint.

The cache key covers the raw training text, the cleaning and tokenizer settings: change any and
the data is re-encoded; change none and it loads at once (memory-mapped). The training split is
streamed a chunk at a time, so a corpus of millions of pairs is prepared in the memory of one
chunk plus the tokenizer's sample, and the cache appears complete or not at all: it is built in
a folder of its own and renamed into place at the end. Validation and test are normalised but
never filtered, and their raw references are kept for scoring.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import secrets
import shutil
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nmt.config import Config, DataConfig
from nmt.data.cleaning import clean_pairs, describe_dropped, length_filter, normalize
from nmt.data.corpus import CorpusWriter, EncodedCorpus, Side
from nmt.data.joining import joined_pairs
from nmt.data.sources import Chunk, DatasetPairs, Pairs, TextPairs, load_split, train_pairs
from nmt.data.tokenizer import Tokenizer, TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text

CACHE_VERSION = 2  # 2: the training split as memory-mapped flat files, keyed by the files' bytes
CHUNK = 20_000  # training pairs encoded at a time


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


def digest(pairs: Pairs) -> str:
    h = hashlib.sha256()
    for src, tgt in pairs:
        h.update(src.encode("utf-8", "surrogatepass") + b"\t" + tgt.encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()


def tokenizer_key(tok: TokenizerPair) -> str:
    return hashlib.sha256(tok.src.model_bytes + tok.tgt.model_bytes).hexdigest()[:8]


def fingerprint(cfg: Config, train_digest: str) -> str:
    """Everything the encoded training data depends on."""
    d, t = cfg.data, cfg.tokenizer
    settings = {
        "version": CACHE_VERSION,
        "train": train_digest,
        "langs": [d.src_lang, d.tgt_lang],
        "normalize": d.normalize,
        "max_len": d.max_len,
        "max_ratio": d.max_ratio,
        "tokenizer": {k: v for k, v in vars(t).items() if k != "sampling_alpha"},
    }
    if d.join:
        settings["join"] = d.join
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def encode(sources: list[str], targets: list[str], tok: TokenizerPair) -> EncodedCorpus:
    """Already normalised text -> compact arrays."""
    return EncodedCorpus.from_lists(tok.src.encode_batch(sources), tok.tgt.encode_batch(targets))


def training_pairs(chunk: Chunk, cfg: DataConfig) -> tuple[Pairs, Counter]:
    """A chunk's pairs as training sees them: cleaned, and with their joined runs (`data.join`;
    runs stay inside the chunk)."""
    cleaned, dropped = clean_pairs(zip(chunk.sources, chunk.targets, strict=True), cfg)
    return cleaned + joined_pairs(cleaned, cfg.join), dropped


def encode_training_chunk(chunk: Chunk, cfg: DataConfig, tok: TokenizerPair) -> tuple[EncodedCorpus, Counter]:
    """One chunk cleaned, joined, encoded and filtered by length, with its drops by reason."""
    pairs, dropped = training_pairs(chunk, cfg)
    encoded = encode([s for s, _ in pairs], [t for _, t in pairs], tok)
    keep, too_long = length_filter(encoded.src.lengths, encoded.tgt.lengths, cfg)
    return (encoded.select(keep) if len(keep) < len(encoded) else encoded), dropped + too_long


def prepare(
    cfg: Config,
    held_out: tuple[str, ...] = ("valid",),
    tokenizers: TokenizerPair | None = None,
    progress: bool = False,
) -> PreparedData:
    """Training data and the `held_out` splits, from the cache when it is current. `tokenizers`
    (from a checkpoint, when resuming) are used instead of training or loading the cached ones.
    `progress` shows a bar (pairs/s and time left) while the training split is encoded."""
    source = train_pairs(cfg.data)
    scan = source.scan()
    cache = Path(cfg.data.cache_dir) / fingerprint(cfg, scan.digest)
    cached = _read_cache(cache, tokenizers)
    if cached is None and tokenizers is not None and (cache / "meta.json").is_file():
        # made with other tokenizers than these (a checkpoint's, when resuming): one of their own
        cache = cache.with_name(f"{cache.name}-{tokenizer_key(tokenizers)}")
        cached = _read_cache(cache, tokenizers)
    usable = cached is not None
    if cached is None:
        cached = _build_cache(cache, cfg, source, scan.pairs, tokenizers, progress)
    tok, train, dropped = cached
    return PreparedData(
        tok, train, {name: _held_out(cfg, name, tok, cache) for name in held_out}, dropped, cache, usable
    )


def _read_cache(cache: Path, tokenizers: TokenizerPair | None):
    """(tokenizers, training data, dropped counts) from the cache, or None when it is missing,
    made with other tokenizers than `tokenizers`, or damaged (then it is simply rebuilt)."""
    meta_path = cache / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        tok = _cached_tokenizers(cache, meta)
        if tokenizers is not None and tokenizers.to_state() != tok.to_state():
            return None
        return tok, EncodedCorpus.open(cache / "train", meta["layout"]), Counter(meta["dropped"])
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError):
        return None


def _build_cache(
    cache: Path,
    cfg: Config,
    source: TextPairs | DatasetPairs,
    pairs: int,
    tok: TokenizerPair | None,
    progress: bool,
):
    """Encode the training split into a folder of its own, then rename it to `cache`: a crash,
    a bad line or a full disk half way leaves no cache that a later run could take for whole."""
    from tqdm.auto import tqdm

    damaged = (cache / "meta.json").is_file()  # complete once, unreadable now
    tok = tok or TokenizerPair.train(_tokenizer_sample(cfg, source, pairs), cfg.tokenizer)
    _remove_abandoned(cache)
    partial = cache.with_name(f"{cache.name}.partial-{os.getpid()}-{secrets.token_hex(3)}")
    dropped: Counter = Counter()
    bar = tqdm(total=pairs, unit=" pairs", unit_scale=True, desc="encoding", disable=not progress or None)
    try:
        (partial / "train").mkdir(parents=True)
        vocab = max(len(tok.src), len(tok.tgt))
        with bar, CorpusWriter(partial / "train", vocab, cfg.data.max_len) as writer:
            for chunk in source.chunks(CHUNK):
                encoded, chunk_dropped = encode_training_chunk(chunk, cfg.data, tok)
                writer.append(encoded)
                dropped += chunk_dropped
                bar.update(len(chunk))
        if dropped["empty side"] == pairs:
            raise NMTError("data: the training set is empty after dropping pairs with an empty side")
        if not writer.pairs:
            raise NMTError(
                f"data: no training pair left after filtering ({dict(dropped)}); check data.max_len"
            )
        _write_cache_files(partial, tok, writer.layout, dropped, cfg)
        _publish(partial, cache, damaged)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return tok, EncodedCorpus.open(cache / "train", writer.layout), dropped


def _tokenizer_sample(cfg: Config, source: TextPairs | DatasetPairs, pairs: int) -> Pairs:
    """The cleaned training pairs the tokenizer learns from: every pair while the corpus fits
    in `tokenizer.input_sentence_size` sentences, else a seeded uniform sample of that many, so
    memory stops growing with the corpus here too."""
    per_pair = 2 if cfg.tokenizer.joint else 1  # a joint model sees both sides of a pair
    wanted = max(1, cfg.tokenizer.input_sentence_size // per_pair)
    chosen = None if pairs <= wanted else np.sort(random.Random(0).sample(range(pairs), wanted))
    sample: Pairs = []
    for chunk in source.chunks(CHUNK):
        if chosen is None:
            sample += clean_pairs(zip(chunk.sources, chunk.targets, strict=True), cfg.data)[0]
            continue
        lo, hi = np.searchsorted(chosen, [chunk.first - 1, chunk.first - 1 + len(chunk)])
        picked = ((chunk.sources[i], chunk.targets[i]) for i in chosen[lo:hi] - (chunk.first - 1))
        sample += clean_pairs(picked, cfg.data)[0]
    if not sample:
        raise NMTError("data: the training set is empty after dropping pairs with an empty side")
    return sample


def _remove_abandoned(cache: Path) -> None:
    """Partial folders of this cache left by processes that no longer run (killed mid-way)."""
    for partial in cache.parent.glob(f"{cache.name}.partial-*"):
        pid = partial.name.split("-")[-2]
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid), 0)
            continue  # still running: another process is building the same cache
        shutil.rmtree(partial, ignore_errors=True)


def _publish(partial: Path, cache: Path, damaged: bool) -> None:
    """Rename the finished folder to `cache`. A damaged cache there is moved aside first; a
    whole one another process published meanwhile is kept (it holds the same data)."""
    if damaged or (cache.exists() and not (cache / "meta.json").is_file()):
        aside = cache.with_name(f"{cache.name}.damaged-{secrets.token_hex(3)}")
        with contextlib.suppress(OSError):
            cache.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        partial.rename(cache)
    except OSError:
        if not (cache / "meta.json").is_file():
            raise


def _held_out(cfg: Config, name: str, tok: TokenizerPair, cache: Path) -> Split:
    raw = load_split(cfg.data, name)
    form = cfg.data.normalize
    pairs = [(normalize(s, form), t) for s, t in raw]  # the reference stays as written
    # Keyed by the text and the tokenizer: a change in either must never read old arrays.
    path = cache / f"{name}-{digest(raw)[:16]}-{tokenizer_key(tok)}.npz"
    corpus = None
    if path.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            corpus = EncodedCorpus.load(path)
    if corpus is None:  # missing or damaged: encode again
        corpus = encode([s for s, _ in pairs], [normalize(t, form) for _, t in pairs], tok)
        if cache.is_dir():
            corpus.save(path)
    return Split(corpus, pairs)


def _cached_tokenizers(cache: Path, meta: dict) -> TokenizerPair:
    state = {side: (cache / f"{side}.model").read_bytes() for side in ("src", "tgt")}
    for side, model in state.items():
        if hashlib.sha256(model).hexdigest() != meta["tokenizer_sha256"][side]:
            raise NMTError(
                f"{cache / (side + '.model')}: tokenizer model does not match the cached data; "
                f"delete {cache} to rebuild it"
            )
    return TokenizerPair.from_state(state)


def _write_cache_files(folder: Path, tok: TokenizerPair, layout: dict, dropped: Counter, cfg: Config) -> None:
    state = tok.to_state()
    for side, model in state.items():
        (folder / f"{side}.model").write_bytes(model)
    meta = {
        "dropped": dict(dropped),
        "pairs": layout["pairs"],
        "layout": layout,
        "config": {"data": vars(cfg.data), "tokenizer": vars(cfg.tokenizer)},
        "tokenizer_sha256": {side: hashlib.sha256(m).hexdigest() for side, m in state.items()},
    }
    atomic_write_text(folder / "meta.json", json.dumps(meta, indent=1))


def sampled_train(cfg: Config, tok: TokenizerPair, seed: int) -> EncodedCorpus:
    """Subword regularisation (Kudo 2018): the training text segmented afresh (seeded), then
    filtered by length as usual; streamed like `prepare`, held as compact arrays."""
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    alpha = cfg.tokenizer.sampling_alpha
    parts = []
    for chunk in train_pairs(cfg.data).chunks(CHUNK):
        pairs, _ = training_pairs(chunk, cfg.data)
        encoded = EncodedCorpus(
            Side.from_lists(_sample(tok.src, [s for s, _ in pairs], alpha)),
            Side.from_lists(_sample(tok.tgt, [t for _, t in pairs], alpha)),
        )
        keep, _ = length_filter(encoded.src.lengths, encoded.tgt.lengths, cfg.data)
        parts.append(encoded.select(keep))
    return EncodedCorpus(*(Side.concatenate([getattr(p, side) for p in parts]) for side in ("src", "tgt")))


def _sample(tok: Tokenizer, texts: list[str], alpha: float) -> list[list[int]]:
    return tok.sp.encode(texts, enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)


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
