"""Which CPU backend computes each weight gradient of a training step, measured on the machine
at hand rather than guessed by vendor.

Why: the fastest differs by machine, shape and threads. On a 2-core Zen 1 EPYC the output
layer's weight gradient (1,024 rows) took 125 ms through MKL and 147 through oneDNN at 2 threads,
251 and 249 at 1, and the decoder cell's went to oneDNN at both; on a 2-core Xeon MKL won the
output layer's 28 ms to 47-53 (docs/notes/performance-history.md §9.1, §20).
The first time a shape (rows rounded up to a power of two) runs, both backends are timed, as
cuDNN's benchmark mode does, and the faster is kept for the process and in a cache for the
machine (its CPU, torch build and thread count), so every run there chooses alike; a run records
its choices, so a resumed run computes with the same backends and stays bit-identical.
`NMT_WEIGHT_GRADIENT=onednn|mkl` chooses for every shape.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from nmt.errors import NMTError
from nmt.fileio import atomic_write_text
from nmt.machine import cpu_name, milliseconds
from nmt.model import linear

FORCED = "NMT_WEIGHT_GRADIENT"
REPEATS = 3  # timed calls of each backend for a new shape (after one that warms it up)


def cache_file() -> Path:
    """The machine's choices: backends.json in $NMT_CACHE_DIR, else in $XDG_CACHE_HOME/nmt, else
    in ~/.cache/nmt."""
    if folder := os.environ.get("NMT_CACHE_DIR"):
        return Path(folder) / "backends.json"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt" / "backends.json"


def machine_key() -> str:
    """What a measured choice holds for: this CPU, torch build and kernel set, thread count."""
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{cpu_name()} | torch {torch.__version__} {capability} | {torch.get_num_threads()} threads"


def rows_bucket(rows: int) -> int:
    """Rows rounded up to a power of two: a training step's output layer meets a new row count
    at every batch, and one measurement stands for them all."""
    return 1 << max(0, rows - 1).bit_length()


def shape_key(rows: int, out: int, inner: int) -> str:
    return f"{rows_bucket(rows)} x {out} x {inner}"


def read_cache() -> dict:
    """Every machine's cached choices ({} when there are none or the file is unreadable)."""
    try:
        return json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def time_backends(rows: int, out: int, inner: int) -> dict[str, float]:
    """The weight gradient of that shape through each backend, ms (median of `REPEATS`)."""
    generator = torch.Generator().manual_seed(0)
    grad = torch.randn(rows, out, generator=generator)
    x = torch.randn(rows, inner, generator=generator)
    with torch.no_grad():
        return {
            name: milliseconds(lambda product=product: product(grad, x), REPEATS, warm_up=1)
            for name, product in linear.WEIGHT_GRADIENT.items()
        }


class BackendChoices:
    """The weight-gradient backend of each shape for one training process: the run's recorded
    choices first, then the machine's cache, then a measurement (when `measure`; else oneDNN)."""

    def __init__(self, recorded: dict[str, str] | None = None, measure: bool = True):
        self.chosen: dict[str, str] = dict(recorded or {})
        self.measure = measure
        self.forced = os.environ.get(FORCED, "")
        if self.forced and self.forced not in linear.WEIGHT_GRADIENT:
            names = ", ".join(linear.WEIGHT_GRADIENT)
            raise NMTError(f"{FORCED}={self.forced} is not a backend; use one of {names}, or unset it")

    def install(self) -> None:
        """From now on, every weight gradient of this process goes where `choose` says."""
        linear.choose_weight_gradient = self.choose

    def choose(self, rows: int, out: int, inner: int) -> str:
        if self.forced:
            return self.forced
        key = shape_key(rows, out, inner)
        if key not in self.chosen:
            self.chosen[key] = self._cached_or_measured(key, rows, out, inner)
        return self.chosen[key]

    def _cached_or_measured(self, key: str, rows: int, out: int, inner: int) -> str:
        cache = read_cache()
        entry = cache.get(machine_key(), {}).get(key)
        if entry is None:
            if not self.measure:
                return "onednn"
            timings = time_backends(rows_bucket(rows), out, inner)
            entry = {"choice": min(timings, key=timings.__getitem__), "ms": timings}
            cache.setdefault(machine_key(), {})[key] = entry
            try:
                cache_file().parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(cache_file(), json.dumps(cache, indent=1, sort_keys=True) + "\n")
            except OSError:  # a read-only home: the choice still holds for this process
                pass
        return entry["choice"]


def choices_report() -> str:
    """`nmt env --bench`: this machine's cached choices, one line a shape ('' when none)."""
    entries = read_cache().get(machine_key(), {})
    if not entries:
        return ""
    lines = [f"weight gradients, measured when training first met them ({cache_file()}):"]
    for key, entry in sorted(entries.items(), key=lambda item: [int(n) for n in item[0].split(" x ")]):
        times = ", ".join(f"{name} {ms:.2f} ms" for name, ms in sorted(entry["ms"].items()))
        lines.append(f"  {key:20} {entry['choice']:7} ({times})")
    return "\n".join(lines)
