"""Linear layers whose matrix products run on oneDNN on the CPU.

Why: torch's CPU matmul calls MKL, which takes a slow code path on AMD CPUs; oneDNN, shipped in
every x86 torch build, does not. On this AMD EPYC (2 threads) a decoder step's output layer,
64 x 512 @ 512 x 8000, takes 4.8 ms through MKL, 2.9 ms through oneDNN and 1.7 ms with the
weight prepacked for oneDNN; training's (1,024 rows) takes 44 ms forward and 41 + 41 ms for the
two gradients through MKL, 19 + 21 + 26 ms through oneDNN (docs/notes/performance-history.md §9). The results
differ from MKL's by float rounding only.

Everywhere else (CUDA, half precision, ONNX export, oneDNN switched off or missing) this is
F.linear.

Each weight's products may run with bf16 operands (`use_operands`, chosen by nmt.model.precision):
the weight is prepacked in bf16, the input rounded to bf16 at the product's boundary, oneDNN
accumulates in fp32, and the result comes back as float32 for everything after it (gates,
softmax, the loss). The weights themselves stay fp32 (training's master weights). Where the CPU
has no bf16 units the same numbers are emulated in fp32 products of bf16-rounded operands, for
correctness, never for speed.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.machine import bf16_units

ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
# oneDNN's bf16 kernels need AVX512-BF16 (or AVX-512 BW/VL/DQ, AMX, AVX-NE-CONVERT); without them
# the bf16 prepack raises, and bf16 operands are emulated (`_operand`)
BF16_UNITS = bf16_units()
FP32, BF16 = torch.float32, torch.bfloat16
# oneDNN keeps a compiled primitive per product shape, and torch's wrapper (ideep) an LRU cache
# of its own, 1,024 entries each by default; decoding a long file meets new shapes (sources of
# every length joining the pool) and their memory grew with the input. Read once, when oneDNN
# first runs; the environment still wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
os.environ.setdefault("LRU_CACHE_CAPACITY", "64")

# (id(weight), transposed) -> (a weak reference to it, its version and operand dtype, the weight
# prepacked for oneDNN)
_packed: dict[tuple[int, bool], tuple[weakref.ref, int, torch.dtype, Tensor]] = {}


def operands(weight: Tensor) -> torch.dtype:
    """The dtype `weight`'s products take their operands in: float32 unless `use_operands` said."""
    return getattr(weight, "operands", FP32)


def use_operands(module: nn.Module, dtype: torch.dtype) -> None:
    """From now on, every product of `module`'s parameters on oneDNN takes its operands in
    `dtype` (float32 or bfloat16). A mark on each parameter, so two models in one process (a
    server's) each keep their own, and an optimiser's steps keep it."""
    for parameter in module.parameters():
        parameter.operands = dtype
    drop_prepacked()


def as_operand(t: Tensor, weight: Tensor) -> Tensor:
    """`t` as the operand `weight`'s products on oneDNN take, cast once for several products
    (`linear`, `parameter_linear`, `weight_gradient` take it as it is); else `t` itself."""
    return _operand(t) if operands(weight) != FP32 and onednn_applies(t, weight) else t


def _operand(t: Tensor) -> Tensor:
    """`t` as a bf16 operand: bf16 where the CPU has bf16 units, else its values rounded to bf16
    and kept in fp32 (the same products, emulated)."""
    return t.to(BF16) if BF16_UNITS else t.to(BF16).to(FP32)


def _onednn(
    x: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype = FP32, packed: bool = False
) -> Tensor:
    """x (..., K) @ weight (N, K)^T + bias; weight may be prepacked (`packed`: by `_prepacked`,
    already in `dtype`) or a strided view. With bf16 operands, a float32 result."""
    if dtype == FP32:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    out = torch.ops.mkldnn._linear_pointwise(
        _operand(x), weight if packed else _operand(weight), bias, "none", [], ""
    )
    return _fp32_result(out)


def _fp32_result(out: Tensor) -> Tensor:
    """A product of bf16 operands (`_operand`) as float32: emulated, rounded as bf16's is."""
    return out.to(FP32) if BF16_UNITS else out.to(BF16).to(FP32)


def _prepacked(weight: Tensor, transposed: bool = False) -> Tensor:
    """The weight (or its transpose, for the input gradient's product) in oneDNN's blocked
    layout and its operand dtype, made again whenever the weight changes: once a training step
    (the optimiser bumps its version), once a decode. Without it, oneDNN re-lays a plain weight
    out on every call, which in training is every product of every target position (440 MB a
    bench step)."""
    key, dtype = (id(weight), transposed), operands(weight)
    entry = _packed.get(key)
    if entry is None or entry[0]() is not weight or entry[1:3] != (weight._version, dtype):
        ref = weakref.ref(weight, lambda _, key=key: _packed.pop(key, None))
        plain = weight.detach().t() if transposed else weight.detach()
        plain = plain if dtype == FP32 else _operand(plain)
        entry = (ref, weight._version, dtype, torch.ops.mkldnn._reorder_linear_weight(plain))
        _packed[key] = entry
    return entry[3]


def drop_prepacked() -> None:
    """Forget every prepacked weight (training validates, then changes every weight at its next
    step: the copies packed for the validation would only hold memory until the next one)."""
    _packed.clear()


# A weight gradient, grad (R, N) and x (R, K) -> grad^T x (N, K), by each backend. Which is faster
# depends on the machine, the shape and the threads (a 2-core Zen 1 EPYC, the output layer's at
# 1,024 rows: MKL 125 ms against oneDNN's 147 at 2 threads, 251 against 249 at 1;
# docs/notes/performance-history.md §20), so training measures it per shape
# (`nmt.train.backends.BackendChoices`).
WEIGHT_GRADIENT: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "onednn": lambda grad, x: _onednn(grad.t(), x.t(), None),
    "mkl": lambda grad, x: torch.mm(grad.t(), x),
}


def _onednn_always(*shape: object) -> str:
    """The default backend of every product training may measure: oneDNN."""
    return "onednn"


# (rows, out, inner) of a weight gradient -> its backend: oneDNN unless training installs a
# measured choice (`nmt.train.backends.BackendChoices.install`).
choose_weight_gradient: Callable[[int, int, int], str] = _onednn_always


def _output_onednn(x: Tensor, weight: Tensor, bias: Tensor | None, transposed: bool) -> Tensor:
    return _onednn(x, _prepacked(weight, transposed), bias, FP32, packed=True)


def _output_mkl(x: Tensor, weight: Tensor, bias: Tensor | None, transposed: bool) -> Tensor:
    return F.linear(x, weight.t() if transposed else weight, bias)


# Training's output layer multiplies all of a step's rows at once (about 1,000 for the bench
# model), twice: its logits x W^T and their input gradient g W. By each backend; oneDNN lays the
# weight out once a step (the step changes it). A 2-core Zen 3 EPYC at 945 rows: MKL 47 ms for
# each, oneDNN 60 and 65 with the layout (55 and 53 without), while at a decoding step's 64 rows
# oneDNN prepacked is 1.6x MKL (docs/notes/performance-history.md §23.12); so training measures it.
OUTPUT_PRODUCT: dict[str, Callable[[Tensor, Tensor, Tensor | None, bool], Tensor]] = {
    "onednn": _output_onednn,
    "mkl": _output_mkl,
}


# (rows, out, inner, transposed) of an output-layer product -> its backend: oneDNN unless
# training installs a measured choice (`nmt.train.backends.BackendChoices.install`).
choose_output_product: Callable[[int, int, int, bool], str] = _onednn_always


class OneDNNLinear(torch.autograd.Function):
    """F.linear with the output and the input gradient on oneDNN, a parameter's two layouts
    prepacked once a step, not at each of its calls, and the weight gradient on the backend
    `choose_weight_gradient` names; or, given a `_Gathered` and its token (`one_weight_gradient`),
    the gradient's rows handed over to it, the token's gradient an empty stand-in."""

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        token: Tensor | None = None,
        gathered: _Gathered | None = None,
    ) -> Tensor:
        ctx.has_bias, ctx.gathered = bias is not None, gathered
        ctx.parameter = isinstance(weight, nn.Parameter)
        ctx.dtype = operands(weight)
        x = x if ctx.dtype == FP32 else _operand(x)  # kept as the operand: cast once, half the bytes
        ctx.save_for_backward(x, weight)
        packed = _prepacked(weight) if ctx.parameter else weight
        return _onednn(x, packed, bias, ctx.dtype, ctx.parameter)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors  # x: the product's operand
        grad = grad.contiguous()
        grad_b = grad.reshape(-1, grad.size(-1)).sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        grad = grad if ctx.dtype == FP32 else _operand(grad)  # once, for both products
        rows = grad.reshape(-1, grad.size(-1))
        weight_t = _prepacked(weight, transposed=True) if ctx.parameter else weight.t()
        grad_x = _onednn(grad, weight_t, None, ctx.dtype, ctx.parameter) if ctx.needs_input_grad[0] else None
        x_rows = x.reshape(-1, x.size(-1))
        if ctx.gathered is not None:
            ctx.gathered.add(rows, x_rows)
            return grad_x, None, grad_b, weight.new_zeros(0), None
        grad_w = weight_gradient(rows, x_rows, ctx.dtype) if ctx.needs_input_grad[1] else None
        return grad_x, grad_w, grad_b, None, None


GATHERED_ROWS = 512  # rows a gathered weight gradient multiplies at once: big products, bounded memory


class _Gathered:
    """One parameter's products inside `one_weight_gradient`: the rows of their gradients and
    inputs, as their backward passes (`OneDNNLinear`) hand them over, multiplied `GATHERED_ROWS` at a time."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype  # the weight's operands
        self.grads: list[Tensor] = []
        self.inputs: list[Tensor] = []
        self.rows = 0
        self.sum: Tensor | None = None

    def add(self, grad: Tensor, x: Tensor) -> None:
        self.grads.append(grad)
        self.inputs.append(x)
        self.rows += grad.size(0)
        if self.rows >= GATHERED_ROWS:
            self._multiply()

    def _multiply(self) -> None:
        part = weight_gradient(torch.cat(self.grads), torch.cat(self.inputs), self.dtype)
        self.sum = part if self.sum is None else self.sum.add_(part)
        self.grads, self.inputs, self.rows = [], [], 0

    def gradient(self) -> Tensor | None:
        """The weight's gradient over every row handed over since the last call (a graph kept
        for a second backward gathers again)."""
        if self.grads:
            self._multiply()
        total, self.sum = self.sum, None
        return total


class _WeightGradient(torch.autograd.Function):
    """Between a parameter and its products inside `one_weight_gradient`, as a token tensor each
    product takes: autograd runs this backward only after every product that took the token
    has run its own, so the weight's gradient is one product over all their rows."""

    @staticmethod
    def forward(ctx, weight: Tensor, gathered: _Gathered) -> Tensor:
        ctx.gathered = gathered
        return weight.new_empty(0)

    @staticmethod
    def backward(ctx, _token_grad: Tensor):
        return ctx.gathered.gradient(), None


# parameter id -> its `_Gathered` and token, inside `one_weight_gradient` (None outside)
_gathering: dict[int, tuple[_Gathered, Tensor]] | None = None


@contextmanager
def one_weight_gradient() -> Iterator[None]:
    """Inside, each parameter multiplied by `linear` with gradients takes one weight gradient for
    all its products, over all their rows, where it took one a product: a recurrence's weights
    are multiplied at every target position, 64 rows at a time, and 30 small products with a
    cast and an add each cost more than one of 2,000 rows
    (docs/notes/performance-history.md §23.14)."""
    global _gathering
    outer, _gathering = _gathering, {}
    try:
        yield
    finally:
        _gathering = outer


def _gathering_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    if id(weight) not in _gathering:
        gathered = _Gathered(operands(weight))
        _gathering[id(weight)] = gathered, _WeightGradient.apply(weight, gathered)
    gathered, token = _gathering[id(weight)]
    return OneDNNLinear.apply(x, weight, bias, token, gathered)


def onednn_applies(x: Tensor, weight: Tensor) -> bool:
    return (
        ONEDNN
        and torch.backends.mkldnn.enabled  # off inside torch.backends.mkldnn.flags(enabled=False)
        and x.device.type == "cpu"
        and (x.dtype == torch.float32 or x.dtype == operands(weight))  # or already the operand (`as_operand`)
        and weight.dtype == torch.float32
        and x.numel() > 0
        and not torch.jit.is_tracing()
        and not torch.onnx.is_in_onnx_export()
    )


def weight_gradient(grad: Tensor, x: Tensor, dtype: torch.dtype = FP32) -> Tensor:
    """A weight's gradient grad^T x, (R, N) and (R, K) -> (N, K): on the CPU on the backend
    chosen for its shape (`choose_weight_gradient`), with bf16 operands (which only a CPU's
    products take; grad and x may be bf16 already) on oneDNN, elsewhere torch.mm."""
    if dtype != FP32:  # torch.mm's bf16 kernels (oneDNN's matmul): 10-20% faster here than
        # `_onednn` with x^T as a weight to lay out (the output layer's, 1,920 rows: 42 ms against 55)
        return _fp32_result(torch.mm(_operand(grad).t(), _operand(x)))
    if not onednn_applies(x, grad):
        return torch.mm(grad.t(), x)
    return WEIGHT_GRADIENT[choose_weight_gradient(*grad.shape, x.size(1))](grad, x)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, prepack: bool = True) -> Tensor:
    """F.linear, through oneDNN where it applies. With `prepack`, a parameter is prepacked once
    for as long as it does not change, when no gradient is needed (decoding); pass False for a
    weight that is a temporary (a transposed view, inside an autograd function)."""
    if not onednn_applies(x, weight):
        return F.linear(x, weight, bias)
    x = x.contiguous()
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        if _gathering is not None and isinstance(weight, nn.Parameter) and weight.requires_grad:
            return _gathering_linear(x, weight, bias)
        return OneDNNLinear.apply(x, weight, bias)
    if not prepack:
        return _onednn(x, weight, bias, operands(weight))
    return _padded_rows(x, _prepacked(weight), bias, operands(weight), packed=True)


def parameter_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, transposed: bool = False
) -> Tensor:
    """x @ weight^T + bias (x @ weight when `transposed`) without gradients, of a parameter fixed
    for a while (training's output layer: every chunk of a step): in fp32 on the backend
    `choose_output_product` names (oneDNN with the weight prepacked once for as long as it does
    not change, or MKL), with bf16 operands on oneDNN; F.linear where oneDNN does not apply."""
    if not onednn_applies(x, weight):
        return F.linear(x, weight.t() if transposed else weight, bias)
    x = x.contiguous()
    if operands(weight) != FP32:  # bf16 operands are oneDNN's
        return _onednn(x, _prepacked(weight, transposed), bias, operands(weight), packed=True)
    out, inner = (weight.size(1), weight.size(0)) if transposed else weight.shape
    backend = choose_output_product(x.size(0), out, inner, transposed)
    return OUTPUT_PRODUCT[backend](x, weight, bias, transposed)


def decoding_linear(x: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype = FP32) -> Tensor:
    """`linear` without gradients of a weight that changes from step to step (a shortlist's rows
    of the output layer, whose operands are `dtype`): not prepacked, rows padded as `linear`
    pads them."""
    if not onednn_applies(x, weight):
        return F.linear(x, weight, bias)
    return _padded_rows(x.contiguous(), weight, bias, dtype)


def _padded_rows(
    x: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype = FP32, packed: bool = False
) -> Tensor:
    """Decoding: rows padded to one of 16-32 sizes per doubling (at most 1/16 more work), so a
    pool whose rows change every step meets a few product shapes, not one per row count (oneDNN
    compiles a primitive for each shape it meets)."""
    rows = x.numel() // x.size(-1)
    padded = rounded_rows(rows)
    if padded == rows:
        return _onednn(x, weight, bias, dtype, packed)
    flat = torch.cat([x.reshape(rows, -1), x.new_zeros(padded - rows, x.size(-1))])
    return _onednn(flat, weight, bias, dtype, packed)[:rows].reshape(*x.shape[:-1], -1)


def rounded_rows(rows: int) -> int:
    """`rows` rounded up to a multiple of 2^(bits - 5): exact below 32, then 16-32 sizes per
    doubling (60 -> 60, 285 -> 288, 300 -> 304)."""
    step = 1 << max(0, rows.bit_length() - 5)
    return -(-rows // step) * step


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) computed by `linear`.

    `once_per_batch` marks a product applied to a whole batch at once (the attention keys of the
    encoder memory). Without gradients (decoding) it runs through F.linear: oneDNN keeps state
    for each product shape it meets, and these shapes are new with every group of sentences
    that joins a decode, so a long file kept adding to it (docs/notes/performance-history.md, section 10)."""

    def __init__(self, *args, once_per_batch: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.once_per_batch = once_per_batch

    def forward(self, x: Tensor) -> Tensor:
        if self.once_per_batch and not torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        return linear(x, self.weight, self.bias)
