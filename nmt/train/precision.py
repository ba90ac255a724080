"""Mixed precision. AMP is a CUDA feature: on this project's CPUs autocast
around nn.LSTM raises and bf16 matmuls are 10-20x slower, so CPU runs are always fp32."""

from __future__ import annotations

import contextlib

import torch

from nmt.errors import NMTError


class Precision:
    """`auto`: AMP on CUDA (bf16 where supported, else fp16 with a GradScaler), fp32 elsewhere.

    fp16/bf16 on a CPU are refused: autocast around nn.LSTM raises there, and CPUs without bf16
    units run bf16 matmuls 10-20x slower than fp32.
    """

    def __init__(self, device: torch.device, precision: str = "auto"):
        if precision in ("fp16", "bf16") and device.type != "cuda":
            raise NMTError(
                f"train.precision: {precision} needs a CUDA device (this run is on {device}); "
                "use auto or fp32 (mixed precision does not work with nn.LSTM on CPUs)"
            )
        self.enabled = device.type == "cuda" and precision != "fp32"
        bf16 = precision == "bf16" or (
            precision == "auto" and self.enabled and torch.cuda.is_bf16_supported()
        )
        self.dtype = torch.bfloat16 if bf16 else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.enabled and self.dtype == torch.float16)
        self.name = f"AMP {str(self.dtype).removeprefix('torch.')}" if self.enabled else "fp32"

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """`cache`: autocast keeps each weight's cast for the whole forward; a CUDA graph cannot
        be captured with that cache (nmt.train.graphs), so training with graphs turns it off."""
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.amp.autocast("cuda", dtype=self.dtype, cache_enabled=cache)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, clip: float
    ) -> bool | torch.Tensor:
        """Unscale, clip the gradient norm, step. Whether the step was taken: True, or under fp16
        a bool tensor on the device, False where the scaler skipped an overflow step (it lowers
        its scale then). Read with the loss, not here: `get_scale()` waits for the GPU, and twice
        a step made fp16 steps 9% slower than bf16's (docs/notes/performance-history.md, 12)."""
        self.scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scale = self.scaler._get_scale_async() if self.scaler.is_enabled() else None
        scale = None if scale is None else scale.clone()  # update() changes it in place
        self.scaler.step(optimizer)
        self.scaler.update()
        return True if scale is None else self.scaler._get_scale_async() >= scale
