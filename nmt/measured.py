"""Choices measured once per machine and kept in a small JSON file of the user's cache folder:
which backend computes each weight gradient (`backends.json`, nmt.train.backends), which
precision runs a model fastest (`precision.json`, `int8.json`) and on which int8 kernels
(`int8-engines.json`; nmt.model.precision).

One reader for every user of such a file (training, decoding, `nmt env --bench`), checked once:
the file is anybody's to damage, so it is read only when it is a regular file under `MAX_BYTES`
(a FIFO would hang the reader, /dev/zero fill the memory), parsed by nmt's strict JSON reader,
and each entry kept only when every field has the type this module writes. An entry that is not
is measured again; a file that is not a regular file is ignored with one line and never written.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from nmt.errors import NMTError
from nmt.fileio import atomic_write_text, describe_os_error
from nmt.jsonvalues import JSONError, parse_json

MAX_BYTES = 1 << 20  # a machine's cache holds a few dozen entries of ~100 bytes
MAX_MACHINE = 300  # characters of a machine's key: its CPU, torch build and threads
DEPTH = 4  # machine -> key -> entry -> timings


def _numbers(key: str) -> list[int]:
    """A key's numbers (its product's shape), for sorting: "logits 1024 x 8000 x 512" by its shape."""
    return [int(n) for n in re.findall(r"\d+", key)]


SHAPE = re.compile(r"\d{1,9} x \d{1,9} x \d{1,9}")  # a product's key: rows x out x inner


def cache_folder() -> Path:
    """$NMT_CACHE_DIR, else $XDG_CACHE_HOME/nmt, else ~/.cache/nmt."""
    if folder := os.environ.get("NMT_CACHE_DIR"):
        return Path(folder)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt"


@dataclass(frozen=True)
class Entry:
    """One measured choice: the name kept and every candidate's time in ms."""

    choice: str
    ms: dict[str, float]

    def to_json(self) -> dict:
        return {"choice": self.choice, "ms": self.ms}


@dataclass
class Contents:
    """A cache file as read: every machine's valid entries, and `note`, one line for the user
    when the file was ignored ('' when it was read or is not there yet)."""

    machines: dict[str, dict[str, Entry]] = field(default_factory=dict)
    note: str = ""

    @property
    def writable(self) -> bool:
        return not self.note


class MeasuredFile:
    """A cache file of `name` whose keys match `key` and whose choices and timings are named
    among `choices`."""

    def __init__(self, name: str, choices: tuple[str, ...], key: re.Pattern[str]):
        self.name, self.choices, self.key = name, choices, key

    @property
    def path(self) -> Path:
        return cache_folder() / self.name

    def read(self) -> Contents:
        try:
            path = self.path
        except RuntimeError:  # no home directory to find
            return Contents()
        try:
            document = _read_regular(path)
        except FileNotFoundError:
            return Contents()
        except (OSError, _IgnoredError) as e:
            why = describe_os_error(e, path) if isinstance(e, OSError) else f"{path}: {e}"
            return Contents(note=f"{why}; ignored, so this process measures again and keeps what it finds")
        try:
            machines = parse_json(document, str(path), dict, depth=DEPTH)
        except JSONError:  # damaged: measured again, and rewritten whole
            return Contents()
        return Contents({m: self._valid(entries) for m, entries in machines.items() if len(m) <= MAX_MACHINE})

    def _valid(self, entries: object) -> dict[str, Entry]:
        if not isinstance(entries, dict):
            return {}
        kept = {}
        for key, entry in entries.items():
            if not (self.key.fullmatch(key) and isinstance(entry, dict)):
                continue
            choice, ms = entry.get("choice"), entry.get("ms")
            timed = isinstance(ms, dict) and set(ms) == set(self.choices)  # every candidate timed
            if choice in self.choices and timed and all(map(self._timing, ms.items())):
                kept[key] = Entry(choice, {name: float(t) for name, t in ms.items()})
        return kept

    def _timing(self, item: tuple[object, object]) -> bool:
        name, ms = item
        number = isinstance(ms, int | float) and not isinstance(ms, bool)
        return name in self.choices and number and math.isfinite(ms) and ms >= 0

    def by_shape(self, machine: str) -> tuple[list[tuple[str, Entry]], str]:
        """`entries`, smallest product shape first, for a report."""
        entries, note = self.entries(machine)
        return sorted(entries.items(), key=lambda item: (_numbers(item[0]), item[0])), note

    def entries(self, machine: str) -> tuple[dict[str, Entry], str]:
        """This machine's valid entries, and the line saying the file was ignored ('' if not)."""
        contents = self.read()
        return contents.machines.get(machine, {}), contents.note

    def save(self, machine: str, key: str, entry: Entry) -> Entry:
        """Add `entry` and return the entry the machine now has for `key`: the file's own where
        another process measured it first (two trainings meeting a shape at once, or one that
        started before another measured it), so every process of a machine computes with one
        choice; `entry` where the file cannot be read or written (no home, read-only, a full
        disk): the choice then holds for this process alone. The read and the write are one
        step under a lock beside the file."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self.path):
                contents = self.read()
                held = contents.machines.get(machine, {}).get(key)
                if held is not None or not contents.writable:
                    return held or entry
                contents.machines.setdefault(machine, {})[key] = entry
                machines = contents.machines.items()
                document = {m: {k: e.to_json() for k, e in entries.items()} for m, entries in machines}
                atomic_write_text(self.path, json.dumps(document, indent=1, sort_keys=True) + "\n")
        except (OSError, NMTError, RuntimeError):
            pass
        return entry


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`'s lock file (`.name.lock` beside it) while inside; opened
    without blocking or following a link, so a FIFO or a folder put there is an OSError."""
    import fcntl

    flags = (
        os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    fd = os.open(path.with_name(f".{path.name}.lock"), flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: its lock is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class _IgnoredError(Exception):
    """A cache path that is there but not a file nmt reads."""


def _read_regular(path: Path) -> bytes:
    """The bytes of `path` when it is a regular file of at most `MAX_BYTES`. Opened without
    blocking, so a FIFO without a writer answers at once, and checked on the open descriptor."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise _IgnoredError(f"not a regular file ({_kind(status.st_mode)})")
        if status.st_size > MAX_BYTES:
            raise _IgnoredError(f"{status.st_size:,} bytes, over the {MAX_BYTES:,} a cache of nmt's can hold")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_BYTES + 1)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device"}
    kinds |= {stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}
    return next((name for test, name in kinds.items() if test(mode)), "not a file")
