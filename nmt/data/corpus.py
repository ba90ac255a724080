"""Encoded parallel text as two flat int32 arrays with offsets: compact in memory and on disk
(a 200k-pair corpus takes tens of MB, not the GBs of Python lists of ints)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.fileio import atomic_write


@dataclass
class Side:
    tokens: np.ndarray  # (N_tokens,) int32, all sentences back to back
    offsets: np.ndarray  # (N + 1,) int64, sentence i is tokens[offsets[i]:offsets[i + 1]]

    @classmethod
    def from_lists(cls, rows: list[list[int]]) -> Side:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.fromiter((t for r in rows for t in r), dtype=np.int32, count=int(offsets[-1]))
        return cls(tokens, offsets)

    @classmethod
    def encode(cls, encode_batch, texts: list[str], chunk: int = 10_000) -> Side:
        """`encode_batch` over `texts` a chunk at a time, so only one chunk is ever Python lists."""
        parts = [cls.from_lists(encode_batch(texts[i : i + chunk])) for i in range(0, len(texts), chunk)]
        if not parts:
            return cls.from_lists([])
        lengths = np.concatenate([p.lengths for p in parts])
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(np.concatenate([p.tokens for p in parts]), offsets)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def select(self, indices) -> Side:
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices]
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.concatenate([self[i] for i in indices]) if len(indices) else self.tokens[:0]
        return Side(tokens, offsets)


@dataclass
class EncodedCorpus:
    """Source ids (without EOS) and target ids (without BOS/EOS) of one split."""

    src: Side
    tgt: Side

    def __len__(self) -> int:
        return len(self.src.offsets) - 1

    @classmethod
    def from_lists(cls, src: list[list[int]], tgt: list[list[int]]) -> EncodedCorpus:
        return cls(Side.from_lists(src), Side.from_lists(tgt))

    def select(self, indices) -> EncodedCorpus:
        return EncodedCorpus(self.src.select(indices), self.tgt.select(indices))

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
