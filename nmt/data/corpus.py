"""Encoded parallel text as flat token arrays with offsets: compact in memory and on disk.

Held-out splits are small and live in memory (`save`/`load` as .npz). The training split can
hold millions of pairs, so it is written a chunk at a time (`CorpusWriter`) into flat files and
read back memory-mapped (`EncodedCorpus.open`): training touches only the pairs of its batches,
and `release` hands those pages back, so the process holds the index (a few bytes a pair), not
the corpus.
"""

from __future__ import annotations

import io
import itertools
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nmt.fileio import atomic_write

SIDES = ("src", "tgt")


def _smallest(dtype_limit: int) -> np.dtype:
    """The narrowest unsigned type that holds values below `dtype_limit`."""
    return np.dtype(np.uint16 if dtype_limit <= 1 << 16 else np.uint32)


@dataclass
class Side:
    tokens: np.ndarray  # (N_tokens,) all sentences back to back (int32, or uint16/uint32 on disk)
    offsets: np.ndarray  # (N + 1,) int64, sentence i is tokens[offsets[i]:offsets[i + 1]]
    stored_lengths: np.ndarray | None = None  # (N,) written beside the tokens; else np.diff(offsets)
    maps: list[mmap.mmap] = field(default_factory=list, repr=False)  # when memory-mapped

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
        for m in self.maps:
            m.madvise(mmap.MADV_DONTNEED)


@dataclass
class EncodedCorpus:
    """Source ids (without EOS) and target ids (without BOS/EOS) of one split."""

    src: Side
    tgt: Side

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def from_lists(cls, src: list[list[int]], tgt: list[list[int]]) -> EncodedCorpus:
        return cls(Side.from_lists(src), Side.from_lists(tgt))

    def select(self, indices) -> EncodedCorpus:
        return EncodedCorpus(self.src.select(indices), self.tgt.select(indices))

    def release(self) -> None:
        self.src.release()
        self.tgt.release()

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
            maps: list[mmap.mmap] = []
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
        return cls(*sides)


def _mapped(path: Path, dtype: str, maps: list[mmap.mmap]) -> np.ndarray:
    if path.stat().st_size == 0:  # mmap refuses an empty file
        return np.empty(0, dtype=dtype)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    maps.append(m)
    return np.frombuffer(m, dtype=dtype)


class CorpusWriter:
    """Appends encoded chunks to the flat files of `EncodedCorpus.open`, so that a corpus of
    any size is encoded in the memory of one chunk."""

    def __init__(self, directory: Path, vocab_size: int, max_len: int):
        self.directory = Path(directory)
        self.token_dtype, self.length_dtype = _smallest(vocab_size), _smallest(max_len + 1)
        self.files = {  # closed by `close`
            (side, part): open(self.directory / f"{side}.{part}", "wb")  # noqa: SIM115
            for side in SIDES
            for part in ("tokens", "offsets", "lengths")
        }
        self.pairs = 0
        self.ends = {side: 0 for side in SIDES}  # tokens written so far
        for side in SIDES:
            np.zeros(1, dtype=np.int64).tofile(self.files[side, "offsets"])

    def append(self, chunk: EncodedCorpus) -> None:
        for side, data in zip(SIDES, (chunk.src, chunk.tgt), strict=True):
            data.tokens.astype(self.token_dtype).tofile(self.files[side, "tokens"])
            (data.offsets[1:] + self.ends[side]).tofile(self.files[side, "offsets"])
            data.lengths.astype(self.length_dtype).tofile(self.files[side, "lengths"])
            self.ends[side] += int(data.offsets[-1])
        self.pairs += len(chunk)

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(self, error_type, *_) -> None:
        """Close the files; after a clean run, synced to the disk first (so that a crash later
        cannot leave one half-written)."""
        for f in self.files.values():
            if error_type is None:
                f.flush()
                os.fsync(f.fileno())
            f.close()

    @property
    def layout(self) -> dict:
        return {
            "pairs": self.pairs,
            "token_dtype": self.token_dtype.name,
            "length_dtype": self.length_dtype.name,
        }
