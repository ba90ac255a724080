"""Which torch device a command runs on: `auto` picks CUDA, then MPS, then the CPU.

It sits below decoding and training alike, so neither imports the other to find a device.
"""

from __future__ import annotations

import torch

from nmt.errors import NMTError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N", "mps")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise NMTError(f"device: unknown device {name!r} ({', '.join(DEVICE_CHOICES)})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise NMTError(f"device: {name} asked for, but this torch sees no CUDA device; use --device cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise NMTError(f"device: {name} asked for, but MPS is not available; use --device cpu")
    return device


def to_device(values, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Host values (a list or a CPU tensor) as a tensor on `device`, without waiting for it: a
    plain copy to a CUDA device waits for every kernel queued before it, so a decoding step that
    sent an index or two stalled the GPU each time (docs/notes/performance-history.md, 17). On
    CUDA the values go from page-locked memory, asynchronously; on the CPU they stay where they are."""
    if device.type == "cuda":
        pinned = (
            values.to(dtype).pin_memory()
            if isinstance(values, torch.Tensor)
            else torch.tensor(values, dtype=dtype, pin_memory=True)
        )
        return pinned.to(device, non_blocking=True)
    tensor = torch.as_tensor(values, dtype=dtype)
    return tensor if device.type == "cpu" else tensor.to(device)


def environment_report() -> str:
    """What a bug report needs: versions, the devices torch sees, and its thread count."""
    import platform

    import numpy
    import sacrebleu
    import sentencepiece

    from nmt.allocator import describe as describe_allocator
    from nmt.version import VERSION

    cuda = torch.cuda.is_available()
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    lines = [
        f"nmt {VERSION}",
        f"python {platform.python_version()} ({platform.platform()})",
        f"torch {torch.__version__} (CUDA build {torch.version.cuda or 'none'})",
        f"CUDA available: {cuda}" + (f" ({', '.join(devices)})" if devices else ""),
        f"MPS available: {torch.backends.mps.is_available()}",
        f"threads: {torch.get_num_threads()} (interop {torch.get_num_interop_threads()})",
        f"memory allocator: {describe_allocator()}",
        f"sentencepiece {sentencepiece.__version__}, sacrebleu {sacrebleu.__version__}, "
        f"numpy {numpy.__version__}",
    ]
    return "\n".join(lines)
