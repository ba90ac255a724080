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

int8 changes the outputs more than bf16 does, by an amount no timing can tell, so `auto` takes it
only for a model that carries a `BleuCheck` (`nmt precision` decodes a set in each precision and
keeps the BLEU beside the weights) in which int8 lost at most `BLEU_TOLERANCE`, and only where
the products int8 replaces run at least `SPEED_UP` times as fast as in the precision otherwise
chosen (timed once, cached in int8.json). On a Zen 3 EPYC without bf16 units they ran 2.1x
fp32's and the whole decoding 1.25-1.5x, within 0.1 BLEU.

int8 runs on one of torch's two int8 engines for x86, whichever ran the model's int8 products
faster here (timed once, cached in int8-engines.json): fbgemm (torch's default; AVX2, AVX-512
VNNI) or oneDNN, whose kernels also use AMX-INT8 on Xeons since Sapphire Rapids, where torch's
AMX recipe sends int8 products. Both quantise alike (`nmt.machine.int8_scheme`: a scale a weight
row, 8-bit activations where the kernels sum such products exactly, else 7); on a Zen 3 fbgemm ran
the output layer's 64 rows in 1.7 ms against oneDNN's 2.1-3.4, level at 320.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from nmt.errors import NMTError
from nmt.machine import (
    INT8_ENGINES,
    int8_engines,
    int8_kernels,
    int8_product,
    int8_scheme,
    machine_key,
    milliseconds,
)
from nmt.measured import SHAPE, Entry, MeasuredFile
from nmt.model import linear

DECODING = ("auto", "fp32", "bf16", "int8")
TRAINING = ("auto", "fp32", "bf16")
SPEED_UP = 1.5  # bf16 chosen by `auto` only where the products run at least this much faster
ROWS = 64  # rows a product is timed at: a decoding batch's step, a training step's cell
REPEATS = 10  # timed calls of each precision, in turn with the other's (`nmt.machine.milliseconds`)
CACHE = MeasuredFile("precision.json", ("fp32", "bf16"), SHAPE)
INT8_CACHE = MeasuredFile("int8.json", ("fp32", "int8"), SHAPE)
ENGINE_CACHE = MeasuredFile("int8-engines.json", tuple(INT8_ENGINES), SHAPE)
ENGINE_MARGIN = 1.1  # oneDNN's int8 kernels taken where they run the products this much faster
ENGINE = "NMT_INT8_ENGINE"  # the int8 kernels to use, when set: fbgemm or onednn
INT8_LAYERS = (  # the layers int8 decoding replaces; a BLEU check records them
    "encoder.rnn",
    "decoder.rnn",
    "decoder.W_c",
    "decoder.W_o",
    "decoder.output_layer",
)
BLEU_TOLERANCE = 0.2  # BLEU a model's check may lose in int8 for `auto` to take it
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
AUTO = "NMT_PRECISION"  # what `auto` (the default) stands for, when set: e.g. fp32 for a test suite


@dataclass(frozen=True)
class Choice:
    """A precision chosen, and one line saying which and why, for the log and `nmt env`."""

    name: str  # fp32, bf16 or int8
    why: str
    engine: str | None = None  # int8's kernels (`INT8_ENGINES`); None: torch's default

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES.get(self.name, torch.float32)


@dataclass(frozen=True)
class BleuCheck:
    """The BLEU a model scored on one set in each precision, as `nmt precision` measured it and
    kept beside its weights: what lets `auto` take int8."""

    bleu: dict[str, float]  # precision -> BLEU
    on: str  # the set and search, for the log: "val.de (1,014 lines, beam 5)"

    @property
    def int8_loss(self) -> float:
        return self.bleu["fp32"] - self.bleu["int8"]

    @property
    def allows_int8(self) -> bool:
        return self.int8_loss <= BLEU_TOLERANCE

    def __str__(self) -> str:
        return (
            f"int8 scored {self.bleu['int8']:.2f} BLEU against fp32's {self.bleu['fp32']:.2f} on "
            f"{self.on}, {BLEU_TOLERANCE:g} lower allowed"
        )


def product_shapes(model: nn.Module, layers: tuple[str, ...] | None = None) -> list[tuple[int, int, int]]:
    """(rows, out, inner) of every weight matrix of the model's decoder (the products of each
    step: the cell, attention, W_c or W_o, the output layer), or of the model's `layers`
    (`INT8_LAYERS`), each shape once."""
    if layers is None:
        named = getattr(model, "decoder", model).named_parameters()
    else:
        named = ((name, p) for name, p in model.named_parameters() if name.rsplit(".", 1)[0] in layers)
    return sorted({(ROWS, *p.shape) for name, p in named if p.dim() == 2 and "embed" not in name})


def _inputs(rows: int, out: int, inner: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(rows, inner, generator=generator), torch.randn(out, inner, generator=generator)


def time_precisions(rows: int, out: int, inner: int) -> dict[str, float]:
    """One product of that shape with the weight prepacked in fp32 and in bf16 (the input cast
    and the fp32 result included), ms (median of `REPEATS`)."""
    x, weight = _inputs(rows, out, inner)
    packed = {
        name: torch.ops.mkldnn._reorder_linear_weight(weight.to(dtype)) for name, dtype in DTYPES.items()
    }
    with torch.inference_mode():
        calls = {
            name: lambda dtype=dtype, w=packed[name]: linear._onednn(x, w, None, dtype, packed=True)
            for name, dtype in DTYPES.items()
        }
        return milliseconds(calls, REPEATS)


def _fp32_product(x: torch.Tensor, weight: torch.Tensor) -> Callable[[], torch.Tensor]:
    """fp32 as decoding runs it: the weight prepacked for oneDNN, or F.linear where torch has none."""
    if not linear.ONEDNN:
        return lambda: torch.nn.functional.linear(x, weight)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    return lambda: linear._onednn(x, packed, None, packed=True)


def time_int8(rows: int, out: int, inner: int) -> dict[str, float]:
    """One product of that shape in fp32 as decoding runs it and in int8 on the kernels of
    torch's quantised engine as set (`nmt.machine.int8_product`), ms."""
    x, weight = _inputs(rows, out, inner)
    with torch.inference_mode():
        return milliseconds({"fp32": _fp32_product(x, weight), "int8": int8_product(x, weight)}, REPEATS)


def time_engines(rows: int, out: int, inner: int) -> dict[str, float]:
    """One int8 product of that shape on each of `INT8_ENGINES`' kernels, ms."""
    x, weight = _inputs(rows, out, inner)
    with torch.inference_mode():
        return milliseconds({engine: int8_product(x, weight, engine) for engine in INT8_ENGINES}, REPEATS)


def timed_on(cache: MeasuredFile) -> str:
    """The machine `cache`'s timings hold for; int8's with how int8 quantises here
    (`int8_scheme`), so timings of another scheme (an earlier nmt's, or kernels held to another
    instruction set, whose activations take 7 bits) are taken again."""
    if cache in (INT8_CACHE, ENGINE_CACHE):
        return f"{machine_key()} | int8: {int8_scheme()}"
    return machine_key()


def measured(
    shapes: list[tuple[int, int, int]],
    cache: MeasuredFile,
    timer: Callable[..., dict[str, float]],
    margin: float = SPEED_UP,
) -> tuple[dict[str, float], str]:
    """The summed time of `shapes` in each of `cache`'s choices, from the machine's cache or
    measured now by `timer` (and cached), and the line saying the cache was ignored ('' if
    not). The first choice is the reference the other is kept against, where `margin` times
    faster."""
    where = timed_on(cache)
    cached, note = cache.entries(where)
    reference, other = cache.choices
    totals = dict.fromkeys(cache.choices, 0.0)
    for shape in shapes:
        key = " x ".join(map(str, shape))
        if key not in cached:
            timings = timer(*shape)
            faster = other if timings[other] * margin <= timings[reference] else reference
            cached[key] = cache.save(where, key, Entry(faster, timings))
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
    asked: str | None,
    model: nn.Module,
    device: torch.device,
    allowed: tuple[str, ...] = DECODING,
    check: BleuCheck | None = None,
) -> Choice:
    """The precision to run `model` in on `device`: the user's (`asked`), or for `auto` (and
    None) the faster of fp32 and bf16 on this CPU by `SPEED_UP`, and int8 over that where
    `check` allows it and the CPU runs it `SPEED_UP` times faster still; on other devices fp32."""
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
        if asked == "int8":
            return _on_int8_kernels(model, f"precision: int8 ({given})")
        return Choice(asked, f"precision: {asked} ({given})")
    chosen = _fp32_or_bf16(model)
    if check is None or "int8" not in allowed:
        return chosen
    if not check.allows_int8:
        return Choice(chosen.name, f"{chosen.why}; not int8: {check}")
    return _int8_if_faster(model, chosen, check)


def _fp32_or_bf16(model: nn.Module) -> Choice:
    if not linear.BF16_UNITS:
        return Choice("fp32", "precision: fp32 (auto: this CPU has no bf16 units oneDNN can use)")
    totals, note = measured(product_shapes(model), CACHE, time_precisions)
    ratio = totals["fp32"] / max(totals["bf16"], 1e-9)
    name = "bf16" if ratio >= SPEED_UP else "fp32"
    why = (
        f"precision: {name} (auto: the model's products run {ratio:.2f}x as fast in bf16 as in fp32 "
        f"on this CPU, {SPEED_UP:g}x needed for bf16; measured once, kept in {CACHE.path})"
    )
    return Choice(name, _after(note, why))


def _after(note: str, why: str) -> str:
    """`why`, after the line saying a cache was ignored when there is one."""
    return f"{note}\n{why}" if note else why


@dataclass(frozen=True)
class Int8Kernels:
    """The int8 engine a model runs on, the phrase saying why, and the line saying its cache was
    ignored ('' if not)."""

    engine: str | None
    why: str
    note: str = ""


def int8_kernels_for(shapes: list[tuple[int, int, int]]) -> Int8Kernels:
    """$NMT_INT8_ENGINE when set; where this torch has both `INT8_ENGINES`, the one that ran the
    model's int8 product `shapes` faster here (oneDNN's by `ENGINE_MARGIN`), timed once and
    cached; else torch's default."""
    available = int8_engines()
    if forced := os.environ.get(ENGINE):
        if forced not in available:
            kinds = ", ".join(available) or "it has neither fbgemm nor onednn"
            raise NMTError(
                f"{ENGINE}={forced!r} is not an int8 engine this torch has ({kinds}); name one or unset it"
            )
        return Int8Kernels(forced, f"{INT8_ENGINES[forced]}'s kernels ({ENGINE}={forced})")
    if len(available) < len(INT8_ENGINES) or not shapes:
        return Int8Kernels(None, "torch's default kernels")
    totals, note = measured(shapes, ENGINE_CACHE, time_engines, ENGINE_MARGIN)
    ratio = totals["fbgemm"] / max(totals["onednn"], 1e-9)
    engine = "onednn" if ratio >= ENGINE_MARGIN else "fbgemm"
    why = (
        f"{INT8_ENGINES[engine]}'s kernels (oneDNN's ran its products {ratio:.2f}x as fast as "
        f"fbgemm's here, {ENGINE_MARGIN:g}x needed for oneDNN; kept in {ENGINE_CACHE.path})"
    )
    return Int8Kernels(engine, why, note)


def _on_int8_kernels(model: nn.Module, why: str) -> Choice:
    """int8, on the kernels `int8_kernels_for` chooses, saying so after `why`."""
    kernels = int8_kernels_for(product_shapes(model, INT8_LAYERS))
    return Choice("int8", _after(kernels.note, f"{why}, on {kernels.why}"), kernels.engine)


def _int8_if_faster(model: nn.Module, chosen: Choice, check: BleuCheck) -> Choice:
    """int8 on the faster int8 kernels, where the products it replaces run `SPEED_UP` times as
    fast there as in `chosen`'s precision (bf16's time from its own cache), else `chosen`, with
    why."""
    shapes = product_shapes(model, INT8_LAYERS)
    kernels = int8_kernels_for(shapes)
    with int8_kernels(kernels.engine):  # the engine the int8 products are packed for
        totals, note = measured(shapes, INT8_CACHE, time_int8)
    against = totals["fp32"]
    if chosen.name == "bf16":
        by_dtype = measured(shapes, CACHE, time_precisions)[0]
        against *= by_dtype["bf16"] / max(by_dtype["fp32"], 1e-9)
    ratio = against / max(totals["int8"], 1e-9)
    if ratio < SPEED_UP:
        why = f"{chosen.why}; not int8: {ratio:.2f}x as fast as {chosen.name}, {SPEED_UP:g}x needed"
        return Choice(chosen.name, _after(note, why))
    why = (
        f"precision: int8 (auto: the products it replaces run {ratio:.2f}x as fast as in "
        f"{chosen.name} on this CPU, {SPEED_UP:g}x needed, and {check}; timed once, kept in "
        f"{INT8_CACHE.path}), on {kernels.why}"
    )
    return Choice("int8", _after("\n".join(filter(None, (kernels.note, note))), why), kernels.engine)


def report() -> str:
    """`nmt env --bench`: this machine's measured products, one line a shape and cache ('' when
    none)."""
    lines = []
    uses = (
        (CACHE, "a model first ran on auto"),
        (INT8_CACHE, "auto first weighed int8"),
        (ENGINE_CACHE, "int8 first chose its kernels"),
    )
    for cache, use in uses:
        entries, note = cache.by_shape(timed_on(cache))
        if note or not entries:
            lines += [note] if note else []
            continue
        reference, other = cache.choices
        lines.append(f"precision, the products measured when {use} ({cache.path}):")
        for key, entry in entries:
            ms = entry.ms
            ratio = ms[reference] / max(ms[other], 1e-9)
            lines.append(
                f"  {key:20} {reference} {ms[reference]:6.2f} ms, {other} {ms[other]:6.2f} ms ({ratio:.1f}x)"
            )
    return "\n".join(lines)
