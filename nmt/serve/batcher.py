"""Dynamic batching: requests from many clients, decoded together on one worker thread.

The event loop only queues a job and awaits its future; the worker takes the queued jobs, groups
those with the same decode settings (a batch has one beam and one length cap), decodes each
group as one list of sentences and hands every job exactly its own slice of the results.
Waiting up to `max_wait_ms` for company trades a little latency for larger batches; while the
worker is busy, jobs pile up on their own and the next batch takes them at once.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from nmt.decode.translator import Translation, Translator
from nmt.errors import NMTError

log = logging.getLogger("nmt.serve")


@dataclass(frozen=True)
class Settings:
    """What must be equal for two requests to share a batch."""

    model: str
    beam: int
    nbest: int
    max_len: int | None  # None: the model's own decode.max_len


@dataclass(eq=False)
class Job:
    settings: Settings
    sentences: list[str]
    deliver: Callable[[list[Translation] | BaseException], None]  # called once, from the worker
    abandoned: bool = False  # the client gave up (timeout): skip it if not decoded yet


class QueueFullError(Exception):
    """More requests are waiting than the queue holds; the client should retry later."""


def take_batch(pending: deque[Job], max_batch: int) -> list[Job]:
    """Remove and return the oldest job and the later jobs with its settings, in arrival order,
    while they fit in `max_batch` sentences (the first job always goes, whatever its size)."""
    first = pending.popleft()
    batch, size, rest = [first], len(first.sentences), deque()
    while pending:
        job = pending.popleft()
        if job.settings == first.settings and size + len(job.sentences) <= max_batch:
            batch.append(job)
            size += len(job.sentences)
        else:
            rest.append(job)
    pending.extend(rest)
    return batch


@dataclass
class Batcher:
    translators: dict[str, Translator]
    max_batch: int = 32  # sentences gathered into one decode
    max_wait_ms: float = 2.0  # how long an idle worker waits for more requests
    queue_size: int = 256  # requests waiting; beyond it `submit` raises QueueFullError
    _queue: queue.Queue = field(default_factory=queue.Queue, init=False)
    _waiting: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nmt-decode", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Decode everything already queued, then stop the worker."""
        if self._thread:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    @property
    def waiting(self) -> int:
        return self._waiting

    def submit(self, settings: Settings, sentences: list[str]) -> tuple[Job, asyncio.Future]:
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

        job = Job(settings, sentences, lambda result: loop.call_soon_threadsafe(resolve, result))
        with self._lock:
            if self._waiting >= self.queue_size:
                raise QueueFullError(f"{self._waiting} requests are already waiting")
            self._waiting += 1
        self._queue.put(job)
        return job, future

    def _run(self) -> None:
        pending: deque[Job] = deque()
        stopping = False
        while not stopping or pending:
            if not pending:
                item = self._queue.get()
                if item is None:
                    break
                pending.append(item)
            stopping = self._gather(pending) or stopping
            while pending:
                self._decode(take_batch(pending, self.max_batch))

    def _gather(self, pending: deque[Job]) -> bool:
        """Add queued jobs until `max_batch` sentences or `max_wait_ms`; True on the stop sign."""
        deadline = time.monotonic() + self.max_wait_ms / 1000
        while sum(len(job.sentences) for job in pending) < self.max_batch:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if item is None:
                return True
            pending.append(item)
        return False

    def _decode(self, jobs: list[Job]) -> None:
        with self._lock:
            self._waiting -= len(jobs)
        jobs = [job for job in jobs if not job.abandoned]
        if not jobs:
            return
        s = jobs[0].settings
        sentences = [line for job in jobs for line in job.sentences]
        try:
            translator = self.translators[s.model]
            if s.beam != translator.cfg.beam or s.max_len is not None:
                translator = translator.configured(beam=s.beam, max_len=s.max_len)
            results = translator.translate(sentences, s.nbest)
        except NMTError as e:
            for job in jobs:
                job.deliver(e)
            return
        except Exception as e:  # a bug, not the client's fault: log it, answer 500, keep serving
            log.exception("decoding failed")
            for job in jobs:
                job.deliver(e)
            return
        start = 0
        for job in jobs:
            job.deliver(results[start : start + len(job.sentences)])
            start += len(job.sentences)
