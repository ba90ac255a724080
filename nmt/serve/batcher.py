"""Continuous batching across requests: sentences from many clients decoded together, on one
worker thread.

The event loop only queues a job and awaits its future. The worker runs one decoding pool
(`nmt.decode.search`) at a time for one set of decode settings (a pool has one beam and one
length cap): the jobs with those settings join it sentence by sentence as rows free up, while
it decodes, so a request never waits for a whole batch to finish, and every job gets exactly its
own results once its last sentence is done. When the oldest waiting job has other settings, the
pool takes no more jobs, finishes what it holds, and the next pool starts with that job. An idle
worker waits up to `max_wait_ms` for company before it starts a pool.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from nmt.decode.translator import Translation, Translator
from nmt.errors import NMTError
from nmt.text.constraints import Constraints
from nmt.text.ranking import Source

log = logging.getLogger("nmt.serve")


@dataclass(frozen=True)
class Settings:
    """What must be equal for two requests to share a batch."""

    model: str
    beam: int
    nbest: int  # with sampling: the samples a sentence
    max_len: int | None  # None: the model's own decode.max_len
    sample: bool | None = None  # sampling (`nmt.decode.sampling`); None: the model's own settings
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    # no attention to answer with, no markup to carry, no constraints: the search keeps no
    # attention, and on a GPU it runs over fixed rows and CUDA graphs (`nmt.decode.rows`)
    plain: bool = False

    def decoding(self) -> dict:
        """The decode settings these set, for `TextTranslator.configured`."""
        return {k: v for k, v in asdict(self).items() if k not in ("model", "nbest", "plain")}


@dataclass(eq=False)
class Job:
    settings: Settings
    sentences: list[str]
    deliver: Callable[[list[Translation] | BaseException], None]  # called once, from the worker
    prefixes: list[str] | None = None  # a target prefix per sentence ("" for none)
    constraints: list[Constraints] | None = None  # phrases to include and avoid, per sentence
    abandoned: bool = False  # the client gave up (timeout): skip it if not decoded yet
    results: list[Translation | None] = field(default_factory=list)  # filled by the worker
    left: int = 0  # sentences still being decoded


class QueueFullError(Exception):
    """More requests are waiting than the queue holds; the client should retry later."""


STOP = object()  # the queue's stop sign


@dataclass
class Batcher:
    translators: dict[str, Translator]
    max_batch: int = 32  # sentences decoded at once (the pool's width)
    max_wait_ms: float = 2.0  # how long an idle worker waits for more requests
    queue_size: int = 256  # requests waiting; beyond it `submit` raises QueueFullError
    _queue: queue.Queue = field(default_factory=queue.Queue, init=False)
    _waiting: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _pending: deque = field(default_factory=deque, init=False)  # worker only: jobs not yet admitted
    _stopping: bool = field(default=False, init=False)  # worker only: the stop sign has arrived

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nmt-decode", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Decode everything already queued, then stop the worker."""
        if self._thread:
            self._queue.put(STOP)
            self._thread.join()
            self._thread = None

    @property
    def waiting(self) -> int:
        return self._waiting

    def submit(
        self,
        settings: Settings,
        sentences: list[str],
        prefixes: list[str] | None = None,
        constraints: list[Constraints] | None = None,
    ) -> tuple[Job, asyncio.Future]:
        """Queue a job from the event loop; its future resolves to the job's translations."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def resolve(result: list[Translation] | BaseException) -> None:
            if future.done():  # the client timed out and the handler has moved on
                return
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

        deliver = lambda result: loop.call_soon_threadsafe(resolve, result)  # noqa: E731
        job = Job(settings, sentences, deliver, prefixes, constraints)
        with self._lock:
            if self._waiting >= self.queue_size:
                raise QueueFullError(f"{self._waiting} requests are already waiting")
            self._waiting += 1
        self._queue.put(job)
        return job, future

    def _run(self) -> None:
        while True:
            if not self._pending:
                if self._stopping:
                    return
                self._receive(block=True)
                continue
            self._decode_pool(self._pending[0].settings)

    def _receive(self, block: bool) -> None:
        """Move queued jobs to `_pending`: without waiting, or (idle) waiting for the first one
        and then up to `max_wait_ms` for company, until `max_batch` sentences."""
        deadline = None
        while True:
            if block and deadline is None:
                item = self._queue.get()
                deadline = time.monotonic() + self.max_wait_ms / 1000
            else:
                timeout = 0.0 if deadline is None else deadline - time.monotonic()
                if deadline is not None and sum(len(j.sentences) for j in self._pending) >= self.max_batch:
                    return
                try:
                    item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
                except queue.Empty:
                    return
            if item is STOP:
                self._stopping = True
                return
            self._pending.append(item)

    def _admit(self, job: Job) -> None:
        self._pending.remove(job)
        with self._lock:
            self._waiting -= 1

    def _decode_pool(self, settings: Settings) -> None:
        """Decode the jobs with `settings` as one pool, admitting them as they come."""
        translator = self.translators[settings.model].configured(
            **settings.decoding(), batch_size=self.max_batch, batch_type="sentences"
        )
        admitted: list[Job] = []  # admitted and not yet answered
        encoded: dict[tuple[Job, int], tuple[list[int], bool]] = {}

        def sources() -> Iterator[Source | None]:
            while True:
                busy = any(job.left for job in admitted)
                self._receive(block=not busy and not self._pending and not self._stopping)
                ahead = self._pending[0] if self._pending else None
                if ahead is None and busy:
                    yield None  # nothing new: decode on, ask again next step
                elif ahead is None or ahead.settings != settings:
                    return  # stopping, or another settings' turn: the pool finishes what it has
                else:
                    self._admit(ahead)
                    if not ahead.abandoned:
                        yield from self._job_sources(ahead, translator, admitted, encoded)

        try:
            stream = translator._decode_stream(
                sources(), settings.nbest, attention=not settings.plain, unconstrained=settings.plain
            )
            for (job, i), hyps in stream:
                job.results[i] = translator.translation(*encoded.pop((job, i)), hyps)
                job.left -= 1
                if not job.left:
                    admitted.remove(job)
                    job.deliver(job.results)
        except Exception as e:  # every client in the pool gets an answer, and the worker goes on
            if not isinstance(e, NMTError):  # a bug, not the client's fault: log it, answer 500
                log.exception("decoding failed")
            for job in admitted:
                job.deliver(e)

    @staticmethod
    def _job_sources(
        job: Job, translator: Translator, admitted: list[Job], encoded: dict
    ) -> Iterator[Source]:
        """The job's sentences as sources of the pool; empty ones are answered at once. A job
        whose text the tokenizer refuses gets that error alone: the pool goes on without it."""
        try:
            ids, truncated, steering = job_steering(job, translator)
        except Exception as e:
            if not isinstance(e, NMTError):  # requests.py lets through only text it can take
                log.exception("encoding a request failed")
            job.deliver(e)
            return
        admitted.append(job)
        lines = list(steering)
        job.results = [None if line.strip() else Translation([], [], [], [""]) for line in job.sentences]
        for i in lines:
            encoded[(job, i)] = (ids[i], i in truncated)
        job.left = len(lines)
        if not lines:
            admitted.remove(job)
            job.deliver(job.results)
        for i in lines:
            yield Source((job, i), ids[i], translator.max_len(len(ids[i])), *steering[i])


def job_steering(job: Job, translator: Translator) -> tuple[list[list[int]], set[int], dict[int, tuple]]:
    """The job's source ids, the indices of those cut, and what steers each non-empty sentence
    (`TextTranslator.steering`), by index. Empty sentences are answered empty whatever their
    prefix, as `nmt translate` answers an empty line. Raises the `NMTError` of a sentence the
    model refuses (a prefix or phrase with no room under the output cap)."""
    ids, truncated = translator.encode_sources(job.sentences)
    begun = translator.encode_prefixes(job.prefixes or [""] * len(ids))
    guides = job.constraints or [None] * len(ids)
    beam = translator.keeps_beam(job.settings.nbest)
    steering = {
        i: translator.steering(prefix, guide, row, f"sentence {i + 1}", beam)
        for i, (prefix, guide, row, line) in enumerate(zip(begun, guides, ids, job.sentences, strict=True))
        if line.strip()
    }
    return ids, truncated, steering
