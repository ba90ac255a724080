"""Subword regularisation: each epoch's training pairs segmented afresh (Kudo 2018's sampling for
unigram models, BPE-dropout after Provilkov et al. 2020 for BPE ones), by a worker process while
the previous epoch trains.

A sampled sentence is its cached encoding's text (decoded from the ids) encoded again with
sampling, so an epoch holds the cache's pairs in the cache's order, and weighted corpora and
their tags work unchanged. A sentence whose sample comes out longer than `data.max_len`, or
whose cached pieces hold the unknown piece (its text would not encode back to it), keeps its
cached pieces.

SentencePiece's sampling is seeded (each chunk with a seed of its own) but its draws differ from
one process to the next under the same seed (measured with sentencepiece 0.2), so two runs
never train on the same samples; what makes a resume exact is that each epoch's sample is kept
in the run folder (`sampled/`) while it trains.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import shutil
import signal
import weakref
from dataclasses import dataclass
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path

import numpy as np

from nmt.config import Config
from nmt.data.corpus import CorpusWriter, EncodedCorpus, Side
from nmt.data.tokenizer import Tokenizer, TokenizerPair
from nmt.fileio import mismatch
from nmt.jsonvalues import JSONError, read_json
from nmt.vocab import UNK

LAYOUT = "layout.json"  # written last into a sample's folder: what `EncodedCorpus.open` needs
CHUNK = 10_000  # pairs sampled at a time: the worker's memory is a chunk's


@dataclass(frozen=True)
class Sampling:
    """How pieces are sampled: `alpha` is unigram's smoothing (lower: more varied) or BPE's
    dropout probability; `nbest` the unigram segmentations sampled from (-1: all of them)."""

    alpha: float
    nbest: int
    max_len: int

    def sample(self, tok: Tokenizer, side: Side) -> Side:
        """`side`'s sentences segmented afresh (the cached ones where a sample cannot stand)."""
        cached = [side[i].tolist() for i in range(len(side))]
        texts = tok.sp.decode(cached)
        sampled = tok.sp.encode(
            texts, enable_sampling=True, alpha=self.alpha, nbest_size=self.nbest, num_threads=1
        )
        rows = [
            new if len(new) <= self.max_len and UNK not in old else old
            for old, new in zip(cached, sampled, strict=True)
        ]
        return Side.from_lists(rows)


def chunk_seed(seed: int, start: int) -> int:
    """SentencePiece's random stream restarts from the global seed at every call: each chunk
    gets a seed of its own, so two chunks do not draw alike."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{start}".encode(), digest_size=4).digest(), "little")


def sample_epoch(
    corpus: EncodedCorpus, tokenizers: dict[str, bytes], sampling: Sampling, seed: int, out: Path
) -> dict:
    """The sampled encoding of `corpus` written into `out` (a `CorpusWriter` folder); its layout."""
    import sentencepiece as spm

    tok = TokenizerPair.from_state(tokenizers)
    out.mkdir(parents=True)
    with CorpusWriter(out, max(len(tok.src), len(tok.tgt)), sampling.max_len) as writer:
        for start in range(0, len(corpus), CHUNK):
            chunk = corpus.select(np.arange(start, min(start + CHUNK, len(corpus))))
            spm.set_random_generator_seed(chunk_seed(seed, start))
            writer.append(
                EncodedCorpus(sampling.sample(tok.src, chunk.src), sampling.sample(tok.tgt, chunk.tgt))
            )
            corpus.release()
    return writer.layout


def _sample_files(cached: Path, layout: dict, tokenizers: dict, sampling: Sampling, seed: int, out: Path):
    """`sample_epoch` in the worker, on the cached corpus mapped there (not pickled across),
    into `out` whole or not at all: written beside it, then renamed."""
    partial = out.with_name(f"{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # what a killed worker left
    written = sample_epoch(EncodedCorpus.open(cached, layout), tokenizers, sampling, seed, partial)
    (partial / LAYOUT).write_text(json.dumps(written), encoding="utf-8")
    partial.rename(out)


def read_layout(folder: Path) -> dict:
    """The layout of the epoch sample in `folder`, as its worker wrote it last."""
    return read_json(folder / LAYOUT, {"files": dict})


def damage(folder: Path) -> str | None:
    """Why the epoch sample in `folder` is not as its worker wrote it (its layout unreadable, a
    file missing, cut short or changed since), or None when it is whole."""
    try:
        return mismatch(folder, read_layout(folder)["files"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, JSONError):
        return f"{folder / LAYOUT}: missing or unreadable"


def _ignore_interrupts() -> None:
    """Ctrl-C is the trainer's to handle (it stops at a step boundary and saves)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class EpochSampler:
    """Sampled encodings of the cached training split (`corpus`, memory-mapped from its cache
    folder, which the worker maps too), one per epoch, in `folder` (the run's): the one asked
    for is drawn now if it is not there yet, and the next epoch's is started at once in a
    worker process. An epoch's sample stays on disk until the next one is in use, so a resumed
    run reads back the very pieces it was training on."""

    def __init__(
        self, corpus: EncodedCorpus, tok: TokenizerPair, sampling: Sampling, seed: int, folder: Path
    ):
        if corpus.files is None:
            raise ValueError("subword sampling draws from a memory-mapped cache")
        self.args = (*corpus.files, tok.to_state(), sampling)
        self.seed, self.folder = seed, Path(folder)
        self.pool: Pool | None = None  # started with the first epoch: nothing runs during start-up
        self.pending: dict[int, AsyncResult] = {}

    @classmethod
    def of(cls, cfg: Config, corpus: EncodedCorpus, tok: TokenizerPair, folder: Path) -> EpochSampler | None:
        """The sampler `tokenizer.sampling_alpha` asks for (each epoch's in `folder`), or None."""
        t = cfg.tokenizer
        if not t.sampling_alpha:
            return None
        return cls(
            corpus,
            tok,
            Sampling(t.sampling_alpha, t.sampling_nbest, cfg.data.max_len),
            cfg.train.seed,
            folder,
        )

    def discard_damaged(self) -> list[str]:
        """A warning for each sample on disk (a resumed run's) that is not as written, removed
        so that its epoch is drawn again: the samples are nmt's own cache, rebuilt rather than
        refused. A resume is then exact but for that epoch's pieces: drawn in another process,
        they are not those drawn before, whatever the seed (see the module's docstring)."""
        warnings = []
        for folder in sorted(self.folder.glob("epoch-*")):
            if not folder.name.endswith(".partial") and (problem := damage(folder)):
                shutil.rmtree(folder, ignore_errors=True)
                warnings.append(
                    f"warning: {problem}: a damaged subword sample, removed; its epoch is sampled "
                    "again, on other pieces than before"
                )
        return warnings

    def _start(self, epoch: int) -> None:
        if epoch in self.pending or (self.folder / f"epoch-{epoch}" / LAYOUT).is_file():
            return
        if self.pool is None:
            self.folder.mkdir(exist_ok=True)
            spawn = multiprocessing.get_context("spawn")  # no fork of a process holding torch's threads
            self.pool = spawn.Pool(1, initializer=_ignore_interrupts)
            weakref.finalize(self, self.pool.terminate)  # an epoch being drawn is not waited for
        args = (*self.args, self.seed * 1000 + epoch, self.folder / f"epoch-{epoch}")
        self.pending[epoch] = self.pool.apply_async(_sample_files, args)

    def draw(self, epoch: int) -> None:
        """`epoch`'s sample on disk (drawn now unless it is there or being drawn), the samples
        before it removed, and the next epoch's started."""
        self._start(epoch)
        if epoch in self.pending:
            self.pending.pop(epoch).get()
        for old in self.folder.glob("epoch-*"):
            if int(old.name.split("-")[1].removesuffix(".partial")) < epoch:
                shutil.rmtree(old, ignore_errors=True)  # mapped pages outlive the files
        self._start(epoch + 1)

    def read(self, epoch: int) -> EncodedCorpus:
        """`epoch`'s sampled pairs (`draw` made them), memory-mapped."""
        folder = self.folder / f"epoch-{epoch}"
        return EncodedCorpus.open(folder, read_layout(folder))
