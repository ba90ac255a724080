"""Greedy and beam search with continuous batching, through the `StepModel` protocol.

The decoding batch is a pool of rows. A sentence's rows leave the pool the step it is done (the
pool's last rows move into their place), and the next sentences (length-sorted by the caller)
are encoded and join as soon as an eighth of the pool is free (beam search: as soon as one
sentence is), so steps run at nearly full width and a whole file has one tail instead of one per
batch. Rows at different target positions share a step: every query carries its own position.

Beam search keeps K rows per sentence (a block) and takes the best 2K candidates of each sentence,
so that hypotheses ending in EOS leave without shrinking the beam. Histories are back-pointers
(each step's candidate tokens, parents and survivors, on the host), not copied tensors, and the
attention is stored only when an output asks for it (or the coverage penalty needs it).
"""

from __future__ import annotations

import collections
import itertools
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from nmt.allocator import FreePages
from nmt.config import DecodeConfig
from nmt.data.batching import pad_sources
from nmt.decode.topk import best, top_k
from nmt.decode.vocabulary import FixedVocabulary, Vocabulary
from nmt.device import to_device
from nmt.text.constraints import Candidate, Progress, allocate, banned
from nmt.text.ranking import (
    NEG_INF,
    Hypothesis,
    Source,
    beam_width,
    final_score,
    is_greedy,
    restrict,
    search_is_over,
)
from nmt.vocab import BOS, EOS, PAD

Results = Iterator[tuple[int, list[Hypothesis]]]  # (Source.key, n-best hypotheses, best first)


class StepModel(Protocol):
    """What a search needs from a model: a Seq2Seq, or an Ensemble of them.

    `encode` returns the memory (with `rows(index, length)`, `compact(rows, holes, fillers)`,
    `share(beams)` and `join(other, longest)`: lengths the search knows, so the memory need not
    read them from its mask) and the first decoder state (with `select(index)` and
    `join(other)`); `step`
    maps the previous tokens y (R,) at target `positions` (R,) to logits (R, V) (with a
    shortlist's `vocabulary`, (R, U) of its pieces), the next state and the attention (R, S).
    """

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Any, Any]: ...

    def step(
        self,
        y: Tensor,
        state: Any,
        memory: Any,
        positions: Tensor,
        vocabulary: Vocabulary | FixedVocabulary | None = None,
    ) -> tuple[Tensor, Any, Tensor]: ...


class Feed:
    """The sources waiting to join the pool, taken in groups that keep the pool within its limit:
    `fits(sentences, longest source)` says whether a pool of that shape may be decoded at once.

    `sources` may also yield None, meaning "none ready yet, ask again next step" (a server's
    queue while the pool is busy); the search ends when it is exhausted and the pool is empty.
    """

    def __init__(self, sources: Iterable[Source | None], fits: Callable[[int, int], bool]):
        self._sources, self.fits = iter(sources), fits
        self._ahead: collections.deque[Source] = collections.deque()  # read, not yet taken
        self._done = False
        self.live = False  # whether it has said "none ready yet": more may come while decoding

    @property
    def exhausted(self) -> bool:
        return self._done and not self._ahead

    def upcoming(self, n: int) -> list[Source]:
        """Up to the next `n` ready sources, not taken (fewer when no more are ready now)."""
        self._read(n)
        return list(itertools.islice(self._ahead, n))

    def _read(self, n: int) -> None:
        """Read ahead until `n` sources are ready, or none is ready now."""
        while len(self._ahead) < n and not self._done:
            try:
                source = next(self._sources)
            except StopIteration:
                self._done = True
                break
            if source is None:  # a live feed with nothing ready: ask again next step
                self.live = True
                break
            self._ahead.append(source)

    def fitting(self, count: int = 0, longest: int = 0, limit: int | None = None) -> int:
        """How many of the next ready sources (at most `limit`) fit beside `count` sentences
        whose longest source is `longest` (an empty pool always admits one, however long)."""
        n = 0
        while limit is None or n < limit:
            self._read(n + 1)
            if len(self._ahead) <= n:
                break
            longer = max(longest, len(self._ahead[n].ids))
            if (count or n) and not self.fits(count + n + 1, longer):
                break
            n, longest = n + 1, longer
        return n

    def take(self, count: int, longest: int, limit: int | None = None) -> list[Source]:
        """The sources `fitting` counts, taken."""
        return [self._ahead.popleft() for _ in range(self.fitting(count, longest, limit))]


def step_log_probs(
    model: StepModel,
    y: Tensor,
    state,
    mem,
    positions: Tensor,
    histories,
    cfg: DecodeConfig,
    forced: Tensor | None = None,
    vocabulary: Vocabulary | FixedVocabulary | None = None,
):
    """One decoder step for every row -> restricted log-probabilities (R, V) in fp32, the next
    state and the attention weights (R, S). `forced` (R,): a token per row that must come next (a
    target prefix; -1 for none), the only one left to that row, with the model's log-probability
    of it whatever the settings forbid; on the device, so fixed rows force without the host.
    `vocabulary`: the pool's shortlist, outside which every piece gets -inf."""
    logits, state, weights = model.step(y, state, mem, positions, vocabulary)
    logits = logits.float()
    if vocabulary is not None:
        logits = vocabulary.log_probs(logits)
    else:  # in place: one (R, V) tensor a step instead of two, 10 MB each for a beam of 5 x 64 rows
        torch.log_softmax(logits, dim=-1, out=logits)
    if forced is None:
        return restrict(logits, positions, histories, cfg), state, weights
    due, token = (forced >= 0)[:, None], forced.clamp(min=0)[:, None]
    kept = logits.gather(1, token)
    restrict(logits, positions, histories, cfg)
    logits.masked_fill_(due, NEG_INF)
    logits.scatter_(1, token, torch.where(due, kept, logits.gather(1, token)))
    return logits, state, weights


def search(
    model: StepModel,
    sources: Iterable[Source | None],
    cfg: DecodeConfig,
    fits: Callable[[int, int], bool],
    device: torch.device,
    nbest: int = 1,
    attention: bool = True,
    pools: tuple[Callable[..., Pool], Callable[..., Pool]] | None = None,
) -> Results:
    """The `nbest` best hypotheses of every source, yielded as each sentence finishes (not in
    input order): greedy search for beam 1 and nbest 1, beam search otherwise. `pools`: the
    greedy and the beam pool to search in, by default the continuous ones (`nmt.decode.rows`
    has fixed ones for a GPU)."""
    greedy, beam = pools or (GreedyPool, BeamPool)
    keep_attention = attention or cfg.coverage > 0
    feed = Feed(sources, fits)
    if is_greedy(cfg, nbest):
        return greedy(model, cfg, device, keep_attention).run(feed)
    return beam(model, cfg, device, keep_attention, beam_width(cfg, nbest), nbest).run(feed)


ENCODE_AHEAD = 64  # sentences encoded at once, the ones joining and those after them


@dataclass
class Encoded:
    """Sentences encoded together ahead of joining a pool: their memory and first state."""

    sources: list[Source]  # held, so that no other source can take one's id while this lives
    mem: Any
    state: Any
    rows: dict[int, int] = field(init=False)  # id(source) -> its row

    def __post_init__(self) -> None:
        self.rows = {id(s): row for row, s in enumerate(self.sources)}


class Pool:
    """The rows being decoded; subclasses say what a row holds, how a step advances them and
    when a sentence is done."""

    # Free pages are handed back to the system once there are more than this many steps'
    # log-probabilities of them (`allocator.FreePages`); None: never.
    release_past: int | None = None

    def __init__(self, model: StepModel, cfg: DecodeConfig, device: torch.device, keep_attention: bool):
        self.model, self.cfg, self.device, self.keep_attention = model, cfg, device, keep_attention
        self.live: list = []  # one record per sentence (`.source`), in the order of its rows
        self.mem: Any = None
        self.state: Any = None
        self.pages = FreePages() if self.release_past else None
        self.step_bytes = 0  # the size of the widest step's log-probabilities
        self.prefixed = False  # whether a sentence with a target prefix has joined
        self.vocabulary: Vocabulary | FixedVocabulary | None = None  # the shortlist's pieces, if any
        self.feed: Feed | None = None
        self.encoded = Encoded([], None, None)  # sentences encoded ahead of joining

    @torch.no_grad()  # on a generator, torch switches gradients off only while it runs
    def run(self, feed: Feed) -> Results:
        self.feed = feed
        refill_at = 0
        while True:
            if len(self.live) <= refill_at and not feed.exhausted:
                longest = max((len(r.source.ids) for r in self.live), default=0)
                group = feed.take(len(self.live), longest)
                if group:
                    self.join(group)
                    refill_at = self.refill_level(len(self.live))
            if not self.live:
                if feed.exhausted:
                    return
                continue  # a live feed: its iterator blocks while it has nothing in flight
            yield from self.step()
            if self.pages:
                self.pages.trim(self.release_past * self.step_bytes)

    def log_probs(self, y: Tensor, positions: Tensor, histories) -> tuple[Tensor, Any, Tensor]:
        """`step_log_probs` for the pool's rows."""
        forced = self.forced() if self.prefixed else None
        logp, state, w = step_log_probs(
            self.model, y, self.state, self.mem, positions, histories, self.cfg, forced, self.vocabulary
        )
        self.step_bytes = max(self.step_bytes, logp.nbytes)
        return logp, state, w

    def forced(self) -> Tensor | None:
        """The token each row must take next (its sentence's prefix not yet written), or -1, on
        the device; None when no row has one."""
        raise NotImplementedError

    def encode(self, group: list[Source]) -> tuple[Any, Any]:
        """The memory and first decoder state of the sentences joining. They come from one
        encoder call for them and the sentences after them (up to `ENCODE_AHEAD` in all), made
        when a sentence joins that was not yet encoded: a beam pool admits a sentence or two a
        step, and encoding each on its own took 12% of a 10,000-line decode (an LSTM call a
        sentence), against 2% for OpenNMT-py's 64 at a time (docs/notes/performance-history.md, 16)."""
        if any(id(s) not in self.encoded.rows for s in group):
            chunk = group + self.feed.upcoming(max(0, ENCODE_AHEAD - len(group)))
            src, src_len = pad_sources([s.ids for s in chunk])
            mem, state = self.model.encode(to_device(src, self.device), src_len)
            self.encoded = Encoded(chunk, mem, state)
        rows = self.encoded.rows
        index = to_device([rows[id(s)] for s in group], self.device)
        longest = max(len(s.ids) for s in group)
        return self.encoded.mem.rows(index, longest), self.encoded.state.select(index)

    def extend(self, mem: Any, state: Any, group: list[Source]) -> None:
        """The new sentences' memory and state after the pool's own."""
        self.prefixed = self.prefixed or any(s.prefix for s in group)
        if self.mem is None:
            self.mem, self.state = mem, state
        else:
            longest = max(len(r.source.ids) for r in self.live)
            self.mem, self.state = self.mem.join(mem, longest), self.state.join(state)

    def cut_output_layer(self) -> None:
        """After sentences join: the output layer cut to their shortlists (a translator gives
        every sentence one or none)."""
        if self.live[-1].source.vocabulary is not None:
            allowed = [r.source.vocabulary for r in self.live]
            self.vocabulary = (self.vocabulary or Vocabulary(self.device)).update(allowed)

    def kept(self, sentences: Tensor | None) -> None:
        """The pool's sentences were packed to these (None: all gone)."""
        if self.vocabulary is not None:
            if sentences is None:
                self.vocabulary = None
            else:
                self.vocabulary.keep(sentences)

    def refill_level(self, live: int) -> int:
        """Refill once the pool has shrunk by an eighth: encoding a handful of sentences at a
        time keeps steps wide, where encoding each sentence as its row frees up made greedy
        decoding 10-20% slower (docs/notes/performance-history.md, 10.4)."""
        return live - max(1, live // 8)

    def join(self, group: list[Source]) -> None:
        raise NotImplementedError

    def step(self) -> Results:
        raise NotImplementedError


def cat(old: Tensor | None, new: Tensor) -> Tensor:
    return new if old is None else torch.cat([old, new])


@dataclass
class Compaction:
    """Sentences `keep` (ascending) of a pool packed into its first rows by moving the last kept
    ones into the gaps, so the memory is moved a few rows at a time in place (`Memory.compact`)
    instead of copied whole."""

    order: list[int]  # the old row of each new row
    index: Tensor  # the same, to gather the pool's other tensors with
    holes: Tensor  # new rows whose sentence left
    fillers: Tensor  # the old rows moved into them

    @classmethod
    def of(cls, keep: list[int], device: torch.device) -> Compaction:
        rows, kept = len(keep), set(keep)
        holes = [r for r in range(rows) if r not in kept]
        fillers = [r for r in keep if r >= rows]
        order = list(range(rows))
        for hole, filler in zip(holes, fillers, strict=True):
            order[hole] = filler
        sent = to_device(order + holes + fillers, device)  # one copy to the device, not three
        return cls(order, *sent.split([rows, len(holes), len(fillers)]))

    def memory(self, mem: Any) -> Any:
        return mem.compact(len(self.order), self.holes, self.fillers)


@dataclass
class Sentence:
    """One sentence of a greedy search: its source, and its tokens and attention rows so far."""

    source: Source
    tokens: list[int] = field(default_factory=list)
    weights: list[Tensor] = field(default_factory=list)  # when attention is kept
    draws: random.Random | None = None  # sampling: the sample's random stream (`nmt.decode.sampling`)


class GreedyPool(Pool):
    """One row per sentence: the most probable next token at every step.

    Refilled at an eighth, the pool's width and so its tensors' sizes change from step to step,
    and free pages fragment; a step frees and takes back about 4 times its log-probabilities, so
    past 8 times they are handed back (100,000 lines: 422 MiB peak, 433 without;
    docs/notes/performance-history.md, 10.4)."""

    release_past = 8

    def __init__(self, *args):
        super().__init__(*args)
        self.y = self.positions = self.log_prob = self.max_lens = None

    def join(self, group: list[Source]) -> None:
        mem, state = self.encode(group)
        n = len(group)
        self.extend(mem, state, group)
        self.y = cat(self.y, torch.full((n,), BOS, dtype=torch.long, device=self.device))
        self.positions = cat(self.positions, torch.zeros(n, dtype=torch.long, device=self.device))
        self.log_prob = cat(self.log_prob, torch.zeros(n, dtype=torch.float64, device=self.device))
        self.max_lens = cat(self.max_lens, to_device([s.max_len for s in group], self.device))
        self.live += [Sentence(s) for s in group]
        self.cut_output_layer()

    def step(self) -> Results:
        histories = [r.tokens for r in self.live] if self.cfg.no_repeat_ngram else None
        logp, self.state, w = self.log_probs(self.y, self.positions, histories)
        best, self.y = self.choose(logp)
        self.log_prob += best.double()
        self.positions += 1
        done = (self.y == EOS) | (self.positions >= self.max_lens)
        # The step's one read from the device, as in `fetch` (whose arrays cost greedy steps 3%).
        host = torch.stack([self.y, done.long(), self.log_prob.view(torch.int64)]).tolist()
        for row, token in zip(self.live, host[0], strict=True):
            row.tokens.append(token)
        if self.keep_attention:
            w = w.float().cpu()
            for r, row in enumerate(self.live):
                row.weights.append(w[r, : len(row.source.ids)])
        done = host[1]
        if not any(done):
            return
        log_prob = np.array(host[2], dtype=np.int64).view(np.float64).tolist()
        keep = []
        for r, (row, finished) in enumerate(zip(self.live, done, strict=True)):
            if not finished:
                keep.append(r)
                continue
            att = torch.stack(row.weights) if self.keep_attention else None
            length = len(row.tokens)
            score = final_score(log_prob[r], length, att, len(row.source.ids), self.cfg)
            yield row.source.key, [Hypothesis(row.tokens, score, log_prob[r], att)]
        self._keep(keep)

    def choose(self, logp: Tensor) -> tuple[Tensor, Tensor]:
        """Each row's next token and its log-probability: the most probable."""
        return best(logp)

    def forced(self) -> Tensor | None:
        return due([_next(row.source.prefix, len(row.tokens)) for row in self.live], self.device)

    def _keep(self, keep: list[int]) -> None:
        if not keep:
            self.live = []
            self.mem = self.state = self.y = self.positions = self.log_prob = self.max_lens = None
            self.kept(None)
            return
        packed = Compaction.of(keep, self.device)
        rows = packed.index
        self.kept(rows)
        self.mem, self.state = packed.memory(self.mem), self.state.select(rows)
        self.y, self.positions = self.y[rows], self.positions[rows]
        self.log_prob, self.max_lens = self.log_prob[rows], self.max_lens[rows]
        self.live = [self.live[r] for r in packed.order]


class Trail:
    """One sentence's beam search so far: per step, the candidates' tokens and parent beams and
    which candidates survived as the next beams (back-pointers), the attention of each beam row
    when kept, and the finished hypotheses."""

    def __init__(self, source: Source):
        self.source = source
        self.tokens: list[list[int]] = []  # per step: the 2K candidates' tokens
        self.parents: list[list[int]] = []  # per step: the beam each candidate extends
        self.survivors: list[list[int]] = []  # per step: the candidates kept as beams 0..K-1
        self.weights: list[Tensor] = []  # per step: (K, S) attention of the beam rows
        self.finished: list[Hypothesis] = []
        self.untraced: dict[int, tuple[int, int]] = {}  # finished[i] without its tokens: (candidate, steps)
        self.progress: list[Progress] = []  # with constraints to include: each beam's
        self.offered: list[Progress] = []  # and each of the last step's candidates'
        self.banned = [p[0] for p in source.avoid if len(p) == 1]  # phrases to avoid of one token
        self.longer = [p for p in source.avoid if len(p) > 1]  # and of more

    def path(self, candidate: int, steps: int | None = None) -> tuple[list[int], list[int]]:
        """The tokens of `candidate` at step `steps` (the last when None), and the beam row each
        was produced by."""
        tokens, rows = [], []
        for t in range((len(self.tokens) if steps is None else steps) - 1, -1, -1):
            parent = self.parents[t][candidate]
            tokens.append(self.tokens[t][candidate])
            rows.append(parent)
            if t:
                candidate = self.survivors[t - 1][parent]
        return tokens[::-1], rows[::-1]

    def extend(self, tokens: list[list[int]], parents: list[list[int]], survivors: list[list[int]]) -> None:
        """Steps in which no candidate ended and the search went on: only their back-pointers
        are kept (`nmt.decode.rows` follows many steps at once)."""
        self.tokens.extend(tokens)
        self.parents.extend(parents)
        self.survivors.extend(survivors)

    def history(self, beam: int) -> list[int]:
        """The tokens of live beam `beam`."""
        return self.path(self.survivors[-1][beam])[0] if self.tokens else []

    def advance(self, record: list, weights: Tensor | None, cfg: DecodeConfig, nbest: int) -> bool:
        """One step of this sentence's search, from its row of `Beams.records` (as lists) and
        its beams' attention (K, S) when kept -> whether its search is over."""
        tokens, parents, kept, top, (bound,), ends, (capped,) = record
        self.tokens.append(tokens)
        self.parents.append(parents)
        self.survivors.append(kept)
        if self.source.include:
            self.progress = [self.offered[c] for c in kept]
        if weights is not None:
            self.weights.append(weights[:, : len(self.source.ids)])
        for candidate, ended in enumerate(ends):
            if ended:
                self.finish(candidate, top[candidate], cfg, weights is not None)
        met = [h for h in self.finished if not h.unmet] if self.source.steered else self.finished
        return search_is_over(met, bound, capped, self.source.max_len, nbest, cfg)

    def finish(self, candidate: int, log_prob: float, cfg: DecodeConfig, attention: bool) -> None:
        """The last step's `candidate` as a finished hypothesis. Its tokens are traced back only
        if it is among the best (`best`): a weak model (an early validation) ends twenty and more
        candidates a sentence, and on a GPU the host's following of the search is a step's
        floor. Attention and phrases to avoid need them now."""
        steps = len(self.tokens)  # a path has a token a step
        tokens, att = [], None
        if attention or self.source.avoiding:
            tokens, rows = self.path(candidate)
            att = torch.stack([self.weights[t][r] for t, r in enumerate(rows)]) if attention else None
        else:
            self.untraced[len(self.finished)] = (candidate, steps)
        score = final_score(log_prob, steps, att, len(self.source.ids), cfg)
        unmet = self.offered[candidate].unmet if self.source.include else 0
        if self.source.avoiding:
            unmet += self.source.avoiding.violations(tokens)
        self.finished.append(Hypothesis(tokens, score, log_prob, att, unmet))

    def best(self, nbest: int) -> list[Hypothesis]:
        """The `nbest` best finished hypotheses, those meeting every constraint first."""
        ranked = sorted(
            range(len(self.finished)), key=lambda i: (self.finished[i].unmet, -self.finished[i].score)
        )
        for i in ranked[:nbest]:
            if (end := self.untraced.pop(i, None)) is not None:
                self.finished[i].tokens = self.path(*end)[0]
        return [self.finished[i] for i in ranked[:nbest]]


def best_candidates(scores: Tensor, logp: Tensor, K: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Each sentence's best 2K candidates (B, 2K), best first, from its beams' `scores` (B, K)
    and the step's log-probabilities (B*K, V): their scores, tokens and the beams they extend,
    and each beam's own best tokens (B*K, 2K). The best 2K candidates overall are among each
    beam's best 2K tokens."""
    B = scores.size(0)
    per_beam = min(2 * K, logp.size(-1))
    beam_logp, beam_token = top_k(logp, per_beam)  # (B*K, per_beam)
    total = scores[:, :, None] + beam_logp.double().view(B, K, per_beam)
    top, idx = total.view(B, K * per_beam).topk(min(2 * K, K * per_beam), dim=1)
    return top, beam_token.view(B, K * per_beam).gather(1, idx), idx // per_beam, beam_token


@dataclass
class Beams:
    """A step's outcome: the new beams and what the host records of the step."""

    scores: Tensor  # (B, K) float64
    y: Tensor  # (B*K,) their last tokens
    parent_rows: Tensor  # (B*K,) the row each new beam extends, to reorder the state by
    records: tuple[Tensor, ...]  # (B, ...) tokens, parents, survivors, top, bound, ends, at_cap


def next_beams(top: Tensor, token: Tensor, origin: Tensor, at_cap: Tensor, K: int) -> Beams:
    """The K best candidates that do not end in EOS become the beams; candidates among the best
    K that end (in EOS, or at the length cap `at_cap` (B,)) are finished hypotheses."""
    B, n = top.shape
    position = torch.arange(n, device=top.device)
    survivors = ((token == EOS).long() * n + position).topk(K, dim=1, largest=False).indices
    ends = ((token == EOS) | at_cap[:, None]) & (position < K) & torch.isfinite(top)
    scores = top.gather(1, survivors)
    parent_rows = torch.arange(B, device=top.device)[:, None] * K + origin.gather(1, survivors)
    bound = scores.max(1).values[:, None]
    records = (token, origin, survivors, top, bound, ends, at_cap[:, None])
    return Beams(scores, token.gather(1, survivors).flatten(), parent_rows.flatten(), records)


class BeamPool(Pool):
    """K rows per sentence; a sentence leaves when `ranking.search_is_over`."""

    def __init__(self, model, cfg, device, keep_attention, K: int, nbest: int):
        super().__init__(model, cfg, device, keep_attention)
        self.K, self.nbest = K, nbest
        self.scores = self.y = self.positions = self.max_lens = None  # scores (B, K) float64
        self.steered = False  # whether a sentence with lexical constraints has joined

    def refill_level(self, live: int) -> int:
        """Refill as soon as a sentence has left. Why: a pool of constant width gives every
        step's tensors, K times greedy's, the same sizes, so the allocator reuses their pages;
        refilled at an eighth, the sizes changed every step and the heap fragmented (beam 5,
        100,000 lines: 461.6 MiB peak, 442.8-444.7 refilled at once, at the same speed: a step
        of K rows per sentence outweighs encoding a sentence or two;
        docs/notes/performance-history.md, 10.4)."""
        return live - 1

    def join(self, group: list[Source]) -> None:
        mem, state = self.encode(group)
        n, K = len(group), self.K
        state = state.select(torch.arange(n, device=self.device).repeat_interleave(K))
        mem = mem.share(K)  # K state rows per sentence, one memory row
        self.extend(mem, state, group)
        scores = torch.full((n, K), NEG_INF, dtype=torch.float64, device=self.device)
        scores[:, 0] = 0.0  # all beams start identical: only the first may spread
        self.scores = cat(self.scores, scores)
        self.y = cat(self.y, torch.full((n * K,), BOS, dtype=torch.long, device=self.device))
        self.positions = cat(self.positions, torch.zeros(n, dtype=torch.long, device=self.device))
        self.max_lens = cat(self.max_lens, to_device([s.max_len for s in group], self.device))
        trails = [Trail(s) for s in group]
        for trail in trails:
            trail.progress = [Progress.start(trail.source.include)] * K if trail.source.include else []
        self.live += trails
        self.steered = self.steered or any(s.steered for s in group)
        self.cut_output_layer()

    def step(self) -> Results:
        K = self.K
        rows_at = self.positions.repeat_interleave(K)
        histories = (
            [tr.history(j) for tr in self.live for j in range(K)] if self.cfg.no_repeat_ngram else None
        )
        logp, state, w = self.log_probs(self.y, rows_at, histories)
        if self.steered:
            self.forbid(logp)
        top, token, origin, beam_token = best_candidates(self.scores, logp, K)
        if self.steered:
            self.allocate(top, token, origin, logp, beam_token)
        self.positions += 1
        beams = next_beams(top, token, origin, self.positions >= self.max_lens, K)
        self.scores, self.y = beams.scores, beams.y
        host = [part.tolist() for part in fetch(*beams.records)]  # the step's one read
        weights = w.float().view(len(self.live), K, -1).cpu() if self.keep_attention else None
        keep = []
        for i, trail in enumerate(self.live):
            att = None if weights is None else weights[i]
            if trail.advance([part[i] for part in host], att, self.cfg, self.nbest):
                yield trail.source.key, trail.best(self.nbest)
            else:
                keep.append(i)
        self._keep(keep, beams.parent_rows, state)

    def forced(self) -> Tensor | None:
        tokens = [_next(trail.source.prefix, len(trail.tokens)) for trail in self.live for _ in range(self.K)]
        return due(tokens, self.device)

    def forbid(self, logp: Tensor) -> None:
        """Lexical constraints, in place: no EOS before every phrase to include is written, and
        no token that completes a phrase to avoid (one-token phrases: anywhere)."""
        K = self.K
        for i, trail in enumerate(self.live):
            source = trail.source
            if source.include:
                logp[[i * K + k for k, p in enumerate(trail.progress) if p.unmet], EOS] = NEG_INF
            if trail.banned:
                logp[i * K : (i + 1) * K, trail.banned] = NEG_INF
            for k in range(K) if trail.longer or source.avoiding else ():
                history = trail.history(k)
                ban = banned(history, trail.longer) + (
                    source.avoiding.after(history) if source.avoiding else []
                )
                logp[i * K + k, ban] = NEG_INF

    def allocate(self, top: Tensor, token: Tensor, origin: Tensor, logp: Tensor, beam_token: Tensor) -> None:
        """Dynamic beam allocation, in place, for each sentence with phrases to include: its
        candidates are each beam's best tokens and the tokens that advance a constraint; those
        ending in EOS (every constraint met) come first, then the K new beams shared out among
        the banks (`constraints.allocate`), then nothing (-inf)."""
        K, n = self.K, top.size(1)
        all_scores, all_best = self.scores.tolist(), beam_token.tolist()  # one copy from the device
        for i, trail in enumerate(self.live):
            include = trail.source.include
            if not include:
                continue
            best = all_best[i * K : (i + 1) * K]
            offered = []
            for k, (score, progress) in enumerate(zip(all_scores[i], trail.progress, strict=True)):
                if score == NEG_INF:
                    continue
                tokens = list(dict.fromkeys(best[k] + progress.wanted(include)))
                for t, lp in zip(tokens, logp[i * K + k, tokens].tolist(), strict=True):
                    if lp != NEG_INF:
                        offered.append(Candidate(score + lp, k, t, progress.advance(t, include)))
            ending = sorted((c for c in offered if c.token == EOS), reverse=True)[:K]
            row = (ending + allocate([c for c in offered if c.token != EOS], K, include))[:n]
            row += [Candidate(NEG_INF, 0, PAD, trail.progress[0])] * (n - len(row))
            top[i] = torch.tensor([c.score for c in row], dtype=top.dtype)
            token[i] = torch.tensor([c.token for c in row])
            origin[i] = torch.tensor([c.beam for c in row])
            trail.offered = [c.progress for c in row]

    def _keep(self, keep: list[int], parent_rows: Tensor, state) -> None:
        B, K = len(self.live), self.K
        if not keep:
            self.live = []
            self.mem = self.state = self.scores = self.y = self.positions = self.max_lens = None
            self.kept(None)
            return
        if len(keep) < B:  # finished sentences leave the batch
            packed = Compaction.of(keep, self.device)
            blocks = packed.index
            self.kept(blocks)
            block_rows = (blocks[:, None] * K + torch.arange(K, device=self.device)).flatten()
            self.y, parent_rows = self.y[block_rows], parent_rows[block_rows]
            self.scores, self.positions, self.max_lens = (
                self.scores[blocks],
                self.positions[blocks],
                self.max_lens[blocks],
            )
            self.mem = packed.memory(self.mem)
            self.live = [self.live[i] for i in packed.order]
        self.state = state.select(parent_rows)


def fetch(*parts: Tensor) -> list[np.ndarray]:
    """2-D tensors of one height (int64, bool or float64) on the host in one copy: a search's one
    read from the device a step, where each read waits for the GPU to finish what it was given
    (a beam step made 13 reads: docs/notes/performance-history.md, 17). float64s travel as bits."""
    assert all(p.dtype in (torch.int64, torch.bool, torch.float64) for p in parts), [p.dtype for p in parts]
    host = torch.cat([p.view(torch.int64) if p.dtype == torch.float64 else p.long() for p in parts], 1)
    pieces = np.split(host.cpu().numpy(), np.cumsum([p.size(1) for p in parts])[:-1], 1)
    kinds = {torch.float64: lambda a: a.view(np.float64), torch.bool: lambda a: a.astype(bool)}
    return [kinds.get(p.dtype, lambda a: a)(piece) for p, piece in zip(parts, pieces, strict=True)]


def due(tokens: list[int], device: torch.device) -> Tensor | None:
    """`tokens` (a prefix token per row, or -1) on the device, or None when no row has one."""
    return to_device(tokens, device) if any(token >= 0 for token in tokens) else None


def _next(prefix: list[int], written: int) -> int:
    """The prefix token due after `written` tokens, or -1 once the prefix is written."""
    return prefix[written] if written < len(prefix) else -1
