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

`search.search(..., pools=translator_pools.pools())` decodes in them (the translator chooses
them where `suits`). Sources are padded to a few lengths (`source_bucket`), each with its own
memory buffers and graph; the rows' state, tokens and the window's records are shared by all.
A shortlist's pieces are padded to a few widths too (`FixedVocabulary`), a graph for each.
A translator keeps its pools between searches (`Kept`), so a graph is captured once per
translator, not once per call.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.data.batching import pad_sources
from nmt.decode.search import (
    Encoded,
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
from nmt.decode.topk import best
from nmt.decode.vocabulary import FixedVocabulary
from nmt.device import to_device
from nmt.errors import NMTError
from nmt.model.decoder import DecoderState, Memory
from nmt.model.seq2seq import Seq2Seq
from nmt.text.ranking import (
    NEG_INF,
    Hypothesis,
    Source,
    final_score,
    length_penalty,
    out_of_reach,
    stop_threshold,
)
from nmt.vocab import BOS, EOS, PAD

WINDOW = 8  # steps between two reads of the device
# what a window's graph is captured for: the source bucket, the shortlist's width (0: none), and
# whether prefixes are forced
Shape = tuple[int, int, bool]


def suits(model: StepModel, cfg: DecodeConfig, device: torch.device, attention: bool) -> bool:
    """Whether `search` here decodes: asked for (`decode.rows`: fixed, or auto on a GPU), a
    single plain model, and nothing the host must look at every step (attention to keep, the
    coverage penalty, n-gram bans). The caller also promises sources without constraints
    (target prefixes and a shortlist are followed here too). A batch counted in tokens stays on
    the continuous pool: the first group (a window's shortest sentences) would size the pool for
    every longer one."""
    asked = cfg.rows == "fixed" or (cfg.rows == "auto" and device.type == "cuda")
    wanted = asked and cfg.batch_type == "sentences"
    per_step = attention or cfg.coverage > 0 or cfg.no_repeat_ngram > 0 or cfg.sample
    plain = isinstance(model, Seq2Seq) and not model.decoder.quantized
    return wanted and plain and not per_step


def pool_blocks(feed: Feed, batch_size: int) -> int:
    """The blocks of a pool whose first group holds the sentences ready: the next power of two,
    at most the batch size, so that calls of other sizes share a few pools (and their graphs);
    the blocks no sentence takes stay idle. A live feed (a server's queue, where more come while
    the pool decodes): the batch size, or the pool of its first request would serve every later
    one a few sentences at a time."""
    sentences = feed.fitting()
    if feed.live or not sentences:
        return batch_size
    return min(1 << (sentences - 1).bit_length(), batch_size)


def weights_of(model: StepModel) -> tuple:
    """Where the model's tensors live, and its mode: a graph reads its weights where they were
    when it was captured, so a pool serves the same model only (weights changed in place, as an
    optimiser step does, are read anew)."""
    if not isinstance(model, torch.nn.Module):
        return (id(model),)
    return (id(model), model.training, *(t.data_ptr() for t in (*model.parameters(), *model.buffers())))


class Kept:
    """A translator's fixed-row pools, kept between its searches: buffers made and graphs
    captured once per shape, then replayed by every later search of that shape (validation
    every few hundred steps, an API's or a server's calls), where a pool made per search
    captured anew each time (an eager window, then a capture, per source length). A pool is
    taken out while a search runs in it, so two searches at once never share one; the `size`
    used last are kept."""

    def __init__(self, size: int = 4):
        self.size = size
        self.kept: OrderedDict[tuple, FixedRows] = OrderedDict()

    def pools(self, window: int = WINDOW) -> tuple[Callable[..., Pool], Callable[..., Pool]]:
        """The greedy and beam pools over fixed rows, read every `window` steps, for
        `nmt.decode.search.search(..., attention=False, pools=...)`."""
        greedy = partial(Reused, self, FixedGreedy, window=window)
        return greedy, partial(Reused, self, FixedBeam, window=window)

    def take(self, key: tuple) -> FixedRows | None:
        return self.kept.pop(key, None)

    def put(self, key: tuple, pool: FixedRows) -> None:
        self.kept[key] = pool
        while len(self.kept) > self.size:
            self.kept.popitem(last=False)


class Reused:
    """A search over fixed rows in the kept pool of its shape (kind, beam, n-best, window,
    blocks, settings, weights), or in a new one, kept after."""

    def __init__(self, kept: Kept, kind: type[FixedRows], model, cfg, device, keep_attention, *beam, window):
        self.kept, self.kind, self.window = kept, kind, window
        self.args = (model, cfg, device, keep_attention, *beam)

    def run(self, feed: Feed) -> Results:
        model, cfg, device, _, *beam = self.args
        blocks = pool_blocks(feed, cfg.batch_size)
        modes = (torch.is_inference_mode_enabled(), torch.is_autocast_enabled(device.type))
        key = (self.kind, *beam, self.window, blocks, str(device), repr(cfg), weights_of(model), modes)
        pool = self.kept.take(key) or self.kind(*self.args, window=self.window, blocks=blocks)
        try:  # a search that failed may leave a half-made graph: its pool is not put back
            yield from pool.run(feed)
        except GeneratorExit:  # the caller stopped reading: the pool is as good as new
            self.kept.put(key, pool)
            raise
        self.kept.put(key, pool)


def source_bucket(length: int) -> int:
    """The padded source length of a pool whose longest source has `length` ids: 8, 12, 16, 24,
    32, 48, ... (at most a third padding, and one graph per size)."""
    size = 8
    while size < length:
        size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
    return size


class Steps:
    """Runs a window of steps: on a GPU as a CUDA graph per `Shape` (the first window of a shape
    runs eagerly and warms up what a capture cannot start; the second captures, then replays),
    elsewhere eagerly, through the same function."""

    def __init__(self, device: torch.device):
        self.device = device
        self.graphs: dict[Shape, torch.cuda.CUDAGraph] | None = {} if device.type == "cuda" else None
        self.warm: set[Shape] = set()
        self.pool = None  # the graphs' shared memory pool
        # warm-ups and captures on a stream of the pool's GPU: torch's default capture stream
        # belongs to whichever GPU first captured in this process
        self.side = torch.cuda.Stream(device) if device.type == "cuda" else None

    def run(self, shape: Shape, window: Callable[[], None]) -> None:
        if self.graphs is None:
            window()
            return
        with torch.cuda.device(self.device):  # streams and captures on the pool's GPU
            self._run_on_gpu(shape, window)

    def _run_on_gpu(self, shape: Shape, window: Callable[[], None]) -> None:
        if graph := self.graphs.get(shape):
            graph.replay()
            return
        if shape not in self.warm:  # as torch's docs ask: warmed up on a side stream
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                window()
            torch.cuda.current_stream().wait_stream(self.side)
            self.warm.add(shape)
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
        self.graphs[shape] = graph
        graph.replay()


class FixedRows(Pool):
    """R blocks of K rows each, one sentence a block; subclasses say what a step does and what
    the host makes of a window."""

    K = 1

    def __init__(
        self,
        model: StepModel,
        cfg: DecodeConfig,
        device: torch.device,
        keep_attention: bool,
        window: int,
        blocks: int,
    ):
        if keep_attention:
            raise ValueError("fixed rows keep no attention (`suits` says when they decode)")
        super().__init__(model, cfg, device, keep_attention)
        self.window = window
        self.steps = Steps(device)
        self.blocks: list[Sentence | Trail | None] = [None] * blocks  # per block: its sentence, or None
        self.memories: dict[int, Memory] = {}  # per source bucket: the memory buffers
        self.attention_states: dict[int, Tensor] = {}  # and a stateful attention's state buffer
        self.bucket = 0
        self.shortlist: FixedVocabulary | None = None  # its buffers, made by the first search with one
        self.prefixes: Tensor | None = None  # (blocks, decode.max_len): each block's target prefix
        self.prefix_lens: Tensor | None = None  # (blocks,): its length, 0 for none

    @torch.no_grad()
    def run(self, feed: Feed) -> Results:
        """The search of `feed`'s sources; a pool runs one search at a time, any number in turn."""
        self.feed = feed
        self.blocks = [None] * len(self.blocks)
        if self.state is not None:
            self.idle()  # a search left unfinished leaves rows stepping: stopped, as at the start
        try:
            yield from self.windows()
        finally:  # a kept pool holds nothing of a search between two
            self.feed, self.encoded, self.vocabulary = None, Encoded([], None, None), None
            self.prefixed = False

    def windows(self) -> Results:
        """Refill, a window of steps, what the host makes of it; until the feed runs out. A
        window's results go to the caller once the next window is launched, so that on a GPU
        the caller's work on them (making and writing translations) runs beside the device's;
        an empty pool hands them out before it reads the feed (a live feed yields None, rather
        than block, while sentences it gave are being decoded)."""
        results: list = []
        while True:
            if all(block is None for block in self.blocks):
                yield from results
                results = []
            self.refill()
            if all(block is None for block in self.blocks):
                if self.feed.exhausted:
                    return
                continue  # a live feed with nothing ready
            width = self.vocabulary.width if self.vocabulary else 0
            self.steps.run((self.bucket, width, self.prefixed), self.advance)
            yield from results
            results = list(self.collect())

    def refill(self) -> None:
        """New sentences into the free blocks (the first group decides how many blocks there
        are), and the memory into the bucket its longest source needs."""
        free = [b for b, block in enumerate(self.blocks) if block is None]
        live = [block.source for block in self.blocks if block is not None]
        longest = max((len(s.ids) for s in live), default=0)
        group = self.feed.take(len(live), longest, limit=len(free)) if free else []
        if not group:
            if live and source_bucket(longest) < self.bucket:
                self.rebucket(longest, self.mem)
            return
        if any(s.steered for s in group):
            raise ValueError("fixed rows decode sources without constraints only")
        mem, state = self.encode(group)
        if self.state is None:
            self.allocate(len(self.blocks), state)
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
        if group[0].vocabulary is not None:  # a translator gives every sentence a shortlist, or none
            self.cut_to_shortlist(blocks)
        if self.prefixed or any(s.prefix for s in group):
            self.put_prefixes(index, [s.prefix for s in group])

    def cut_to_shortlist(self, joining: list[int]) -> None:
        """The shortlist's pieces and masks for sentences that took blocks `joining`, in buffers
        made once per pool and cleared once per search (`FixedVocabulary`)."""
        if self.vocabulary is None:
            if self.shortlist is None:
                self.shortlist = FixedVocabulary(self.model.decoder.output_layer, len(self.blocks), self.K)
            self.vocabulary = self.shortlist
            self.shortlist.clear()
        allowed = {b: block.source.vocabulary for b, block in enumerate(self.blocks) if block is not None}
        self.shortlist.update(allowed, joining)

    def put_prefixes(self, index: Tensor, prefixes: list[list[int]]) -> None:
        """The target prefixes of sentences that took blocks `index`, which the step forces
        (`forced`); the buffers are made once per pool and cleared once per search."""
        if not self.prefixed:
            if self.prefixes is None:
                self.prefixes = torch.zeros(
                    len(self.blocks), self.cfg.max_len, dtype=torch.long, device=self.device
                )
                self.prefix_lens = torch.zeros(len(self.blocks), dtype=torch.long, device=self.device)
            self.prefix_lens.zero_()
            self.prefixed = True
        padded, lengths = pad_sources(prefixes)
        self.prefixes[index, : padded.size(1)] = to_device(padded, self.device)
        self.prefix_lens[index] = to_device(lengths, self.device)

    def forced(self) -> Tensor:
        """Each row's prefix token due at this step (-1 once its prefix is written), from the
        device's count of tokens written, so that a window forces without the host."""
        written = self.positions
        token = self.prefixes.gather(1, written.clamp(max=self.prefixes.size(1) - 1)[:, None])[:, 0]
        token = token.masked_fill(written >= self.prefix_lens, -1)
        return token[:, None].expand(-1, self.K).flatten()

    def allocate(self, blocks: int, state: DecoderState) -> None:
        """The pool's buffers, shaped after the first group's state; every block idle."""
        rows = blocks * self.K
        self.state = DecoderState(
            state.h.new_zeros(state.h.size(0), rows, state.h.size(2)),
            state.c.new_zeros(state.c.size(0), rows, state.c.size(2)),
            None if state.feed is None else state.feed.new_zeros(rows, state.feed.size(1)),
            None
            if state.attention is None
            else state.attention.new_zeros(rows, 0, *state.attention.shape[2:]),
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
        if self.state is not None and self.state.attention is not None:
            self.rebucket_attention(bucket)

    def rebucket_attention(self, bucket: int) -> None:
        """A stateful attention's state moved into its buffer of `bucket` source positions (one
        a bucket, as the memory's: a graph reads the buffers it was captured with)."""
        old = self.state.attention
        new = self.attention_states.get(bucket)
        if new is None:
            new = self.attention_states[bucket] = old.new_zeros(old.size(0), bucket, *old.shape[2:])
        kept = min(bucket, old.size(1))
        new[:, :kept] = old[:, :kept]
        new[:, kept:] = 0
        self.state = DecoderState(self.state.h, self.state.c, self.state.feed, new)

    def advance(self) -> None:
        """A window of steps, on the device only."""
        for j in range(self.window):
            self.one_step(j)

    def record(self, source: Source):
        raise NotImplementedError

    def idle(self) -> None:
        """Every block's rows stopped: they step to no effect until a sentence takes them."""
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

    def idle(self):
        self.done.fill_(True)

    def start(self, index, rows, max_lens):
        self.y[index], self.positions[index], self.max_lens[index] = BOS, 0, max_lens
        self.log_prob[index], self.done[index] = 0.0, False

    def one_step(self, j):
        logp, state, _ = self.log_probs(self.y, self.positions, None)
        chosen, token = best(logp)
        token.masked_fill_(self.done, PAD)
        self.log_prob += chosen.double().masked_fill_(self.done, 0.0)
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

    def __init__(self, model, cfg, device, keep_attention, K: int, nbest: int, window: int, blocks: int):
        self.K = K
        super().__init__(model, cfg, device, keep_attention, window, blocks)
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

    def idle(self):
        self.scores.fill_(NEG_INF)

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
        """The window's steps, followed for every block at once up to its first step where
        something happens (`first_stops`); there `Trail.advance` runs the continuous search's
        rules, and after it the block goes on alone. Quiet steps only append their back-pointers
        (`Trail.extend`): the host does Python work per event, not per sentence-step (which was
        the floor of a GPU's step, docs/notes/performance-history.md, 19 and 22)."""
        R, W = len(self.blocks), self.window
        host = fetch(*(part.transpose(0, 1).reshape(R, -1) for part in self.records))
        parts = [part.reshape(R, W, -1) for part in host]
        tokens, parents, kept, _, bound, ends, capped = parts
        events = ends.any(2) | capped[:, :, 0]
        live = [b for b, trail in enumerate(self.blocks) if trail is not None]
        trails: list[Trail] = [self.blocks[b] for b in live]  # type: ignore[misc]
        penalties = np.array([length_penalty(t.source.max_len, self.cfg) for t in trails])
        thresholds = np.array([self.threshold(t) for t in trails])
        stops = first_stops(events[live], bound[live, :, 0], thresholds, penalties)
        for b, trail, penalty, stop in zip(live, trails, penalties, stops.tolist(), strict=True):
            start = 0
            while True:
                trail.extend(*(part[b, start:stop].tolist() for part in (tokens, parents, kept)))
                if stop == W:
                    break
                if trail.advance([part[b, stop].tolist() for part in parts], None, self.cfg, self.nbest):
                    yield trail.source.key, trail.best(self.nbest)
                    self.blocks[b] = None
                    break
                start = stop + 1
                after = first_stops(
                    events[b, None, start:], bound[b, None, start:, 0], self.threshold(trail), penalty
                )
                stop = start + int(after[0])

    def threshold(self, trail: Trail) -> float:
        """`stop_threshold` of the trail, NaN (never reached) while fewer than n-best have finished."""
        threshold = stop_threshold(trail.finished, self.nbest)
        return np.nan if threshold is None else threshold


def first_stops(events: np.ndarray, bounds: np.ndarray, thresholds, penalties) -> np.ndarray:
    """Per block (rows of `events` and `bounds`, one a step), the first step where a candidate
    ends or the cap is hit (`events`), or the best live score falls so low that
    `ranking.search_is_over` may say yes: the step's bound / the length penalty at the cap at or
    under the n-best-th finished score (`thresholds`, NaN for none: never). The steps before are
    quiet: a search goes on through them unchanged. The window's length where none stops."""
    stops = events | out_of_reach(np.asarray(thresholds)[..., None], bounds, np.asarray(penalties)[..., None])
    if not stops.shape[1]:  # no step left in the window
        return np.zeros(len(stops), dtype=np.int64)
    return np.where(stops.any(1), stops.argmax(1), stops.shape[1])
