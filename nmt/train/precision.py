"""Mixed precision. On CUDA, AMP (bf16 where supported, else fp16 with a gradient scaler). On
a CPU, bf16 products (`nmt.model.linear`: operands in bf16, fp32 accumulation, fp32 master
weights, optimiser, masks, softmax, loss) where `train.precision` says bf16, or `auto` finds
this CPU runs the model's products at least 1.5x as fast in bf16 (`nmt.model.precision`);
else fp32. CPU autocast is never used: around nn.LSTM it is not a path to rely on.

A run records the CPU precision it trained in, and a resumed run keeps it (exact resume holds
within a precision); one recorded in bf16 resumed on a CPU without bf16 units stops with one
line unless `train.precision=fp32` is asked for."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

from nmt.errors import NMTError


class Precision:
    """`auto`: AMP on CUDA (bf16 where supported, else fp16 with a GradScaler); on a CPU, bf16
    products or fp32, as `settle` finds. fp16 on a CPU is refused."""

    def __init__(self, device: torch.device, precision: str = "auto", recorded: str | None = None):
        if precision == "fp16" and device.type != "cuda":
            raise NMTError(
                f"train.precision: fp16 needs a CUDA device (this run is on {device}); use auto, bf16 or fp32"
            )
        if precision == "bf16" and device.type not in ("cuda", "cpu"):
            raise NMTError(
                f"train.precision: bf16 is for CUDA or a CPU (this run is on {device}); use auto or fp32"
            )
        self.device, self.asked, self.recorded = device, precision, recorded
        self.enabled = device.type == "cuda" and precision != "fp32"
        bf16 = precision == "bf16" or (
            precision == "auto" and self.enabled and torch.cuda.is_bf16_supported()
        )
        self.dtype = torch.bfloat16 if bf16 else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.enabled and self.dtype == torch.float16)
        self.name = f"AMP {str(self.dtype).removeprefix('torch.')}" if self.enabled else "fp32"
        self.cpu = "fp32"  # a CPU's products: fp32 or bf16 (`settle`)
        self.note = ""  # what `settle` chose and why, for the log

    def settle(self, model: torch.nn.Module, world: int = 1) -> None:
        """On a CPU: choose the products' precision (a resumed run's recorded one, else the
        config's, `auto` measured) and mark `model`'s weights with it."""
        if self.device.type != "cpu":
            return
        from nmt.model.linear import BF16_UNITS, use_operands
        from nmt.model.precision import TRAINING, Choice, choose, resolve

        asked = resolve(self.asked, TRAINING)
        if self.recorded and asked == "auto":
            if self.recorded == "bf16" and not BF16_UNITS:
                raise NMTError(
                    "this run trained with bf16 products and this CPU has no bf16 units; resume it with "
                    "--set train.precision=fp32 to go on in fp32 (no longer bit-identical)"
                )
            choice = Choice(
                self.recorded, f"precision: {self.recorded} (recorded by the run, kept on resume)"
            )
        elif asked == "auto" and world > 1:
            choice = Choice(
                "fp32", "precision: fp32 (auto under torchrun; set train.precision=bf16 for bf16)"
            )
        else:
            choice = choose(asked, model, self.device, TRAINING)
            if self.recorded and self.recorded != choice.name:
                choice = Choice(
                    choice.name,
                    f"{choice.why}; the run trained in {self.recorded} until now (not bit-identical)",
                )
        self.cpu, self.note = choice.name, choice.why
        self.name = "bf16 products (fp32 accumulation and weights)" if choice.name == "bf16" else "fp32"
        use_operands(model, choice.dtype)

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
        clip_gradients(model.parameters(), clip)
        scale = self.scaler._get_scale_async() if self.scaler.is_enabled() else None
        scale = None if scale is None else scale.clone()  # update() changes it in place
        self.scaler.step(optimizer)
        self.scaler.update()
        return True if scale is None else self.scaler._get_scale_async() >= scale


READ_FREELY = ("cpu",)  # devices whose values the host reads without waiting for them


def clip_gradients(parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ (the total norm, returned), but on a CPU the gradients are
    scaled only when it exceeds `max_norm`: torch scales them by min(1, max_norm / norm) at every
    step so as not to read the norm back from a GPU, and most steps need no clipping (2 of the
    bench model's first 65), while the pass over every gradient cost 3 ms of a 270 ms bf16 step."""
    parameters = [p for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in parameters])
    if total.device.type not in READ_FREELY or total > max_norm:
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
    return total
