"""The data a run trains on: prepared once (`prepare_data`, described by `Epochs.notes`), then the
training pairs as batches, an epoch at a time.

An epoch's batches are a function of the seed and the epoch, so a resumed run finds its place
by the number of batches it consumed; under torchrun each process takes every N-th batch. With
subword regularisation (`tokenizer.sampling_alpha`) every epoch is segmented afresh, by a worker
process while the epoch before trains (`nmt.data.subwords`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from nmt.config import Config
from nmt.data.batching import (
    Batch,
    EpochPlan,
    collate,
    draw_counts,
    length_grouped_batches,
    weighted_order,
)
from nmt.data.cleaning import describe_dropped
from nmt.data.corpus import EncodedCorpus
from nmt.data.links import GuidedTargets, read_links
from nmt.data.prepare import PreparedData, prepare
from nmt.data.subwords import EpochSampler
from nmt.data.tokenizer import TokenizerPair
from nmt.train import distributed
from nmt.vocab import UNK

SAMPLED = "sampled"  # in the run folder: the subword samples of the epoch in training and the next


def prepare_data(cfg: Config, origin: dict | None, progress: bool) -> tuple[PreparedData, float]:
    """The data (and the seconds it took); under torchrun rank 0 builds the cache while the others
    wait, then they read it. `origin`: the checkpoint whose tokenizers encode it (a resumed or
    fine-tuned run's)."""
    tokenizers = origin and TokenizerPair.from_state(origin["tokenizers"])
    rank = distributed.rank_and_world()[0]
    if rank > 0:
        distributed.barrier()
    started = time.perf_counter()
    data = prepare(cfg, ("valid",), tokenizers, progress=progress)
    seconds = time.perf_counter() - started
    if rank == 0:
        distributed.barrier()
    return data, seconds


def corpora_note(cfg: Config, parts: list[int]) -> str:
    """Each corpus's pairs and the share of every epoch drawn from it, rounding included: what
    `data.corpora`'s weights came to."""
    drawn = draw_counts(parts, [c.weight for c in cfg.data.corpora])
    shares = [
        f"{c.dir or cfg.data.dir}/{c.train} {size} pairs{f' tagged {c.tag}' if c.tag else ''}: "
        f"{count / sum(drawn):.1%} of an epoch"
        for c, size, count in zip(cfg.data.corpora, parts, drawn, strict=True)
    ]
    return "corpora: " + "; ".join(shares)


def data_notes(cfg: Config, data: PreparedData) -> list[str]:
    """The lines a run starts with about its data: pairs kept and dropped, validation pairs,
    vocabulary sizes, whether the cache was reused; the unknown pieces of a fine-tuning run's
    data (counting them reads the whole corpus, so other runs skip it); the corpora's shares
    when there are several."""
    pairs, tok = len(data.held_out["valid"].pairs), data.tokenizers
    corpora = [corpora_note(cfg, data.parts)] if cfg.data.corpora else []
    unknown = ""
    if cfg.train.init_from:
        src, tgt = unknown_rates(data.train)
        unknown = f"; unknown pieces in the training data: {src:.2%} of source, {tgt:.2%} of target"
    return [
        f"data: {len(data.train)} training pairs (dropped: {describe_dropped(data.dropped)}), "
        f"{pairs} validation pairs; vocabulary {len(tok.src)}/{len(tok.tgt)}"
        + (" (cached)" if data.from_cache else "")
        + unknown,
        *corpora,
    ]


def unknown_rates(corpus: EncodedCorpus) -> tuple[float, float]:
    """The share of source and target pieces that are the unknown piece: how much of a
    fine-tuning run's new data the checkpoint's tokenizers cannot spell."""
    return tuple(unknown_share(side.tokens) for side in (corpus.src, corpus.tgt))  # type: ignore[return-value]


def unknown_share(tokens: np.ndarray, chunk: int = 1 << 24) -> float:
    """The unknown piece's share of `tokens`, counted a chunk at a time: a memory-mapped corpus
    of any size is read, never held."""
    unknown = sum(int(np.count_nonzero(tokens[i : i + chunk] == UNK)) for i in range(0, len(tokens), chunk))
    return unknown / max(1, len(tokens))


class Epochs:
    def __init__(self, cfg: Config, data: PreparedData, device: torch.device, run_dir: Path):
        self.cfg, self.device = cfg, device
        self.corpus, self.parts = data.train, data.parts
        self.notes = data_notes(cfg, data)  # the lines a run starts with about its data
        self.current = 0  # batches in the current epoch, once it has started
        self.sampled_epoch: int | None = None  # the epoch whose subword sample `corpus` holds
        self.sampler = EpochSampler.of(cfg, data.train, data.tokenizers, run_dir / SAMPLED)
        if self.sampler and distributed.rank_and_world()[0] == 0:  # the process that draws them
            self.notes += self.sampler.discard_damaged()
        self.guide: GuidedTargets | None = None  # guided alignment's targets of each batch
        if cfg.train.guided_alignment.links:
            links = read_links(cfg)
            self.guide = GuidedTargets(links, data.tokenizers)
            self.notes.append(links.note(cfg.train.guided_alignment.weight))

    def plan(self, epoch: int, sampled: bool = True) -> EpochPlan:
        """This process's batches of `epoch` (every `world`-th under torchrun), with subword
        regularisation of the epoch's own sample; `sampled=False` only counts them, drawing none."""
        cfg = self.cfg.train
        if sampled and self.sampler and self.sampled_epoch != epoch:
            if distributed.rank_and_world()[0] == 0:  # one process draws, every process reads it
                self.sampler.draw(epoch)
            distributed.barrier()
            self.corpus, self.sampled_epoch = self.sampler.read(epoch), epoch
        plan = length_grouped_batches(
            self.corpus, cfg.batch_size, cfg.seed, epoch, cfg.batch_type, self.drawn(epoch)
        )
        return plan.shard(*distributed.rank_and_world())

    def drawn(self, epoch: int) -> np.ndarray | None:
        """The pairs of `epoch` drawn from several weighted corpora; None: every pair once."""
        corpora = self.cfg.data.corpora
        if not corpora:
            return None
        return weighted_order(self.parts, [c.weight for c in corpora], self.cfg.train.seed, epoch)

    def start(self, epoch: int) -> EpochPlan:
        """The batches of the epoch training enters now."""
        plan = self.plan(epoch)
        self.current = len(plan)  # for the epoch count of the final line
        return plan

    def batches(self, groups: list[list[int]]) -> list[Batch]:
        """`groups` of training pairs as batches on the device; the mapped cache files are
        checked first (a file cut short would kill the process with SIGBUS at the read)."""
        self.corpus.check_mapped()
        batches = [collate(self.corpus, group) for group in groups]
        if self.guide is not None:
            for batch, group in zip(batches, groups, strict=True):
                batch.alignment = self.guide.batch(
                    self.corpus, group, batch.tgt_out.shape[1], batch.src.shape[1]
                )
        return [batch.to(self.device) for batch in batches]

    def release(self) -> None:
        """After each step. Each pair read maps the 64 KB around it (the kernel's fault-around,
        which MADV_RANDOM does not stop): left mapped, a hundred steps of random pairs held all
        600 MB of a 4.5M-pair cache. Dropped every step (0.5 ms), it is one step's worth."""
        self.corpus.release()

    def count(self, epoch: int, batch_in_epoch: int) -> float:
        """Epochs trained, the current one counted in part."""
        if batch_in_epoch and not self.current:  # a finished run reopened: no epoch started
            self.current = len(self.plan(epoch, sampled=False))
        return epoch + batch_in_epoch / max(1, self.current)
