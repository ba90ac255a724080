"""`nmt` and `python -m nmt`: tcmalloc first (nmt/allocator.py), then the command line."""

import contextlib
import sys

from nmt.allocator import restart_with_tcmalloc


def main() -> None:
    restart_with_tcmalloc()  # before the command line's imports, which a restart would repeat
    with _start_up_guard():
        from nmt.cli import app

        app()


def _start_up_guard() -> contextlib.AbstractContextManager:
    """`nmt train`'s start-up begins here, before the command line's imports: a signal from now
    on stops it cleanly (nmt/train/signals.py) instead of raising inside an import."""
    if sys.argv[1:2] != ["train"]:
        return contextlib.nullcontext()
    from nmt.train.signals import stop_requests

    return stop_requests(starting=True)


if __name__ == "__main__":
    main()
