"""Ctrl-C and SIGTERM in `nmt train`, in its two phases.

Start-up (the config read, the data prepared, the model built, the run folder made; until the
first step): there is nothing to save yet, so a signal stops the command, and what start-up had
begun is undone (no run folder, no half cache). The stop is raised only in nmt's own code: raised
inside a library it could be swallowed (a bare `except:` around an import, a finaliser), leave a
module half imported, or abort the process from C++ (a KeyboardInterrupt thrown through pybind11
ends in std::terminate, exit 134). A signal that arrives while a library runs is raised as soon
as nmt's code runs again (the next line of an nmt frame below, or the next call into nmt: the
way a debugger stops, through `sys.settrace`); a second one stops at once, wherever.

Training (from the first step): the first signal asks for a stop at the next step boundary (the
trainer saves last.pt there, so a resume continues exactly); a second one stops at once, without
saving, since the state in the middle of a step is not one to resume from.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


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

    @classmethod
    def starting(cls, stop: BaseException, resume: str | Path | None) -> Interrupted:
        """Stopped during start-up by `stop` (a StopNow, or a plain KeyboardInterrupt), in a new
        run (whose folder is gone) or the resume of the run in `resume` (as it was)."""
        signum = getattr(stop, "signum", signal.SIGINT)
        left = f"nothing trained; continue with: nmt train --resume {resume}" if resume else "no run was made"
        return cls(signum, f"{signal_name(signum)} during start-up, before the first step: {left}")


class StopNow(KeyboardInterrupt):
    """A signal that stops the command where it is (during start-up, or a second one while
    training); a KeyboardInterrupt, so clean-up code that handles one handles this one too."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = signum


def signal_name(signum: int | None) -> str:
    return "SIGTERM" if signum == signal.SIGTERM else "interrupted"


@dataclass
class StopRequest:
    signum: int | None = None  # the first SIGINT or SIGTERM received
    starting: bool = False  # start-up: a signal stops at once (nothing to save yet)
    received: int = 0  # signals received
    raised: bool = False  # a StopNow was raised for them
    active: bool = True  # its handlers are installed
    tracer: Callable | None = None  # the tracer this request replaced while a stop waits for nmt's code

    @property
    def name(self) -> str:
        return signal_name(self.signum)

    def check(self) -> None:
        """At a safe point of start-up: stop if a signal came, even if a library swallowed the
        stop raised for it."""
        if self.signum is not None:
            self._raise()

    def started(self) -> None:
        """The first step begins: from now on a signal asks for a stop at a step boundary."""
        self.check()
        self.starting = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler (it runs in the main thread, between two bytecodes of `frame`)."""
        self.received += 1
        self.signum = self.signum or signum
        if not self.active:
            return
        if self.starting and not self.raised:
            if self.received > 1 or _own_code(frame):
                self._raise()
            self._stop_in_own_code(frame)
        elif not self.starting and self.received > 1:
            raise StopNow(self.signum)

    def _raise(self) -> None:
        self._untrace()
        self.raised = True
        raise StopNow(self.signum or signal.SIGINT)

    def _stop_in_own_code(self, frame: FrameType | None) -> None:
        """Trace the main thread until nmt's code runs: a call into it, or the next line of one
        of its frames that wait below `frame` for the library to return."""
        if self.tracer is None:
            self.tracer = sys.gettrace() or _no_tracer
            sys.settrace(self._trace)
        while frame is not None:
            if _own_code(frame):
                frame.f_trace = self._trace
            frame = frame.f_back

    def _trace(self, frame: FrameType, event: str, arg: object) -> Callable | None:
        if self.raised or not (self.active and self.starting):
            self._untrace()
        elif _own_code(frame):
            self._raise()
        return None  # no line events inside a library's frames

    def _untrace(self) -> None:
        if self.tracer is not None:
            sys.settrace(None if self.tracer is _no_tracer else self.tracer)
            self.tracer = None

    def close(self) -> None:
        self.active = False
        self._untrace()


def _no_tracer(frame: FrameType, event: str, arg: object) -> None:
    """Stands for "no tracer" in `StopRequest.tracer` (None there: not tracing)."""


def _own_code(frame: FrameType | None) -> bool:
    """Whether `frame` is nmt's core or applications, where a stop raised is a plain exception
    through plain Python. The command line's modules are left out (a stop raised there would
    reach Typer, which turns every KeyboardInterrupt into a silent exit 130), and so is this one,
    whose clean-up must not be stopped."""
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name.startswith("nmt.") and not name.startswith(("nmt.cli", "nmt.__main__", __name__))


_current: StopRequest | None = None  # the request whose handlers are installed


@contextlib.contextmanager
def stop_requests(starting: bool = False) -> Iterator[StopRequest]:
    """While inside, SIGINT and SIGTERM are noted in the yielded request; `starting` (start-up,
    until `request.started()`) makes them stop at once, else a second one does. Inside another
    (nmt train's start-up is guarded from the process's start) the outer request is shared.
    Outside the main thread (a notebook's worker, a test) signals cannot be caught, and the
    request is never set."""
    global _current
    if _current is not None or threading.current_thread() is not threading.main_thread():
        yield _current or StopRequest(starting=starting)
        return
    request = _current = StopRequest(starting=starting)
    handlers = {signum: signal.signal(signum, request.handle) for signum in SIGNALS}
    try:
        yield request
    finally:
        request.close()
        _current = None
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
