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
