"""What CPU this is and how fast it runs nmt's products: the yardstick a user can run
(`nmt env --bench`) to know which of docs/performance.md's machines theirs is like.

Why a yardstick: 2-core machines that look alike run the output layer's product 5x apart (8.5 ms
prepacked on a first-generation EPYC with AVX2, 1.7 ms on a later one), and every speed figure in
the docs names its machine by this product's time.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

YARDSTICK = (64, 512, 8000)  # a decoder step's output layer: rows x inner x vocabulary
REPEATS = 30  # timed calls of each product; the median is reported
BLOCK = 2  # timed calls a candidate makes in a row when `milliseconds` compares several
INT8_ENGINES = {"fbgemm": "fbgemm", "onednn": "oneDNN"}  # torch's int8 kernels on x86, as named to people


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform says."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine_key() -> str:
    """What a choice measured here holds for: this CPU, torch build and kernel set, thread count
    (the key of the cached weight-gradient backends and precisions)."""
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{cpu_name()} | torch {torch.__version__} {capability} | {torch.get_num_threads()} threads"


def milliseconds(calls: dict[str, Callable[[], object]], repeats: int, warm_up: int = 1) -> dict[str, float]:
    """Each call's median time in ms over `repeats` timed calls, after `warm_up` rounds that
    compile them. The candidates take turns, `BLOCK` timed calls at a time, each block after an
    untimed call that brings its weights back into the caches the others' calls took: a
    stall of the machine (a neighbour on the host) then slows every candidate alike, where timing
    one candidate's calls after the other's let it decide a cached choice alone (fbgemm's int8
    product once timed 8 ms against oneDNN's 0.74, both 0.7 a minute later;
    docs/notes/performance-history.md, 23.18)."""
    for _ in range(warm_up):
        for call in calls.values():
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(math.ceil(repeats / BLOCK)):
        for name, call in calls.items():
            call()
            for _ in range(min(BLOCK, repeats - len(times[name]))):
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(taken) * 1e3 for name, taken in times.items()}


def yardstick(repeats: int = REPEATS) -> dict[str, float]:
    """The 64 x 512 @ 512 x 8000 product's time in ms through each CPU backend torch offers:
    MKL (torch's default for fp32), oneDNN with a plain weight, oneDNN with the weight prepacked
    (nmt's decoding path; nmt/model/linear.py), where the CPU has bf16 units oneDNN with the
    weight prepacked in bf16 (the input's cast and the fp32 result included, as nmt runs it), and
    int8 on each of torch's int8 kernels this build has (`int8_product`)."""
    rows, inner, vocab = YARDSTICK
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(rows, inner, generator=generator), torch.randn(vocab, inner, generator=generator)
    products = {"MKL": lambda: F.linear(x, weight)}
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        onednn = torch.ops.mkldnn._linear_pointwise
        packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        products["oneDNN"] = lambda: onednn(x, weight, None, "none", [], "")
        products["oneDNN prepacked"] = lambda: onednn(x, packed, None, "none", [], "")
        if bf16_units():
            bf16 = torch.ops.mkldnn._reorder_linear_weight(weight.bfloat16())
            products["oneDNN bf16"] = lambda: onednn(x.bfloat16(), bf16, None, "none", [], "").float()
    for engine in int8_engines():
        products[f"int8 {INT8_ENGINES[engine]}"] = int8_product(x, weight, engine)
    with torch.inference_mode():
        return milliseconds(products, repeats)


@functools.cache
def bf16_units() -> bool:
    """Whether oneDNN runs bf16 products on this CPU (AVX512-BF16, AMX or AVX-NE-CONVERT): tried
    on a small product, since ONEDNN_MAX_CPU_ISA can hold oneDNN below what the CPU reports."""
    mkldnn = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    if not (mkldnn and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        return False
    try:
        weight = torch.ops.mkldnn._reorder_linear_weight(torch.ones(16, 16, dtype=torch.bfloat16))
        torch.ops.mkldnn._linear_pointwise(
            torch.ones(2, 16, dtype=torch.bfloat16), weight, None, "none", [], ""
        )
    except RuntimeError:  # "bf16 path needs the cpu support avx_ne_convert or avx512bw, ..."
        return False
    return True


def int8_engines() -> list[str]:
    """The `INT8_ENGINES` this torch build has (an x86 build: both; where it has not both, int8
    runs on torch's default kernels)."""
    return [engine for engine in INT8_ENGINES if engine in torch.backends.quantized.supported_engines]


@contextmanager
def int8_kernels(engine: str | None) -> Iterator[None]:
    """torch's quantised engine set to `engine` (None: left as it is) while inside: a weight
    packed here runs on that engine's kernels wherever it is used later."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine or before
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


def int8_weight(weight: Tensor) -> Tensor:
    """`weight` (N, K) as int8 with a scale for each row: a row's largest |w| becomes 127. Why a
    row's: with one scale a weight, the rows of small weights kept a few levels of 255 (decoding
    10,014 lines greedy, 89.1% of the lines as fp32 wrote them against 90.7%)."""
    scales = (weight.detach().abs().amax(1).clamp(min=1e-12) / 127).double()
    zero_points = torch.zeros(weight.size(0), dtype=torch.long)
    with warnings.catch_warnings():  # torch deprecates its quantised tensors for torchao's (quantize.py)
        warnings.filterwarnings("ignore", "torch.quantize_per_", UserWarning)
        return torch.quantize_per_channel(weight.detach().float(), scales, zero_points, 0, torch.qint8)


@functools.cache
def int8_activation_bits() -> int:
    """The bits int8 decoding quantises activations to here: 8 where every int8 engine's kernels
    add up 8-bit products exactly (VNNI and AMX sum them in int32), else 7 (torch's default: AVX2
    sums pairs of u8 x s8 products in int16, which saturates at full range). Tried on a product
    that saturates, since FBGEMM_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA can hold the kernels
    below what the CPU reports. 8 bits took greedy decoding from 90.7% of 10,014 lines as fp32
    wrote them to 94.6% (bf16: 95.0%; docs/notes/performance-history.md, 23.17)."""
    x, weight = torch.ones(4, 256), torch.ones(64, 256)  # u8 255 x s8 127, in pairs: 64,770 > 32,767
    for engine in int8_engines() or [None]:
        try:
            exact = abs(float(int8_product(x, weight, engine, bits=8)()[0, 0]) - 256) <= 1
        except RuntimeError:  # a build without int8 kernels (its engine "none"): int8 cannot run
            return 7
        if not exact:
            return 7
    return 8


def int8_product(
    x: torch.Tensor, weight: torch.Tensor, engine: str | None = None, bits: int | None = None
) -> Callable[[], Tensor]:
    """`x @ weight.T` as int8 decoding runs it: the weight int8 (`int8_weight`) and packed for
    `engine`'s kernels, the input quantised on the fly to `bits` (None: `int8_activation_bits`), a
    float result."""
    reduce_range = (bits or int8_activation_bits()) < 8
    with int8_kernels(engine):
        packed = torch.ops.quantized.linear_prepack(int8_weight(weight), None)
    return lambda: torch.ops.quantized.linear_dynamic(x, packed, reduce_range)


def int8_scheme() -> str:
    """How int8 decoding quantises here; a model's BLEU check holds for this scheme alone."""
    return f"a scale a weight row, {int8_activation_bits()}-bit activations"


def int8_line() -> str:
    """`nmt env`: how int8 decoding quantises on this CPU."""
    why = (
        "its kernels add 8-bit products exactly"
        if int8_activation_bits() == 8
        else "its kernels saturate at 8"
    )
    return f"int8: {int8_scheme()} ({why})"


def bf16_line() -> str:
    """`nmt env`: the CPU's bf16 units, which `--precision auto` needs."""
    if not bf16_units():
        return "bf16 units: none oneDNN can use (auto: fp32, or int8 for a model `nmt precision` checked)"
    kinds = [
        name
        for name, has in (
            ("AVX512-BF16", torch.cpu._is_avx512_bf16_supported()),
            ("AMX", torch.cpu._is_amx_tile_supported()),
        )
        if has
    ]
    return f"bf16 units: {', '.join(kinds) or 'yes'} (precision auto times the model's products in bf16)"


def yardstick_report() -> str:
    """`nmt env --bench`: the machine and the yardstick's times, one line each."""
    rows, inner, vocab = YARDSTICK
    lines = [
        f"CPU: {cpu_name()} (torch kernels: {torch.backends.cpu.get_cpu_capability()}), "
        f"{torch.get_num_threads()} threads",
        f"yardstick, the {rows} x {inner} @ {inner} x {vocab} product (median of {REPEATS}):",
    ]
    gflops = 2 * rows * inner * vocab / 1e9
    for name, ms in yardstick().items():
        unit = "Gop/s" if name.startswith("int8") else "GFLOP/s"
        lines.append(f"  {name:17} {ms:7.2f} ms  {gflops / ms * 1e3:6.1f} {unit}")
    return "\n".join(lines)


def others_running(loadavg: str, own_states: list[str]) -> int:
    """Threads of other processes running or waiting for a core now: /proc/loadavg's count of
    runnable threads (its fourth field, "4/321") less this process's own runnable threads (its
    OpenMP workers spin while they wait, so they are counted there too)."""
    runnable = int(loadavg.split()[3].split("/")[0])
    return max(0, runnable - sum(state == "R" for state in own_states))


def _own_states() -> list[str]:
    states = []
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):  # a thread that ended while being read
            continue
    return states


def free_cores(samples: int = 3, every: float = 0.005) -> int:
    """The cores this process may use that no other process keeps busy, at least 1: the fewest
    seen in a few quick samples (a command starting for an instant is not a busy core). Where
    /proc is missing (not Linux), every core this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    loadavg = Path("/proc/loadavg")
    if not loadavg.is_file():
        return cores
    busy = []
    for sample in range(samples):
        if sample:
            time.sleep(every)
        busy.append(others_running(loadavg.read_text(), _own_states()))
    return max(1, cores - min(busy))


def choose_threads() -> tuple[int, str]:
    """Torch's threads for a decode, and a line saying why when it is not every core: the user's
    (OMP_NUM_THREADS), else the cores no other process keeps busy. Why: the thread on a busy core
    holds back every parallel region (beside one CPU-bound process on a 2-core EPYC, training ran
    at 259 target tokens/s on 2 threads and 425 on 1; 660 alone on 2). Training keeps its thread
    count, for bit-identical maths on resume, and waits passively instead (`nmt/__main__.py`)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), ""
    cores = torch.get_num_threads()
    free = min(cores, free_cores())
    if free == cores:
        return cores, ""
    torch.set_num_threads(free)
    return free, (
        f"threads: {free} of {cores}: other processes keep {cores - free} core(s) busy "
        "(set OMP_NUM_THREADS to choose)"
    )
