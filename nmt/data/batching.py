"""Encoded examples -> padded tensor batches, grouped by length to waste little on padding."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from nmt.data.tokenizer import BOS, EOS, PAD, TokenizerPair

Example = tuple[list[int], list[int]]  # (source ids + EOS, target ids without BOS/EOS)


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) ids, PAD-padded, every row ends in EOS
    src_len: torch.Tensor  # (B,) on the CPU (packing wants it there)
    tgt_in: torch.Tensor  # (B, T) BOS y_1 ... y_n
    tgt_out: torch.Tensor  # (B, T) y_1 ... y_n EOS

    @property
    def n_tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device) -> Batch:
        nb = device.type == "cuda"
        return Batch(
            self.src.to(device, non_blocking=nb),
            self.src_len,
            self.tgt_in.to(device, non_blocking=nb),
            self.tgt_out.to(device, non_blocking=nb),
        )


def encode_pairs(pairs: list[tuple[str, str]], tok: TokenizerPair) -> list[Example]:
    src = tok.src.encode_batch([s for s, _ in pairs])
    tgt = tok.tgt.encode_batch([t for _, t in pairs])
    return [(s + [EOS], t) for s, t in zip(src, tgt, strict=True)]


def filter_long(examples: list[Example], max_len: int) -> list[Example]:
    """Drop training pairs with more than `max_len` subwords on either side."""
    return [(s, t) for s, t in examples if len(s) <= max_len + 1 and len(t) <= max_len]


def pad(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def pad_sources(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    return pad(rows), torch.tensor([len(r) for r in rows], dtype=torch.long)


def collate(examples: list[Example]) -> Batch:
    src, src_len = pad_sources([s for s, _ in examples])
    tgt_in = pad([[BOS] + t for _, t in examples])
    tgt_out = pad([t + [EOS] for _, t in examples])
    batch = Batch(src, src_len, tgt_in, tgt_out)
    if torch.cuda.is_available():
        batch = Batch(*(x.pin_memory() for x in (src, src_len, tgt_in, tgt_out)))
    return batch


def length_grouped_batches(
    examples: list[Example], batch_size: int, seed: int, epoch: int
) -> list[list[int]]:
    """Index lists of `batch_size` examples of similar length, in a seeded random order.

    Examples are shuffled, cut into pools of 50 batches, sorted by length inside each pool, then
    the batches are shuffled: similar lengths share a batch, yet every epoch's order differs.
    """
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(examples)))
    rng.shuffle(order)
    pool = batch_size * 50
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: (len(examples[i][0]), len(examples[i][1])))
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches
