"""Greedy and beam search over a pool of fixed rows, for a GPU: every step has the same shapes, so
a window of steps is captured once as a CUDA graph per source-length bucket and replayed, and
the host reads the device once a window instead of once a step.

Why: the continuous pool of `nmt.decode.search` keeps its bookkeeping on the host, so a GPU
waits for Python after every step (on an H200 beam 5 decoded 10,000 lines at 1.1x OpenNMT-py's
speed, issue 52). Here rows keep their place: a sentence's rows go on stepping, to no effect,
until the host sees it finished at the end of the window and puts the next sentence in its place.
The host replays the window step by step with the continuous search's own rules
(`Trail.advance`, `ranking.search_is_over`), so every sentence gets the hypotheses the continuous
search gives it; the steps the device ran past a sentence's end are dropped.

`search.search(..., pools=rows.pools())` decodes in them (the translator chooses them where
`suits`). Sources are padded to a few lengths (`source_bucket`), each with its own memory buffers and
graph; the rows' state, tokens and the window's records are shared by all.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.decode.search import (
    Feed,
    Pool,
    Results,
    Sentence,
    StepModel,
    Trail,
    best_candidates,
    fetch,
    next_beams,
)
from nmt.device import to_device
from nmt.errors import NMTError
from nmt.model.decoder import DecoderState, Memory
from nmt.model.seq2seq import Seq2Seq
from nmt.text.ranking import NEG_INF, Hypothesis, Source, final_score
from nmt.vocab import BOS, EOS, PAD

WINDOW = 8  # steps between two reads of the device


def suits(model: StepModel, cfg: DecodeConfig, device: torch.device, attention: bool) -> bool:
    """Whether `search` here decodes: asked for (`decode.rows`: fixed, or auto on a GPU), a
    single plain model, and nothing the host must look at every step (attention to keep, the
    coverage penalty, n-gram bans). The caller also promises sources without a target prefix,
    constraints or a shortlist. A batch counted in tokens stays on the continuous pool: the
    first group (a window's shortest sentences) would size the pool for every longer one."""
    asked = cfg.rows == "fixed" or (cfg.rows == "auto" and device.type == "cuda")
    wanted = asked and cfg.batch_type == "sentences"
    per_step = attention or cfg.coverage > 0 or cfg.no_repeat_ngram > 0 or cfg.sample
    plain = isinstance(model, Seq2Seq) and not model.decoder.quantized
    return wanted and plain and not per_step


def pools(window: int = WINDOW) -> tuple[Callable[..., Pool], Callable[..., Pool]]:
    """The greedy and beam pools over fixed rows, read every `window` steps, for
    `nmt.decode.search.search(..., attention=False, pools=...)`."""
    return partial(FixedGreedy, window=window), partial(FixedBeam, window=window)


def source_bucket(length: int) -> int:
    """The padded source length of a pool whose longest source has `length` ids: 8, 12, 16, 24,
    32, 48, ... (at most a third padding, and one graph per size)."""
    size = 8
    while size < length:
        size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
    return size


class Steps:
    """Runs a window of steps: on a GPU as a CUDA graph per bucket (the first window of a bucket
    runs eagerly and warms up what a capture cannot start; the second captures, then replays),
    elsewhere eagerly, through the same function."""

    def __init__(self, device: torch.device):
        self.device = device
        self.graphs: dict[int, torch.cuda.CUDAGraph] | None = {} if device.type == "cuda" else None
        self.warm: set[int] = set()
        self.pool = None  # the graphs' shared memory pool
        # warm-ups and captures on a stream of the pool's GPU: torch's default capture stream
        # belongs to whichever GPU first captured in this process
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None

    def run(self, bucket: int, window: Callable[[], None]) -> None:
        if self.graphs is None:
            window()
            return
        with torch.cuda.device(self.device):  # streams and captures on the pool's GPU
            self._run_on_gpu(bucket, window)

    def _run_on_gpu(self, bucket: int, window: Callable[[], None]) -> None:
        if graph := self.graphs.get(bucket):
            graph.replay()
            return
        if bucket not in self.warm:  # as torch's docs ask: warmed up on a side stream
            self.warm.add(bucket)
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                window()
            torch.cuda.current_stream().wait_stream(self.side)
            return
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool, stream=self.side):
                window()
        except RuntimeError as error:
            raise NMTError(
                f"capturing a decoding step as a CUDA graph failed ({error}); decode with --rows pooled"
            ) from None
        self.pool = graph.pool()
        self.graphs[bucket] = graph
        graph.replay()


class FixedRows(Pool):
    """R blocks of K rows each, one sentence a block; subclasses say what a step does and what
    the host makes of a window."""

    K = 1

    def __init__(
        self, model: StepModel, cfg: DecodeConfig, device: torch.device, keep_attention: bool, window: int
    ):
        if keep_attention:
            raise ValueError("fixed rows keep no attention (`suits` says when they decode)")
        super().__init__(model, cfg, device, keep_attention)
        self.window = window
        self.steps = Steps(device)
        self.blocks: list[Sentence | Trail | None] = []  # per block: its sentence's record, or None
        self.memories: dict[int, Memory] = {}  # per source bucket: the memory buffers
        self.bucket = 0

    @torch.no_grad()
    def run(self, feed: Feed) -> Results:
        self.feed = feed
        while True:
            self.refill()
            if all(block is None for block in self.blocks):
                if feed.exhausted:
                    return
                continue  # a live feed with nothing ready
            self.steps.run(self.bucket, self.advance)
            yield from self.collect()

    def refill(self) -> None:
        """New sentences into the free blocks (the first group decides how many blocks there
        are), and the memory into the bucket its longest source needs."""
        free = [b for b, block in enumerate(self.blocks) if block is None]
        live = [block.source for block in self.blocks if block is not None]
        longest = max((len(s.ids) for s in live), default=0)
        group = []
        if free or not self.blocks:
            group = self.feed.take(len(live), longest, limit=len(free) if self.blocks else None)
        if not group:
            if live and source_bucket(longest) < self.bucket:
                self.rebucket(longest, self.mem)
            return
        if any(s.prefix or s.steered or s.vocabulary is not None for s in group):
            raise ValueError("fixed rows decode plain sources only (no prefix, constraints or shortlist)")
        mem, state = self.encode(group)
        if not self.blocks:
            self.allocate(len(group), state)
            free = list(range(len(group)))
        self.rebucket(max([longest] + [len(s.ids) for s in group]), mem)
        blocks = free[: len(group)]
        index, max_lens = to_device(blocks + [s.max_len for s in group], self.device).split(len(group))
        for buffer, new in zip(self.mem.tensors, mem.tensors, strict=True):
            buffer[index, : new.size(1)] = new
            buffer[index, new.size(1) :] = 0
        rows = (index[:, None] * self.K + torch.arange(self.K, device=self.device)).flatten()
        self.state.put(
            rows, state.select(torch.arange(len(group), device=self.device).repeat_interleave(self.K))
        )
        self.start(index, rows, max_lens)
        for b, source in zip(blocks, group, strict=True):
            self.blocks[b] = self.record(source)

    def allocate(self, blocks: int, state: DecoderState) -> None:
        """The pool's buffers, shaped after the first group's state."""
        rows = blocks * self.K
        self.blocks = [None] * blocks
        self.state = DecoderState(
            state.h.new_zeros(state.h.size(0), rows, state.h.size(2)),
            state.c.new_zeros(state.c.size(0), rows, state.c.size(2)),
            None if state.feed is None else state.feed.new_zeros(rows, state.feed.size(1)),
        )

    def rebucket(self, longest: int, template: Memory) -> None:
        """The memory moved into the buffers of `longest`'s bucket, made when first needed."""
        bucket = source_bucket(longest)
        if bucket == self.bucket:
            return
        new = self.memories.get(bucket)
        if new is None:
            shape = (len(self.blocks), bucket)
            new = Memory(*(t.new_zeros(*shape, *t.shape[2:]) for t in template.tensors), beams=self.K)
            self.memories[bucket] = new
        if self.bucket:
            kept = min(bucket, self.bucket)
            for buffer, old in zip(new.tensors, self.mem.tensors, strict=True):
                buffer[:, :kept] = old[:, :kept]
                buffer[:, kept:] = 0
        self.mem, self.bucket = new, bucket

    def advance(self) -> None:
        """A window of steps, on the device only."""
        for j in range(self.window):
            self.one_step(j)

    def record(self, source: Source):
        raise NotImplementedError

    def start(self, index: Tensor, rows: Tensor, max_lens: Tensor) -> None:
        """Blocks `index` (rows `rows`) begin a sentence whose output cap is `max_lens`."""
        raise NotImplementedError

    def one_step(self, j: int) -> None:
        raise NotImplementedError

    def collect(self) -> Results:
        raise NotImplementedError


class FixedGreedy(FixedRows):
    """One row per sentence; a finished row writes PAD and its log-probability stays."""

    def allocate(self, blocks, state):
        super().allocate(blocks, state)
        zeros = torch.zeros(blocks, dtype=torch.long, device=self.device)
        self.y, self.positions, self.max_lens = zeros.clone(), zeros.clone(), zeros.clone()
        self.log_prob = torch.zeros(blocks, dtype=torch.float64, device=self.device)
        self.done = torch.ones(blocks, dtype=torch.bool, device=self.device)
        self.tokens = torch.zeros(self.window, blocks, dtype=torch.long, device=self.device)

    def record(self, source):
        return Sentence(source)

    def start(self, index, rows, max_lens):
        self.y[index], self.positions[index], self.max_lens[index] = BOS, 0, max_lens
        self.log_prob[index], self.done[index] = 0.0, False

    def one_step(self, j):
        logp, state, _ = self.log_probs(self.y, self.positions, None)
        best, token = logp.max(-1)
        token.masked_fill_(self.done, PAD)
        self.log_prob += best.double().masked_fill_(self.done, 0.0)
        self.positions += (~self.done).long()
        self.done |= (token == EOS) | (self.positions >= self.max_lens)
        self.y.copy_(token)
        self.state.copy_(state)
        self.tokens[j] = token

    def collect(self):
        tokens, log_prob = (part.tolist() for part in fetch(self.tokens.t(), self.log_prob[:, None]))
        for b, sentence in enumerate(self.blocks):
            if sentence is None:
                continue
            for token in tokens[b]:
                sentence.tokens.append(token)
                if token == EOS or len(sentence.tokens) >= sentence.source.max_len:
                    (lp,) = log_prob[b]
                    score = final_score(lp, len(sentence.tokens), None, len(sentence.source.ids), self.cfg)
                    yield sentence.source.key, [Hypothesis(sentence.tokens, score, lp, None)]
                    self.blocks[b] = None
                    break


class FixedBeam(FixedRows):
    """K rows per sentence; the device records each step's candidates and survivors for the
    window, and the host follows them (`Trail.advance`) up to the step the search is over."""

    def __init__(self, model, cfg, device, keep_attention, K: int, nbest: int, window: int):
        self.K = K
        super().__init__(model, cfg, device, keep_attention, window)
        self.nbest = nbest
        self.records: list[Tensor] | None = None  # (window, R, ...) each of `Beams.records`

    def allocate(self, blocks, state):
        super().allocate(blocks, state)
        zeros = torch.zeros(blocks, dtype=torch.long, device=self.device)
        self.positions, self.max_lens = zeros.clone(), zeros.clone()
        self.y = torch.zeros(blocks * self.K, dtype=torch.long, device=self.device)
        self.scores = torch.full((blocks, self.K), NEG_INF, dtype=torch.float64, device=self.device)

    def record(self, source):
        return Trail(source)

    def start(self, index, rows, max_lens):
        self.y[rows], self.positions[index], self.max_lens[index] = BOS, 0, max_lens
        self.scores[index] = NEG_INF
        self.scores[index, 0] = 0.0  # all beams start identical: only the first may spread

    def one_step(self, j):
        logp, state, _ = self.log_probs(self.y, self.positions[:, None].expand(-1, self.K).flatten(), None)
        top, token, origin, _ = best_candidates(self.scores, logp, self.K)
        self.positions += 1
        beams = next_beams(top, token, origin, self.positions >= self.max_lens, self.K)
        self.scores.copy_(beams.scores)
        self.y.copy_(beams.y)
        self.state.copy_(state.select(beams.parent_rows))
        if self.records is None:  # the first window is eager: made outside any capture
            self.records = [part.new_empty(self.window, *part.shape) for part in beams.records]
        for buffer, part in zip(self.records, beams.records, strict=True):
            buffer[j] = part

    def collect(self):
        R = len(self.blocks)
        host = fetch(*(part.transpose(0, 1).reshape(R, -1) for part in self.records))
        steps = [part.reshape(R, self.window, -1).tolist() for part in host]
        for b, trail in enumerate(self.blocks):
            if trail is None:
                continue
            for j in range(self.window):
                if trail.advance([part[b][j] for part in steps], None, self.cfg, self.nbest):
                    yield trail.source.key, trail.best(self.nbest)
                    self.blocks[b] = None
                    break
