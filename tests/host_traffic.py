"""Counting, on the CPU, the operations that would make a CUDA device wait for its host.

A GPU decode is fast only when the host queues work without waiting for it. What waits: a
tensor's values read on the host (`tolist`, `item`, `cpu`, `bool(t)`, `nonzero`, a boolean-mask
index, which must count its True values first; not `numpy`, which takes only a CPU tensor) and
values sent without page-locked memory (a Python list made a device tensor or used as an index,
`.to(device)` without `non_blocking`). `HostTraffic` counts these calls while code runs on the
CPU, where every tensor stands for one on the device, so a test can bound them per decoding step
without a GPU (tests/test_cuda.py checks the same on one).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

READS = {
    Tensor.tolist,
    Tensor.item,
    Tensor.cpu,
    Tensor.__bool__,
    Tensor.__int__,
    Tensor.__float__,
    Tensor.__index__,
    Tensor.nonzero,
    torch.nonzero,
    Tensor.masked_select,
    torch.masked_select,
    torch.equal,
    Tensor.equal,
    Tensor.cuda,
}
INDEXING = {Tensor.__getitem__, Tensor.__setitem__}


def _waits_to_index(index) -> bool:
    """A boolean mask (its True values counted on the host) or a list (sent to the device)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(
        isinstance(p, list) or (isinstance(p, Tensor) and p.dtype == torch.bool and p.dim() > 0)
        for p in parts
    )


def _names_a_device(args) -> bool:
    return any(isinstance(a, (str, torch.device)) for a in args)


def _sized_by_a_tensor(args, kwargs) -> bool:
    repeats = kwargs.get("repeats", args[1] if len(args) > 1 else None)
    return isinstance(repeats, Tensor) and "output_size" not in kwargs


class HostTraffic(TorchFunctionMode):
    """`with HostTraffic() as traffic: ...`, then `traffic.waits` (and `traffic.calls`: what waited)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    @property
    def waits(self) -> int:
        return len(self.calls)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in READS:
            self.calls.append(func.__name__)
        elif func in INDEXING and _waits_to_index(args[1]):
            self.calls.append(f"{func.__name__}[{type(args[1]).__name__}]")
        elif func in (torch.tensor, torch.as_tensor) and kwargs.get("device") is not None:
            self.calls.append(f"{func.__name__}(device=...)")
        elif func is Tensor.to and _names_a_device([*args[1:], kwargs.get("device")]):
            if not kwargs.get("non_blocking"):
                self.calls.append("to(device)")
        elif func in (torch.repeat_interleave, Tensor.repeat_interleave) and _sized_by_a_tensor(args, kwargs):
            self.calls.append("repeat_interleave[Tensor]")  # its output size is read first
        return func(*args, **kwargs)
