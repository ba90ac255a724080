"""Encoded parallel text as flat token arrays with offsets: compact in memory and on disk.

Held-out splits are small and live in memory (`save`/`load` as .npz). The training split can
hold millions of pairs, so it is written a chunk at a time (`CorpusWriter`) into flat files and
read back memory-mapped (`EncodedCorpus.open`): training touches only the pairs of its batches,
and `release` hands those pages back, so the process holds the index (a few bytes a pair), not
the corpus. The writer keeps each file's size and CRC-32 as it goes (`CorpusWriter.layout`), so
the cache can check the files before it trusts them; a mapped file cut short under a running
process would kill it with SIGBUS at the next read, so `check_mapped` looks first.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import mmap
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nmt.errors import NMTError
from nmt.fileio import atomic_write

SIDES = ("src", "tgt")
PARTS = ("tokens", "offsets", "lengths")
LINES = "lines"  # beside the sides: each training pair's line in its split (`EncodedCorpus.lines`)


def _smallest(dtype_limit: int) -> np.dtype:
    """The narrowest unsigned type that holds values below `dtype_limit`."""
    return np.dtype(np.uint16 if dtype_limit <= 1 << 16 else np.uint32)


@dataclass
class Side:
    tokens: np.ndarray  # (N_tokens,) all sentences back to back (int32, or uint16/uint32 on disk)
    offsets: np.ndarray  # (N + 1,) int64, sentence i is tokens[offsets[i]:offsets[i + 1]]
    stored_lengths: np.ndarray | None = None  # (N,) written beside the tokens; else np.diff(offsets)
    maps: dict[Path, mmap.mmap] = field(default_factory=dict, repr=False)  # file -> its map, when mapped

    @classmethod
    def from_lists(cls, rows: list[list[int]]) -> Side:
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)), out=offsets[1:])
        tokens = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(offsets[-1]))
        return cls(tokens, offsets)

    @classmethod
    def concatenate(cls, parts: list[Side]) -> Side:
        """The sentences of `parts` one after the other, in memory."""
        offsets = np.zeros(sum(map(len, parts)) + 1, dtype=np.int64)
        np.cumsum(np.concatenate([p.lengths for p in parts] or [np.zeros(0, np.int64)]), out=offsets[1:])
        return cls(np.concatenate([p.tokens for p in parts] or [np.zeros(0, np.int32)]), offsets)

    @property
    def lengths(self) -> np.ndarray:
        return self.stored_lengths if self.stored_lengths is not None else np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def select(self, indices) -> Side:
        """The sentences at `indices` (increasing), in memory."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths
        chosen = np.zeros(len(self), dtype=bool)
        chosen[indices] = True
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths[indices], out=offsets[1:])
        return Side(self.tokens[np.repeat(chosen, lengths)].astype(np.int32), offsets)

    def release(self) -> None:
        """Drop the mapped pages read so far from this process (they stay in the page cache)."""
        for m in self.maps.values():
            m.madvise(mmap.MADV_DONTNEED)

    def check_mapped(self) -> None:
        """Before reading: every mapped file still holds all the bytes mapped. A page past the
        end of a file cut short (by another program, a user, a full disk's repair) kills the
        process with SIGBUS, which Python cannot catch; one fstat a file (a few microseconds)
        turns that into one line."""
        for path, m in self.maps.items():
            if (size := m.size()) < len(m):
                raise NMTError(
                    f"{path}: the training data was cut short while training ({size} of {len(m)} "
                    "bytes left); nmt train --resume rebuilds the data cache and goes on from the "
                    "last checkpoint"
                )


@dataclass
class EncodedCorpus:
    """Source ids (without EOS) and target ids (without BOS/EOS) of one split."""

    src: Side
    tgt: Side
    files: tuple[Path, dict] | None = None  # the folder and layout it is mapped from (`open`)
    lines: np.ndarray | None = None  # a training pair's line in its split (1-based; 0: joined pairs)

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def from_lists(cls, src: list[list[int]], tgt: list[list[int]]) -> EncodedCorpus:
        return cls(Side.from_lists(src), Side.from_lists(tgt))

    def select(self, indices) -> EncodedCorpus:
        lines = None if self.lines is None else np.asarray(self.lines[np.asarray(indices, dtype=np.int64)])
        return EncodedCorpus(self.src.select(indices), self.tgt.select(indices), lines=lines)

    def release(self) -> None:
        self.src.release()
        self.tgt.release()

    def check_mapped(self) -> None:
        self.src.check_mapped()
        self.tgt.check_mapped()

    def save(self, path: Path) -> None:
        buffer = io.BytesIO()
        np.savez(
            buffer,
            src_tokens=self.src.tokens,
            src_offsets=self.src.offsets,
            tgt_tokens=self.tgt.tokens,
            tgt_offsets=self.tgt.offsets,
        )
        atomic_write(path, lambda f: f.write(buffer.getvalue()))

    @classmethod
    def load(cls, path: Path) -> EncodedCorpus:
        with np.load(path) as z:
            return cls(Side(z["src_tokens"], z["src_offsets"]), Side(z["tgt_tokens"], z["tgt_offsets"]))

    @classmethod
    def open(cls, directory: Path, layout: dict) -> EncodedCorpus:
        """The corpus a `CorpusWriter` wrote into `directory`, memory-mapped; the lengths (two
        bytes a sentence, for batching) are read into memory. `layout` is `CorpusWriter.layout`."""
        sides = []
        for side in SIDES:
            maps: dict[Path, mmap.mmap] = {}
            tokens = _mapped(directory / f"{side}.tokens", layout["token_dtype"], maps)
            offsets = _mapped(directory / f"{side}.offsets", "int64", maps)
            lengths = np.fromfile(directory / f"{side}.lengths", dtype=layout["length_dtype"])
            if (
                len(lengths) != layout["pairs"]
                or len(offsets) != layout["pairs"] + 1
                or offsets[-1] != len(tokens)
            ):
                raise ValueError(f"{directory}: {side} files do not hold {layout['pairs']} pairs")
            sides.append(Side(tokens, offsets, lengths, maps))
        lines = np.fromfile(directory / LINES, dtype=np.uint32)
        if len(lines) != layout["pairs"]:
            raise ValueError(f"{directory}: {LINES} does not hold {layout['pairs']} pairs")
        return cls(*sides, files=(directory, layout), lines=lines)


def _mapped(path: Path, dtype: str, maps: dict[Path, mmap.mmap]) -> np.ndarray:
    if path.stat().st_size == 0:  # mmap refuses an empty file
        return np.empty(0, dtype=dtype)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    maps[path] = m
    return np.frombuffer(m, dtype=dtype)


class ChecksummedFile:
    """A file written front to back whose size and CRC-32 are kept as it goes, so checksums of
    a cache cost no second read; an OS error (a full disk) names the file."""

    def __init__(self, path: Path):
        self.path, self.bytes, self.crc = Path(path), 0, 0
        self.file = open(self.path, "wb")  # noqa: SIM115  (closed by `close`)

    def write(self, array: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(array)).cast("B")
        try:
            self.file.write(data)
        except OSError as e:  # numpy's tofile said only "119918 requested and 26624 written"
            raise OSError(e.errno, e.strerror, str(self.path)) from None
        self.bytes += len(data)
        self.crc = zlib.crc32(data, self.crc)

    def close(self, sync: bool) -> None:
        """Close; with `sync`, flushed to the disk first (so that a crash later cannot leave the
        file half-written)."""
        try:
            if sync:
                self.file.flush()
                os.fsync(self.file.fileno())
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(self.path)) from None
        finally:
            with contextlib.suppress(OSError):  # the flush above already said what went wrong
                self.file.close()

    @property
    def entry(self) -> dict:
        """As `nmt.fileio.file_entry(path, "crc32")` would compute it from the file."""
        return {"bytes": self.bytes, "crc32": f"{self.crc:08x}"}


class CorpusWriter:
    """Appends encoded chunks to the flat files of `EncodedCorpus.open`, so that a corpus of
    any size is encoded in the memory of one chunk."""

    def __init__(self, directory: Path, vocab_size: int, max_len: int):
        self.directory = Path(directory)
        self.token_dtype, self.length_dtype = _smallest(vocab_size), _smallest(max_len + 1)
        self.files: dict[tuple[str, str], ChecksummedFile] = {}
        for side, part in itertools.product(SIDES, PARTS):
            self.files[side, part] = ChecksummedFile(self.directory / f"{side}.{part}")
        self.pairs = 0
        self.ends = {side: 0 for side in SIDES}  # tokens written so far
        self.files["pairs", LINES] = ChecksummedFile(self.directory / LINES)
        for side in SIDES:
            self.files[side, "offsets"].write(np.zeros(1, dtype=np.int64))

    def append(self, chunk: EncodedCorpus) -> None:
        for side, data in zip(SIDES, (chunk.src, chunk.tgt), strict=True):
            self.files[side, "tokens"].write(data.tokens.astype(self.token_dtype))
            self.files[side, "offsets"].write(data.offsets[1:] + self.ends[side])
            self.files[side, "lengths"].write(data.lengths.astype(self.length_dtype))
            self.ends[side] += int(data.offsets[-1])
        lines = np.zeros(len(chunk), np.uint32) if chunk.lines is None else chunk.lines
        self.files["pairs", LINES].write(np.asarray(lines, dtype=np.uint32))
        self.pairs += len(chunk)

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(self, error_type, *_) -> None:
        """Close the files; after a clean run, synced to the disk first."""
        for f in self.files.values():
            f.close(sync=error_type is None)

    @property
    def layout(self) -> dict:
        """What `EncodedCorpus.open` needs, and each file's size and CRC-32 (`files`)."""
        return {
            "pairs": self.pairs,
            "token_dtype": self.token_dtype.name,
            "length_dtype": self.length_dtype.name,
            "files": {f.path.name: f.entry for f in self.files.values()},
        }
