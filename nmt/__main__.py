"""`nmt` and `python -m nmt`: tcmalloc first (nmt/allocator.py), then the command line.

Ctrl-C during start-up (the restart, the command line's imports: half a second, before Typer
turns an interrupt inside a command into a quiet exit 130) ends with exit 130 too, and one line,
`interrupted`, instead of a traceback; nothing has been written yet. Only what runs before
`main` is beyond reach: the interpreter's own start-up and `import nmt`, kept light for this."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nmt.train.signals import Interrupted


# what OpenMP reads: a count, "2", or one per nesting level, "2,1"
THREAD_COUNTS = re.compile(r"\s*0*[1-9]\d{0,5}\s*(,\s*0*[1-9]\d{0,5}\s*)*")


def main() -> None:
    if (threads := os.environ.get("OMP_NUM_THREADS")) is not None and not THREAD_COUNTS.fullmatch(threads):
        # before torch loads: its OpenMP would print "Invalid value" twice and run on every core
        print(
            f"error: OMP_NUM_THREADS={threads!r} is not a number of threads; set a whole number of "
            "at least 1 (e.g. OMP_NUM_THREADS=2), or unset it and nmt uses the cores that are free",
            file=sys.stderr,
        )
        sys.exit(2)
    if sys.argv[1:2] == ["train"]:
        # OpenMP threads that wait asleep, not spinning, before torch loads: training lost nothing
        # on a quiet 2-core EPYC (572-661 -> 682 target tokens/s) and ran at 419 beside one
        # CPU-bound process instead of 259 (a thread spinning on a shared core holds back every
        # parallel region). Decoding (many small steps) pays 4-10% for it, so it chooses its
        # threads from the free cores instead (nmt.machine.choose_threads).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        from nmt.allocator import restart_with_tcmalloc  # ctypes: 20 ms, here where Ctrl-C is handled

        restart_with_tcmalloc()  # before the command line's imports, which a restart would repeat
        with _start_up_guard():
            from nmt.cli import app

            app()
    except KeyboardInterrupt as stop:  # start-up's: Typer ends a command's, nmt train its own
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt this
        stopped = _stopped(stop)
        print(stopped, file=sys.stderr)
        sys.exit(stopped.exit_code)  # 130; nmt train's StopNow may be a SIGTERM: 143


def _stopped(stop: KeyboardInterrupt) -> Interrupted:
    """How a stop during start-up ends: the line `interrupted`, or nmt train's own line (as once
    its command runs), which names the run of --resume, read here from the raw arguments."""
    from nmt.train.signals import Interrupted

    if sys.argv[1:2] != ["train"]:
        return Interrupted(getattr(stop, "signum", signal.SIGINT), "interrupted")
    args = sys.argv[2:]
    given = [value for arg, value in zip(args, args[1:], strict=False) if arg == "--resume"]
    given += [arg.removeprefix("--resume=") for arg in args if arg.startswith("--resume=")]
    return Interrupted.starting(stop, given[-1] if given else None)


def _start_up_guard() -> contextlib.AbstractContextManager:
    """`nmt train`'s start-up begins here, before the command line's imports: a signal from now
    on stops it cleanly (nmt/train/signals.py) instead of raising inside an import."""
    if sys.argv[1:2] != ["train"]:
        return contextlib.nullcontext()
    from nmt.train.signals import stop_requests

    return stop_requests(starting=True)


if __name__ == "__main__":
    main()
