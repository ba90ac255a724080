"""Stage 1 of preparation: parallel text for one split, from plain text files or anything
`datasets.load_dataset` reads.

Both paths return the same thing, a list of (source, target) string pairs, so nothing downstream
knows where the data came from.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.config import DataConfig
from nmt.errors import NMTError
from nmt.fileio import atomic_write, atomic_write_text, line_chunks, read_lines
from nmt.jsonvalues import JSONError, read_json

Pairs = list[tuple[str, str]]
SPLITS = ("train", "valid", "test")
UTF8_HINT = " (or set data.errors: replace)"


def split_name(cfg: DataConfig, split: str) -> str:
    """The configured name of split `train`, `valid` or `test`."""
    return {"train": cfg.train, "valid": cfg.valid, "test": cfg.test}[split]


def text_path(cfg: DataConfig, split: str, lang: str) -> Path:
    return Path(cfg.dir) / f"{split_name(cfg, split)}.{lang}"


def describe_split(cfg: DataConfig, split: str) -> str:
    """Where split `train`, `valid` or `test` is read from, for messages about it."""
    if cfg.format == "text" or _manifest_is_current(cfg, (split,)):
        return f"{text_path(cfg, split, cfg.src_lang)} and {text_path(cfg, split, cfg.tgt_lang)}"
    return f"{cfg.hf_path}[{split_name(cfg, split)}]"


# What a data file that is not a regular file is, first match wins; none: it does not exist.
NOT_A_FILE = (
    (
        Path.is_fifo,
        "is a named pipe; nmt reads data files several times (to scan, sample and encode them, "
        "and again in each run): give a regular file",
    ),
    (Path.is_dir, "is a directory, not a text file"),
    (Path.exists, "is not a regular file (a device or a socket); give a regular file"),
)


def check_data_file(path: Path) -> None:
    """A split's file is a regular file that can be read again, checked before it is opened
    (opening a named pipe would wait for a writer)."""
    if not path.is_file():
        why = next((why for test, why in NOT_A_FILE if test(path)), "file not found")
        raise NMTError(f"{path}: {why}")


def read_parallel(src_path: Path, tgt_path: Path, errors: str = "strict") -> Pairs:
    check_data_file(Path(src_path))
    check_data_file(Path(tgt_path))
    src, tgt = read_lines(src_path, errors, UTF8_HINT), read_lines(tgt_path, errors, UTF8_HINT)
    if len(src) != len(tgt):
        raise _misaligned(src_path, len(src), tgt_path, len(tgt))
    return list(zip(src, tgt, strict=True))


def _misaligned(src_path, src_lines: int, tgt_path, tgt_lines: int) -> NMTError:
    return NMTError(
        f"{src_path} has {src_lines} lines but {tgt_path} has {tgt_lines}: "
        "parallel files must be line-aligned"
    )


@dataclass
class Chunk:
    """Consecutive pairs of a split; `first` is the line number of the first."""

    first: int
    sources: list[str]
    targets: list[str]
    part: int = 0  # which of `data.corpora` it comes from (0 for a single training split)

    def __len__(self) -> int:
        return len(self.sources)


def pick(chunks: Iterable[Chunk], lines: np.ndarray) -> Iterator[Chunk]:
    """Of each chunk, only the pairs at `lines` (sorted 0-based line numbers of the split): a
    sparse chunk, whose `first` is still the line number of the chunk it was picked from."""
    for chunk in chunks:
        lo, hi = np.searchsorted(lines, [chunk.first - 1, chunk.first - 1 + len(chunk)])
        rows = lines[lo:hi] - (chunk.first - 1)
        yield Chunk(
            chunk.first, [chunk.sources[i] for i in rows], [chunk.targets[i] for i in rows], chunk.part
        )


@dataclass
class Scan:
    digest: str  # of the whole split's content: the cache key
    pairs: int


class TextPairs:
    """Two line-aligned UTF-8 files, read a chunk at a time: memory holds one chunk, whatever
    the size of the files."""

    def __init__(self, src_path: Path, tgt_path: Path, errors: str = "strict"):
        self.paths, self.errors = (Path(src_path), Path(tgt_path)), errors
        for path in self.paths:
            check_data_file(path)

    def scan(self) -> Scan:
        """The digest and line count of both files (one read of their bytes); files of unequal
        length fail here, before anything is written."""
        h, counts = hashlib.sha256(), []
        for path in self.paths:
            lines, last = 0, b"\n"
            with open(path, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
                    lines, last = lines + block.count(b"\n"), block[-1:]
            counts.append(lines + (last != b"\n"))
            h.update(b"\0")  # where one file ends and the other begins
        if counts[0] != counts[1]:
            raise _misaligned(self.paths[0], counts[0], self.paths[1], counts[1])
        return Scan(h.hexdigest(), counts[0])

    def chunks(self, size: int) -> Iterator[Chunk]:
        with open(self.paths[0], "rb") as src_file, open(self.paths[1], "rb") as tgt_file:
            src, tgt = (
                line_chunks(f, str(path), size, self.errors, UTF8_HINT)
                for f, path in ((src_file, self.paths[0]), (tgt_file, self.paths[1]))
            )
            for src_part, tgt_part in itertools.zip_longest(src, tgt):
                if src_part is None or tgt_part is None or len(src_part[1]) != len(tgt_part[1]):
                    first = (src_part or tgt_part)[0]
                    raise NMTError(
                        f"{self.paths[0]} and {self.paths[1]} differ in length after line {first - 1}: "
                        "parallel files must be line-aligned (did one change while it was read?)"
                    )
                yield Chunk(src_part[0], src_part[1], tgt_part[1])


class DatasetPairs:
    """A `datasets` split (memory-mapped Arrow), read a chunk at a time."""

    def __init__(self, ds, src: str, tgt: str, where: str):
        self.ds, self.src, self.tgt, self.where = ds, src, tgt, where
        columns = ds.column_names
        if "translation" not in columns and not (src in columns and tgt in columns):
            raise NMTError(
                f"{where}: cannot find {src!r}/{tgt!r} columns or a 'translation' column "
                f"(columns found: {', '.join(columns)})"
            )

    def scan(self) -> Scan:
        h = hashlib.sha256()
        for chunk in self.chunks(10_000):
            for src, tgt in zip(chunk.sources, chunk.targets, strict=True):
                h.update(
                    src.encode("utf-8", "surrogatepass")
                    + b"\t"
                    + tgt.encode("utf-8", "surrogatepass")
                    + b"\n"
                )
        return Scan(h.hexdigest(), len(self.ds))

    def chunks(self, size: int) -> Iterator[Chunk]:
        first = 1
        for batch in self.ds.iter(batch_size=size):
            if "translation" in batch:
                try:
                    pairs = [(row[self.src], row[self.tgt]) for row in batch["translation"]]
                except KeyError as e:
                    raise NMTError(f"{self.where}: translation column has no language {e}") from None
                sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
            else:
                sources, targets = list(batch[self.src]), list(batch[self.tgt])
            yield Chunk(first, sources, targets)
            first += len(sources)


class CorporaPairs:
    """Several training corpora (`data.corpora`) read one after the other as one split: each
    chunk comes from one corpus (`Chunk.part`), its sources tagged, its line numbers counted
    across all of them."""

    def __init__(self, cfg: DataConfig):
        self.parts = [
            TextPairs(
                *(Path(c.dir or cfg.dir) / f"{c.train}.{lang}" for lang in (cfg.src_lang, cfg.tgt_lang)),
                cfg.errors,
            )
            for c in cfg.corpora
        ]
        self.tags = [c.tag for c in cfg.corpora]

    def scan(self) -> Scan:
        """The corpora's digests and tags in one digest, and their total size."""
        h, scans = hashlib.sha256(), [part.scan() for part in self.parts]
        for scan, tag in zip(scans, self.tags, strict=True):
            h.update(f"{scan.digest}\t{tag}\n".encode())
        return Scan(h.hexdigest(), sum(scan.pairs for scan in scans))

    def chunks(self, size: int) -> Iterator[Chunk]:
        before = 0
        for index, (part, tag) in enumerate(zip(self.parts, self.tags, strict=True)):
            read = 0
            for chunk in part.chunks(size):
                sources = [f"{tag} {s}" for s in chunk.sources] if tag else chunk.sources
                yield Chunk(before + chunk.first, sources, chunk.targets, index)
                read = chunk.first - 1 + len(chunk)
            before += read


def train_pairs(cfg: DataConfig) -> TextPairs | DatasetPairs | CorporaPairs:
    """The training split as a stream of chunks (`load_split` reads a whole split instead)."""
    if cfg.corpora:
        return CorporaPairs(cfg)
    if cfg.format == "text" or _manifest_is_current(cfg, ("train",)):
        return TextPairs(
            text_path(cfg, "train", cfg.src_lang), text_path(cfg, "train", cfg.tgt_lang), cfg.errors
        )
    name = split_name(cfg, "train")
    return DatasetPairs(_load_hf_dataset(cfg, "train"), cfg.src_lang, cfg.tgt_lang, f"{cfg.hf_path}[{name}]")


def load_split(cfg: DataConfig, split: str) -> Pairs:
    """Plain text files; for a `datasets` source, the copy `download` made when it is current."""
    if cfg.format == "text" or _manifest_is_current(cfg, (split,)):
        return read_parallel(
            text_path(cfg, split, cfg.src_lang), text_path(cfg, split, cfg.tgt_lang), cfg.errors
        )
    return _load_hf_split(cfg, split)


def _source(cfg: DataConfig) -> dict:
    return {
        "hf_path": cfg.hf_path,
        "hf_name": cfg.hf_name,
        "hf_data_files": cfg.hf_data_files,
        "langs": [cfg.src_lang, cfg.tgt_lang],
        "splits": [split_name(cfg, s) for s in SPLITS],
    }


def _manifest_is_current(cfg: DataConfig, splits: tuple[str, ...] = SPLITS) -> bool:
    """Whether `download` wrote these splits for this source and their files are unchanged (a
    manifest that is not as it wrote it means a download, not an error)."""
    path = Path(cfg.dir) / "manifest.json"
    if not path.is_file():
        return False
    try:
        manifest = read_json(path, {"splits": {str: {"sha256": {str: str}}}})
    except JSONError:
        return False
    if manifest.get("source") != _source(cfg) or not set(splits) <= set(manifest["splits"]):
        return False
    return all(
        text_path(cfg, split, lang).is_file()
        and hashlib.sha256(text_path(cfg, split, lang).read_bytes()).hexdigest() == digest
        for split in splits
        for lang, digest in manifest["splits"][split]["sha256"].items()
    )


def download(cfg: DataConfig) -> str:
    """Materialise a `datasets` source as plain UTF-8 text in `data.dir`, with a manifest of
    source, sizes and checksums; a second run with the same config does nothing."""
    if cfg.format == "text":
        sizes = ", ".join(f"{len(load_split(cfg, split))} {split}" for split in SPLITS)
        return f"{cfg.dir}: already plain text ({sizes} pairs); nothing to download"
    if _manifest_is_current(cfg):
        return f"{cfg.dir}: up to date with {cfg.hf_path} (manifest.json matches); nothing to do"
    splits, lines = {}, []
    for split in SPLITS:
        pairs = _load_hf_split(cfg, split)
        info = {"name": split_name(cfg, split), "pairs": len(pairs), "sha256": {}}
        for lang, side in ((cfg.src_lang, 0), (cfg.tgt_lang, 1)):
            path = text_path(cfg, split, lang)
            # one sentence a line: a newline inside a sentence would shift every line after it
            data = "".join(" ".join(p[side].split()) + "\n" for p in pairs).encode("utf-8")
            atomic_write(path, lambda f, data=data: f.write(data))
            info["sha256"][lang] = hashlib.sha256(data).hexdigest()
        splits[split] = info
        lines.append(
            f"{split}: {len(pairs)} pairs -> {text_path(cfg, split, cfg.src_lang).name}, "
            f"{text_path(cfg, split, cfg.tgt_lang).name}"
        )
    manifest = {"source": _source(cfg), "splits": splits}
    atomic_write_text(Path(cfg.dir) / "manifest.json", json.dumps(manifest, indent=1))
    return "\n".join([f"wrote {cfg.dir}:", *lines])


def _load_hf_split(cfg: DataConfig, split: str) -> Pairs:
    where = f"{cfg.hf_path}[{split_name(cfg, split)}]"
    stream = DatasetPairs(_load_hf_dataset(cfg, split), cfg.src_lang, cfg.tgt_lang, where)
    return [
        pair for chunk in stream.chunks(10_000) for pair in zip(chunk.sources, chunk.targets, strict=True)
    ]


def _load_hf_dataset(cfg: DataConfig, split: str):
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    path = cfg.hf_path
    looks_local = path.startswith((".", "/", "~")) or Path(path).exists()
    if looks_local and not Path(path).expanduser().exists():
        # A missing relative path would otherwise be taken for a hub id and retried for ~23 s.
        raise NMTError(f"data.hf_path: {path} does not exist")
    name = split_name(cfg, split)
    if not looks_local and _needs_hub(cfg):
        _check_hub_reachable()
    try:
        ds = datasets.load_dataset(
            str(Path(path).expanduser()) if looks_local else path,
            cfg.hf_name,
            data_files=cfg.hf_data_files,
            split=name,
        )
    except (ConnectionError, DatasetNotFoundError) as e:
        raise NMTError(
            f"data.hf_path: cannot load {path!r} from the Hugging Face hub ({type(e).__name__}); "
            "check the id and your network, or point data.hf_path at a local copy "
            "(set HF_HUB_OFFLINE=1 to fail fast)"
        ) from None
    except ValueError as e:  # datasets reports an unknown split name this way
        raise NMTError(f"data: {path!r} has no split {name!r} ({str(e).splitlines()[0]})") from None
    return ds


BUILDERS = {"json", "csv", "parquet", "text", "arrow"}  # packaged loaders that read data_files


def _needs_hub(cfg: DataConfig) -> bool:
    files = (cfg.hf_data_files or {}).values()
    return cfg.hf_path not in BUILDERS or any(str(f).startswith("hf://") for f in files)


def _check_hub_reachable(timeout: float = 3.0) -> None:
    """Fail in seconds, not after huggingface_hub's ~23 s of retries, when the hub is unreachable.

    Offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) skips the check: `datasets` then serves
    its cache or fails at once by itself.
    """
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as e:
        raise NMTError(
            f"data.hf_path: cannot reach the Hugging Face hub ({host}: {e.__class__.__name__}); "
            "use a local copy (data.hf_path: a folder, or data.format: text), "
            "or set HF_HUB_OFFLINE=1 to read the datasets cache"
        ) from None
