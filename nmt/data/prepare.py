"""Raw parallel text -> cleaned, tokenised, encoded splits, cached on disk by a fingerprint.

The cache key covers the raw training text, the cleaning and tokenizer settings: change any and
the data is re-encoded; change none and it loads from compact arrays. Validation and test are
normalised but never filtered, and their raw references are kept for scoring.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nmt.config import Config
from nmt.data.cleaning import clean_pairs, describe_dropped, length_filter, normalize
from nmt.data.corpus import EncodedCorpus, Side
from nmt.data.joining import joined_pairs
from nmt.data.sources import Pairs, load_split
from nmt.data.tokenizer import Tokenizer, TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text

CACHE_VERSION = 1


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
    if d.join:  # only when set, so that the caches made before it existed stay current
        settings["join"] = d.join
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def encode(sources: list[str], targets: list[str], tok: TokenizerPair) -> EncodedCorpus:
    """Already normalised text -> compact arrays."""
    return EncodedCorpus(
        Side.encode(tok.src.encode_batch, sources), Side.encode(tok.tgt.encode_batch, targets)
    )


def prepare(
    cfg: Config, held_out: tuple[str, ...] = ("valid",), tokenizers: TokenizerPair | None = None
) -> PreparedData:
    """Training data and the `held_out` splits, from the cache when it is current. `tokenizers`
    (from a checkpoint, when resuming) are used instead of training or loading the cached ones."""
    raw_train = load_split(cfg.data, "train")
    key = fingerprint(cfg, digest(raw_train))
    cache = Path(cfg.data.cache_dir) / key
    cached = _read_cache(cache, tokenizers)
    usable = cached is not None
    if cached is not None:
        tok, train, dropped = cached
    else:
        cleaned, dropped = clean_pairs(raw_train, cfg.data)
        if not cleaned:
            raise NMTError("data: the training set is empty after dropping pairs with an empty side")
        tok = tokenizers or TokenizerPair.train(cleaned, cfg.tokenizer)  # on each sentence once
        pairs = cleaned + joined_pairs(cleaned, cfg.data.join)
        encoded = encode([s for s, _ in pairs], [t for _, t in pairs], tok)
        keep, too_long = length_filter(encoded.src.lengths, encoded.tgt.lengths, cfg.data)
        dropped += too_long
        if not keep:
            raise NMTError(
                f"data: no training pair left after filtering ({dict(dropped)}); check data.max_len"
            )
        train = encoded.select(keep) if len(keep) < len(encoded) else encoded
        _write_cache(cache, tok, train, dropped, cfg)

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
        return tok, EncodedCorpus.load(cache / "train.npz"), Counter(meta["dropped"])
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, zipfile.BadZipFile):
        return None


def _held_out(cfg: Config, name: str, tok: TokenizerPair, cache: Path) -> Split:
    raw = load_split(cfg.data, name)
    form = cfg.data.normalize
    pairs = [(normalize(s, form), t) for s, t in raw]  # the reference stays as written
    # Keyed by the text and the tokenizer: a change in either must never read old arrays.
    tok_key = hashlib.sha256(tok.src.model_bytes + tok.tgt.model_bytes).hexdigest()[:8]
    path = cache / f"{name}-{digest(raw)[:16]}-{tok_key}.npz"
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


def _write_cache(
    cache: Path, tok: TokenizerPair, train: EncodedCorpus, dropped: Counter, cfg: Config
) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    state = tok.to_state()
    for side, model in state.items():
        (cache / f"{side}.model").write_bytes(model)
    train.save(cache / "train.npz")
    meta = {
        "dropped": dict(dropped),
        "pairs": len(train),
        "config": {"data": vars(cfg.data), "tokenizer": vars(cfg.tokenizer)},
        "tokenizer_sha256": {side: hashlib.sha256(m).hexdigest() for side, m in state.items()},
    }
    # written last: its presence marks the cache complete
    atomic_write_text(cache / "meta.json", json.dumps(meta, indent=1))


def train_text(cfg: Config) -> Pairs:
    """The cleaned training pairs (and the joined ones) as text, for subword sampling."""
    cleaned = clean_pairs(load_split(cfg.data, "train"), cfg.data)[0]
    return cleaned + joined_pairs(cleaned, cfg.data.join)


def sampled_train(cfg: Config, cleaned: Pairs, tok: TokenizerPair, seed: int) -> EncodedCorpus:
    """Subword regularisation (Kudo 2018): the training text segmented afresh (seeded), then
    filtered by length as usual."""
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    alpha = cfg.tokenizer.sampling_alpha
    encoded = EncodedCorpus.from_lists(
        _sample(tok.src, [s for s, _ in cleaned], alpha), _sample(tok.tgt, [t for _, t in cleaned], alpha)
    )
    keep, _ = length_filter(encoded.src.lengths, encoded.tgt.lengths, cfg.data)
    return encoded.select(keep)


def _sample(tok: Tokenizer, texts: list[str], alpha: float) -> list[list[int]]:
    return tok.sp.encode(texts, enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)


def prepare_report(cfg: Config) -> str:
    """`nmt data prepare`: build (or find) the cache for every split and say what it holds."""
    import time

    start = time.perf_counter()
    data = prepare(cfg, ("valid", "test"))
    sizes = ", ".join(f"{len(s.corpus)} {name}" for name, s in data.held_out.items())
    dropped = describe_dropped(data.dropped)
    state = "already prepared" if data.from_cache else "prepared"
    return (
        f"{state}: {len(data.train)} train, {sizes} pairs in {data.cache_dir} "
        f"({time.perf_counter() - start:.1f} s); training pairs dropped: {dropped}"
    )
