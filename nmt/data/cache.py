"""Stage 5 of preparation: the encoded splits on disk, keyed by a fingerprint of the raw
training text and every setting that affects the encoding.

Change any of them and the data is encoded again; change none and it loads at once
(memory-mapped). The training split's cache appears complete or not at all: it is built in a
folder of its own and renamed into place at the end, so a crash, a bad line or a full disk half
way leaves nothing a later run could take for whole. Held-out splits are small `.npz` files
beside it, keyed by their own text and the tokenizers (the zip format checks their CRC-32s).

`meta.json`, written last, holds each training file's size and CRC-32, checked whenever the
cache is opened (29 ms for a million pairs, docs/performance.md): a cache whose files changed
since, or from before checksums, is rebuilt like one whose meta.json cannot be read, never
trusted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nmt.config import Config
from nmt.data.corpus import CorpusWriter, EncodedCorpus
from nmt.data.encoding import Encoded
from nmt.data.sources import Pairs
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import describe_os_error, mismatch, moved
from nmt.jsonvalues import JSONError, read_json

# 2: the training split as memory-mapped flat files, keyed by the files' bytes; 3: each pair's line
CACHE_VERSION = 3
META = "meta.json"


@dataclass
class Cached:
    tokenizers: TokenizerPair
    train: EncodedCorpus
    dropped: Counter  # training pairs removed, by reason
    parts: list[int] = field(default_factory=list)  # pairs of each of `data.corpora`, one after the other


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
        "tokenizer": {k: v for k, v in vars(t).items() if not k.startswith("sampling_")},
    }
    if d.join:
        settings["join"] = d.join
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def find(cfg: Config, train_digest: str, tokenizers: TokenizerPair | None) -> tuple[Path, Cached | None]:
    """The cache folder for this data and these settings, and what it holds when it is current.
    `tokenizers` (a resumed checkpoint's) that differ from the cached ones get a folder of their own."""
    cache = Path(cfg.data.cache_dir) / fingerprint(cfg, train_digest)
    cached = read(cache, tokenizers)
    if cached is None and tokenizers is not None and (cache / META).is_file():
        cache = cache.with_name(f"{cache.name}-{tokenizer_key(tokenizers)}")
        cached = read(cache, tokenizers)
    return cache, cached


def read(cache: Path, tokenizers: TokenizerPair | None) -> Cached | None:
    """The cached tokenizers and training data, or None when missing, made with other
    tokenizers than `tokenizers`, or damaged: a file changed since meta.json was written, or
    no checksums to tell (then it is simply rebuilt)."""
    if not (cache / META).is_file():
        return None
    try:
        meta = read_json(cache / META)
        tok = _cached_tokenizers(cache, meta)
        if tokenizers is not None and tokenizers.to_state() != tok.to_state():
            return None
        if mismatch(cache / "train", meta["layout"]["files"]) is not None:
            return None
        train = EncodedCorpus.open(cache / "train", meta["layout"])
        return Cached(tok, train, Counter(meta["dropped"]), meta.get("parts", [len(train)]))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError, JSONError):
        return None


def write(
    cache: Path, cfg: Config, tok: TokenizerPair, encoded: Iterable[Encoded], pairs: int, progress: bool
) -> Cached:
    """The training split's `encoded` chunks written into a folder of their own, then renamed
    to `cache`; `pairs` is the split's size before cleaning, to tell an empty one and to show
    a progress bar (pairs/s and time left) with `progress`."""
    from tqdm.auto import tqdm

    bar = tqdm(total=pairs, unit=" pairs", unit_scale=True, desc="encoding", disable=not progress or None)
    with _building(cache) as folder:
        (folder / "train").mkdir(parents=True)
        dropped: Counter = Counter()
        vocab = max(len(tok.src), len(tok.tgt))
        parts = [0] * max(1, len(cfg.data.corpora))
        with bar, CorpusWriter(folder / "train", vocab, cfg.data.max_len) as writer:
            for chunk in encoded:
                writer.append(chunk.corpus)
                dropped += chunk.dropped
                parts[chunk.part] += len(chunk.corpus)
                bar.update(chunk.read)
        if dropped["empty side"] == pairs:
            raise NMTError("data: the training set is empty after dropping pairs with an empty side")
        if not writer.pairs:
            raise NMTError(
                f"data: no training pair left after filtering ({dict(dropped)}); check data.max_len"
            )
        if cfg.data.corpora and 0 in parts:
            raise NMTError(f"data.corpora[{parts.index(0)}]: no training pair left after filtering; check it")
        _write_meta(folder, tok, writer.layout, dropped, cfg, parts)
    return Cached(tok, EncodedCorpus.open(cache / "train", writer.layout), dropped, parts)


@contextlib.contextmanager
def _building(cache: Path) -> Iterator[Path]:
    """A fresh folder beside `cache`, renamed to it when the block ends without an error, and
    removed in any case. An OS error while building (a full disk) names the file as it would
    have been in `cache`, and where the cache goes."""
    damaged = (cache / META).is_file()  # complete once, unreadable or changed now
    _remove_abandoned(cache)
    partial = cache.with_name(f"{cache.name}.partial-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        yield partial
        _publish(partial, cache, damaged)
    except OSError as e:
        if not (e.filename and Path(e.filename).is_relative_to(partial)):
            raise  # not a write of the cache (reading the raw text, say): its own message
        where = moved(Path(e.filename), partial, cache)
        raise NMTError(f"{describe_os_error(e, where)}; data.cache_dir says where the cache goes") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)


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
    if damaged or (cache.exists() and not (cache / META).is_file()):
        aside = cache.with_name(f"{cache.name}.damaged-{secrets.token_hex(3)}")
        with contextlib.suppress(OSError):
            cache.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        partial.rename(cache)
    except OSError:
        if not (cache / META).is_file():
            raise


def _cached_tokenizers(cache: Path, meta: dict) -> TokenizerPair:
    state = {side: (cache / f"{side}.model").read_bytes() for side in ("src", "tgt")}
    for side, model in state.items():
        if hashlib.sha256(model).hexdigest() != meta["tokenizer_sha256"][side]:
            raise NMTError(
                f"{cache / (side + '.model')}: tokenizer model does not match the cached data; "
                f"delete {cache} to rebuild it"
            )
    return TokenizerPair.from_state(state)


def _write_meta(
    folder: Path, tok: TokenizerPair, layout: dict, dropped: Counter, cfg: Config, parts: list[int]
) -> None:
    """The tokenizers, then meta.json with the training files' checksums (`layout["files"]`):
    written last, so a cache with a meta.json is whole. Plain writes: the folder is renamed into
    place whole."""
    state = tok.to_state()
    for side, model in state.items():
        _write(folder / f"{side}.model", model)
    meta = {
        "dropped": dict(dropped),
        "pairs": layout["pairs"],
        "parts": parts,
        "layout": layout,
        "config": {"data": dataclasses.asdict(cfg.data), "tokenizer": dataclasses.asdict(cfg.tokenizer)},
        "tokenizer_sha256": {side: hashlib.sha256(m).hexdigest() for side, m in state.items()},
    }
    _write(folder / META, json.dumps(meta, indent=1).encode("utf-8"))


def _write(path: Path, data: bytes) -> None:
    """Write and sync `path`, naming it in an OS error."""
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None


def held_out_path(cache: Path, name: str, raw: Pairs, tok: TokenizerPair) -> Path:
    """Keyed by the text and the tokenizers: a change in either must never read old arrays."""
    return cache / f"{name}-{digest(raw)[:16]}-{tokenizer_key(tok)}.npz"


def read_held_out(path: Path) -> EncodedCorpus | None:
    """A held-out split's arrays, or None when missing or damaged (then it is encoded again)."""
    if path.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            return EncodedCorpus.load(path)
    return None
