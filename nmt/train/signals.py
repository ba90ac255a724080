"""Ctrl-C and SIGTERM while training: the first asks for a stop at the next step boundary (the
trainer saves last.pt there, so a resume continues exactly); a second one stops at once, without
saving, since the state in the middle of a step is not one to resume from."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class Interrupted(Exception):  # noqa: N818 (a stop the user asked for, not an error)
    """Training stopped by a signal; last.pt holds the state to resume from (unless said otherwise)."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.exit_code = 128 + int(signum)  # 130 for SIGINT, 143 for SIGTERM, as shells report

    @classmethod
    def saved(cls, request: StopRequest, step: int, run_dir: Path) -> Interrupted:
        """Stopped at a step boundary, after last.pt was saved there."""
        message = f"{request.name} at step {step}; continue with: nmt train --resume {run_dir}"
        return cls(request.signum or signal.SIGINT, message)

    @classmethod
    def twice(cls, step: int, run_dir: Path, last: Path) -> Interrupted:
        """Stopped at once by a second signal: the newest checkpoint is older than this step."""
        fresh = "" if last.exists() else " (none yet: the run will start afresh)"
        return cls(
            signal.SIGINT,
            f"interrupted twice at step {step}: not saved; continue from the last checkpoint with: "
            f"nmt train --resume {run_dir}{fresh}",
        )


@dataclass
class StopRequest:
    signum: int | None = None  # SIGINT or SIGTERM received, not yet acted on

    @property
    def name(self) -> str:
        return "SIGTERM" if self.signum == signal.SIGTERM else "interrupted"


@contextlib.contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """While inside, SIGINT and SIGTERM set the yielded request instead of stopping the process;
    a second signal raises KeyboardInterrupt. Outside the main thread (a notebook's worker, a
    test) signals cannot be caught, and the request is never set."""
    request = StopRequest()

    def note(signum, frame):
        if request.signum is not None:
            raise KeyboardInterrupt
        request.signum = signum

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, note)
    try:
        yield request
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
