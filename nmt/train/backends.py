"""Which CPU backend computes each weight gradient of a training step, and the output layer's two
whole-step products (its logits and their input gradient), measured on the machine at hand
rather than guessed by vendor.

Why: the fastest differs by machine, shape and threads. On a 2-core Zen 1 EPYC the output
layer's weight gradient (1,024 rows) took 125 ms through MKL and 147 through oneDNN at 2 threads,
251 and 249 at 1, and the decoder cell's went to oneDNN at both; on a 2-core Xeon MKL won the
output layer's 28 ms to 47-53 (docs/notes/performance-history.md §9.1, §20).
The first time a shape (rows rounded up to a power of two) runs, both backends are timed, as
cuDNN's benchmark mode does, and MKL is kept where it takes under 90% of oneDNN's time (closer
calls stay on oneDNN, as before), for the process and in a cache for the
machine (its CPU, torch build and thread count), so every run there chooses alike; a run records
its choices, so a resumed run computes with the same backends and stays bit-identical.
`NMT_WEIGHT_GRADIENT=onednn|mkl` chooses for every shape, the output layer's products too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from torch.autograd.graph import increment_version

from nmt.errors import NMTError
from nmt.machine import machine_key, milliseconds
from nmt.measured import SHAPE, Entry, MeasuredFile
from nmt.model import linear

FORCED = "NMT_WEIGHT_GRADIENT"
DEFAULT = "onednn"  # what every weight gradient ran on before this module, and runs on unless beaten
REPEATS = 4  # timed calls of each backend for a new shape, in turn with the others' (`milliseconds`)
MARGIN = 0.9  # another backend is chosen only at under 90% of the default's time: no coin flips cached
WEIGHT_GRADIENT, LOGITS, INPUT_GRADIENT = "weight gradient", "logits", "input gradient"
OUTPUT_KINDS = (LOGITS, INPUT_GRADIENT)  # the output layer's products, named in their keys
KEY = re.compile(f"(?:(?:{'|'.join(OUTPUT_KINDS)}) )?{SHAPE.pattern}")  # `shape_key`'s
CACHE = MeasuredFile("backends.json", tuple(linear.WEIGHT_GRADIENT), KEY)


def cache_file() -> Path:
    """The machine's choices: backends.json in nmt's cache folder (`nmt.measured.cache_folder`)."""
    return CACHE.path


def rows_bucket(rows: int) -> int:
    """Rows rounded up to a power of two: a training step's output layer meets a new row count
    at every batch, and one measurement stands for them all."""
    return 1 << max(0, rows - 1).bit_length()


def shape_key(rows: int, out: int, inner: int, kind: str = WEIGHT_GRADIENT) -> str:
    """A weight gradient's key is its shape, as runs have always recorded it (1024 x 8000 x 512);
    the output layer's products' keys name their kind (logits 1024 x 8000 x 512, input gradient
    1024 x 512 x 8000)."""
    shape = f"{rows_bucket(rows)} x {out} x {inner}"
    return shape if kind == WEIGHT_GRADIENT else f"{kind} {shape}"


def is_output_key(key: str) -> bool:
    return key.startswith(OUTPUT_KINDS)


def known(choice: object) -> bool:
    return isinstance(choice, str) and choice in linear.WEIGHT_GRADIENT


def faster(timings: dict[str, float]) -> str:
    """The backend to keep: the default unless another takes under `MARGIN` of its time."""
    best = min(timings, key=timings.__getitem__)
    return best if timings[best] < MARGIN * timings[DEFAULT] else DEFAULT


def _weight_gradients(rows: int, out: int, inner: int, generator: torch.Generator) -> dict:
    grad = torch.randn(rows, out, generator=generator)
    x = torch.randn(rows, inner, generator=generator)
    products = linear.WEIGHT_GRADIENT.items()
    return {name: lambda product=product: product(grad, x) for name, product in products}


def _output_products(transposed: bool):
    def products(rows: int, out: int, inner: int, generator: torch.Generator) -> dict:
        x = torch.randn(rows, inner, generator=generator)
        weight = torch.randn((inner, out) if transposed else (out, inner), generator=generator)

        def once_a_step(product):  # the weight changed: oneDNN lays it out again, as every step
            increment_version(weight)
            return product(x, weight, None, transposed)

        return {name: lambda p=product: once_a_step(p) for name, product in linear.OUTPUT_PRODUCT.items()}

    return products


# kind -> the calls to time for a shape (rows, out, inner), one per backend
PRODUCTS = {
    WEIGHT_GRADIENT: _weight_gradients,
    LOGITS: _output_products(transposed=False),
    INPUT_GRADIENT: _output_products(transposed=True),
}


def time_backends(rows: int, out: int, inner: int, kind: str = WEIGHT_GRADIENT) -> dict[str, float]:
    """The product `kind` of that shape through each backend, ms (median of `REPEATS`)."""
    with torch.no_grad():
        calls = PRODUCTS[kind](rows, out, inner, torch.Generator().manual_seed(0))
        return milliseconds(calls, REPEATS, warm_up=0)


class BackendChoices:
    """The weight-gradient backend of each shape for one training process: `forced` (else the
    environment's) for every shape, else the run's recorded choices, then the machine's cache,
    then a measurement (when `measure`; else the default). Every choice made is recorded, and
    what ran is what is recorded: a forced backend replaces a resumed run's own.

    `notes`: lines for the run's log, said once at its start (a cache file ignored, a resumed
    run's recorded backends overridden by the environment)."""

    def __init__(self, recorded: dict[str, str] | None = None, measure: bool = True, forced: str = ""):
        self.chosen = {key: choice for key, choice in (recorded or {}).items() if known(choice)}
        # a run recorded before the output layer's products were chosen ran them on oneDNN
        self.output_default = bool(self.chosen) and not any(map(is_output_key, self.chosen))
        self.measure = measure
        self.forced = forced or os.environ.get(FORCED, "")
        if self.forced and not known(self.forced):
            names = ", ".join(linear.WEIGHT_GRADIENT)
            raise NMTError(f"{FORCED}={self.forced!r} is not a backend; use one of {names}, or unset it")
        self.cached, note = CACHE.entries(machine_key())
        self.notes = [note] if note else []
        if self.forced and (others := sorted({c for c in self.chosen.values() if c != self.forced})):
            self.notes.append(
                f"{FORCED}={self.forced} replaces the {', '.join(others)} this run computed with until now: "
                "from here on it is not bit-identical to an uninterrupted run (unset it to keep that)"
            )
            self.chosen = dict.fromkeys(self.chosen, self.forced)

    @classmethod
    def for_run(cls, checkpoint: dict | None, measure: bool) -> BackendChoices:
        """A fresh run's choices, or a resumed run's: those it recorded, and for a run from
        before choices were recorded, the default everywhere (what it computed with) unless the
        environment forces another."""
        if checkpoint and "backends" not in checkpoint:
            return cls(forced=os.environ.get(FORCED) or DEFAULT)
        return cls(checkpoint.get("backends") if checkpoint else None, measure)

    def install(self) -> None:
        """From now on, every weight gradient of this process, and the output layer's products,
        go where `choose` says."""
        linear.choose_weight_gradient = self.choose
        linear.choose_output_product = lambda rows, out, inner, transposed: self.choose(
            rows, out, inner, INPUT_GRADIENT if transposed else LOGITS
        )

    def choose(self, rows: int, out: int, inner: int, kind: str = WEIGHT_GRADIENT) -> str:
        key = shape_key(rows, out, inner, kind)
        if key not in self.chosen:
            as_recorded = self.output_default and kind in OUTPUT_KINDS  # oneDNN, as it ran
            self.chosen[key] = self.forced or (
                DEFAULT if as_recorded else self._cached_or_measured(key, rows, out, inner, kind)
            )
        return self.chosen[key]

    def _cached_or_measured(self, key: str, rows: int, out: int, inner: int, kind: str) -> str:
        """The machine's choice for `key`: cached when this process started, cached since by
        another process (read again: a process that measured on its own where another already
        had chose by its own timing, and two runs of one config then computed apart), else
        measured here, unless another process's measurement was saved first."""
        if key not in self.cached:
            self.cached.update(CACHE.entries(machine_key())[0])
        if key in self.cached:
            return self.cached[key].choice
        if not self.measure:
            return DEFAULT
        timings = time_backends(rows_bucket(rows), out, inner, kind)
        self.cached[key] = CACHE.save(machine_key(), key, Entry(faster(timings), timings))
        return self.cached[key].choice


def choices_report() -> str:
    """`nmt env --bench`: this machine's cached choices, one line a shape ('' when none), or
    the line saying the cache is ignored."""
    entries, note = CACHE.by_shape(machine_key())
    if note or not entries:
        return note
    lines = [f"training's products, measured when it first met them ({cache_file()}):"]
    for key, entry in entries:
        timings = ", ".join(f"{name} {ms:.2f} ms" for name, ms in sorted(entry.ms.items()))
        lines.append(f"  {key:20} {entry.choice:7} ({timings})")
    return "\n".join(lines)
