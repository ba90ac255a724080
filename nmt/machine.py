"""What CPU this is and how fast it runs nmt's products: the yardstick a user can run
(`nmt env --bench`) to know which of docs/performance.md's machines theirs is like.

Why a yardstick: the same 2-core CPU class runs the output layer's product 3-4x slower on one
machine than on another (an AVX2 EPYC against an AVX-512 Xeon), and every speed figure in the
docs names its machine by this product's time.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

YARDSTICK = (64, 512, 8000)  # a decoder step's output layer: rows x inner x vocabulary


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform says."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _milliseconds(product: Callable[[], torch.Tensor], repeats: int) -> float:
    """The median time of `product`, after a few calls that compile and warm it."""
    for _ in range(3):
        product()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def yardstick(repeats: int = 30) -> dict[str, float]:
    """The 64 x 512 @ 512 x 8000 product's time in ms through each CPU backend torch offers:
    MKL (torch's default for fp32), oneDNN with a plain weight, oneDNN with the weight prepacked
    (nmt's decoding path; nmt/model/linear.py)."""
    rows, inner, vocab = YARDSTICK
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(rows, inner, generator=generator), torch.randn(vocab, inner, generator=generator)
    products = {"MKL": lambda: F.linear(x, weight)}
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        onednn = torch.ops.mkldnn._linear_pointwise
        packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        products["oneDNN"] = lambda: onednn(x, weight, None, "none", [], "")
        products["oneDNN prepacked"] = lambda: onednn(x, packed, None, "none", [], "")
    with torch.inference_mode():
        return {name: _milliseconds(product, repeats) for name, product in products.items()}


def yardstick_report() -> str:
    """`nmt env --bench`: the machine and the yardstick's times, one line each."""
    rows, inner, vocab = YARDSTICK
    lines = [
        f"CPU: {cpu_name()} (torch kernels: {torch.backends.cpu.get_cpu_capability()}), "
        f"{torch.get_num_threads()} threads",
        f"yardstick, the {rows} x {inner} @ {inner} x {vocab} product (median of 30):",
    ]
    gflops = 2 * rows * inner * vocab / 1e9
    for name, ms in yardstick().items():
        lines.append(f"  {name:17} {ms:7.2f} ms  {gflops / ms * 1e3:6.1f} GFLOP/s")
    return "\n".join(lines)
