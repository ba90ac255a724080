"""Device choice and mixed precision. AMP is a CUDA feature: on this project's CPUs autocast
around nn.LSTM raises and bf16 matmuls are 10-20x slower, so CPU runs are always fp32."""

from __future__ import annotations

import contextlib

import torch

from nmt.errors import NMTError


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
        raise NMTError(f"device: unknown device {name!r} (auto, cpu, cuda, cuda:N or mps)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise NMTError(f"device: {name} asked for, but this torch sees no CUDA device")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise NMTError(f"device: {name} asked for, but MPS is not available")
    return device


class Precision:
    """fp16 autocast + GradScaler on CUDA (bf16 without a scaler where supported); fp32 elsewhere."""

    def __init__(self, device: torch.device):
        self.enabled = device.type == "cuda"
        self.dtype = torch.bfloat16 if self.enabled and torch.cuda.is_bf16_supported() else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.enabled and self.dtype == torch.float16)
        self.name = f"AMP {str(self.dtype).removeprefix('torch.')}" if self.enabled else "fp32"

    def autocast(self) -> contextlib.AbstractContextManager:
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.amp.autocast("cuda", dtype=self.dtype)

    def backward_and_step(self, loss: torch.Tensor, model: torch.nn.Module, optimizer, clip: float) -> None:
        """Backward, unscale, clip the gradient norm, step; the scaler skips overflow steps."""
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        self.scaler.step(optimizer)
        self.scaler.update()
