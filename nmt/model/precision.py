"""The precision a model's products run in on a CPU: fp32, bf16 (operands in bf16, fp32
accumulation, `nmt.model.linear`), or for decoding int8 (`nmt.decode.quantize`); `auto` chooses
by measuring this machine once.

Why measured: the same bf16 product is 4.6-8.3x fp32 on a Xeon with AMX, about 2x in theory on
a CPU with AVX512-BF16 alone, and a 10-20x slowdown on one without bf16 units, where oneDNN
cannot run it at all. `auto` times the model's own product shapes in fp32 and in bf16 at first
use (cached for the machine in precision.json, like the weight-gradient backends), and takes bf16
where the CPU runs them at least `SPEED_UP` times faster, else fp32. Why 1.5x: on an AMD EPYC
with AVX512-BF16 and no AMX, the bench model's products ran 1.5-2.1x faster in bf16 (1.9-2.0x
summed, so a 2x line would have made the choice a coin flip between two such machines) and its
decoding 1.3-1.5x at equal BLEU; a toy model's small products gain 1.2x, which the casts eat.
It never picks int8: int8 changes the outputs more than bf16 does, by an amount no timing can
tell (docs/performance.md has its BLEU); it is the user's to ask for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn

from nmt.errors import NMTError
from nmt.machine import machine_key, milliseconds
from nmt.measured import SHAPE, Entry, MeasuredFile
from nmt.model import linear

DECODING = ("auto", "fp32", "bf16", "int8")
TRAINING = ("auto", "fp32", "bf16")
SPEED_UP = 1.5  # bf16 chosen by `auto` only where the products run at least this much faster
ROWS = 64  # rows a product is timed at: a decoding batch's step, a training step's cell
REPEATS = 10  # timed calls of each precision (after three that warm it up)
CACHE = MeasuredFile("precision.json", ("fp32", "bf16"), SHAPE)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
AUTO = "NMT_PRECISION"  # what `auto` (the default) stands for, when set: e.g. fp32 for a test suite


@dataclass(frozen=True)
class Choice:
    """A precision chosen, and one line saying which and why, for the log and `nmt env`."""

    name: str  # fp32, bf16 or int8
    why: str

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES.get(self.name, torch.float32)


def product_shapes(model: nn.Module) -> list[tuple[int, int, int]]:
    """(rows, out, inner) of every weight matrix of the model's decoder (the products of each
    step: the cell, attention, W_c or W_o, the output layer), each shape once."""
    decoder = getattr(model, "decoder", model)
    shapes = {
        (ROWS, *p.shape) for name, p in decoder.named_parameters() if p.dim() == 2 and "embed" not in name
    }
    return sorted(shapes)


def time_precisions(rows: int, out: int, inner: int) -> dict[str, float]:
    """One product of that shape with the weight prepacked in fp32 and in bf16 (the input cast
    and the fp32 result included), ms (median of `REPEATS`)."""
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(rows, inner, generator=generator), torch.randn(out, inner, generator=generator)
    packed = {
        name: torch.ops.mkldnn._reorder_linear_weight(weight.to(dtype)) for name, dtype in DTYPES.items()
    }
    with torch.inference_mode():
        return {
            name: milliseconds(
                lambda dtype=dtype, w=packed[name]: linear._onednn(x, w, None, dtype, packed=True), REPEATS
            )
            for name, dtype in DTYPES.items()
        }


def measured(shapes: list[tuple[int, int, int]]) -> tuple[dict[str, float], str]:
    """The summed time of `shapes` in each precision, from the machine's cache or measured now
    (and cached), and the line saying the cache was ignored ('' if not)."""
    cached, note = CACHE.entries(machine_key())
    totals = dict.fromkeys(DTYPES, 0.0)
    for shape in shapes:
        key = " x ".join(map(str, shape))
        if key not in cached:
            timings = time_precisions(*shape)
            faster = "bf16" if timings["bf16"] * SPEED_UP <= timings["fp32"] else "fp32"
            cached[key] = CACHE.save(machine_key(), key, Entry(faster, timings))
        for name in totals:
            totals[name] += cached[key].ms[name]
    return totals, note


def resolve(asked: str | None, allowed: tuple[str, ...] = DECODING) -> str:
    """`asked`, with None and `auto` standing for $NMT_PRECISION when that is set; checked."""
    if asked in (None, "auto") and (forced := os.environ.get(AUTO)):
        if forced not in allowed:
            raise NMTError(
                f"{AUTO}={forced!r} is not a precision; use one of {', '.join(allowed)}, or unset it"
            )
        return forced
    asked = asked or "auto"
    if asked not in allowed:
        raise NMTError(f"precision: {asked!r} is not one of {', '.join(allowed)}")
    return asked


def choose(
    asked: str | None, model: nn.Module, device: torch.device, allowed: tuple[str, ...] = DECODING
) -> Choice:
    """The precision to run `model` in on `device`: the user's (`asked`), or for `auto` (and
    None) the faster of fp32 and bf16 on this CPU by `SPEED_UP`; on other devices fp32."""
    by_environment = asked in (None, "auto") and bool(os.environ.get(AUTO))
    asked = resolve(asked, allowed)
    given = f"{AUTO}={asked}" if by_environment else "asked"
    if device.type != "cpu":
        if asked not in ("auto", "fp32"):
            raise NMTError(f"precision {asked} is for CPUs; this model runs on {device}: use auto or fp32")
        return Choice("fp32", f"precision: fp32 ({asked}; on {device.type} nmt decodes in fp32)")
    if asked != "auto":
        if asked == "bf16" and not linear.BF16_UNITS:
            return Choice(
                "bf16",
                f"precision: bf16 ({given}), emulated: this CPU has no bf16 units, so it runs slower "
                "than fp32",
            )
        return Choice(asked, f"precision: {asked} ({given})")
    if not linear.BF16_UNITS:
        return Choice("fp32", "precision: fp32 (auto: this CPU has no bf16 units oneDNN can use)")
    totals, note = measured(product_shapes(model))
    ratio = totals["fp32"] / max(totals["bf16"], 1e-9)
    name = "bf16" if ratio >= SPEED_UP else "fp32"
    why = (
        f"precision: {name} (auto: the model's products run {ratio:.2f}x as fast in bf16 as in fp32 "
        f"on this CPU, {SPEED_UP:g}x needed for bf16; measured once, kept in {CACHE.path})"
    )
    return Choice(name, f"{note}\n{why}" if note else why)


def report() -> str:
    """`nmt env --bench`: this machine's measured products, one line a shape ('' when none)."""
    entries, note = CACHE.by_shape(machine_key())
    if note or not entries:
        return note
    lines = [f"precision, the products measured when a model first ran on auto ({CACHE.path}):"]
    for key, entry in entries:
        ratio = entry.ms["fp32"] / max(entry.ms["bf16"], 1e-9)
        lines.append(
            f"  {key:20} fp32 {entry.ms['fp32']:6.2f} ms, bf16 {entry.ms['bf16']:6.2f} ms ({ratio:.1f}x)"
        )
    return "\n".join(lines)
