"""The output layer p(y_t) = softmax(W_s x_t): one owner for the logits and for the training loss.

Dropout on the pre-output vector, then the projection to the vocabulary, are written once here,
whether a search asks for logits or training asks for the loss of the real target positions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt.model.dropout import dropout
from nmt.model.linear import (
    as_operand,
    linear,
    onednn_applies,
    operands,
    parameter_linear,
    weight_gradient,
)


class OutputLayer(nn.Linear):
    """Dropout then W_s (Luong eq. 6; Bahdanau's final layer after the deep output)."""

    def __init__(self, in_features: int, vocab_size: int, dropout: float):
        super().__init__(in_features, vocab_size)
        self.p = dropout

    def forward(self, pre_output: Tensor) -> Tensor:
        """Pre-output vectors (..., P) -> logits (..., V)."""
        return linear(dropout(pre_output, self.p, self.training), self.weight, self.bias)

    def loss(
        self, pre_output: Tensor, target: Tensor, label_smoothing: float = 0.0, real: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Summed (label-smoothed) cross-entropy and summed NLL of `target` (N,) given the
        pre-output vectors (N, P) of the real target positions, without keeping the logits.
        `real` (N,) bool, when given, counts only those rows: a CUDA graph cannot select the
        real rows (their number changes every batch), so it passes them all with this mask."""
        x = dropout(pre_output, self.p, self.training)
        gradients = torch.is_grad_enabled()  # autograd functions cannot see it inside forward
        return LinearCrossEntropy.apply(x, self.weight, self.bias, target, label_smoothing, gradients, real)


CHUNK_LOGITS = 1 << 23  # logits computed at a time: 32 MB in fp32, 1,048 rows of an 8k vocabulary


def _softmax_and_losses(logits: Tensor, target: Tensor, smoothing: float) -> tuple[Tensor, Tensor, Tensor]:
    """Logits (N, V) -> their softmax (in their own buffer on a CPU), each row's NLL of `target`
    and its smoothed cross-entropy.

    torch's fused softmax takes one pass over the logits where max, subtract, exp, sum and divide
    took five (1,048 x 8,000 on a CPU: 4.2 ms against 6.9 with both maxima), in place on a CPU
    (its kernel allows it; tests/train/test_loss.py); log Z comes from the most likely piece's
    probability, exp(0) / sum, which is never below 1 / V."""
    picked = logits.gather(1, target[:, None]).squeeze(1)
    mean = logits.mean(-1) if smoothing else None
    top = logits.amax(-1)
    probabilities = torch.softmax(logits, -1, out=logits if logits.is_cpu else None)
    log_z = top - probabilities.amax(-1).log()
    nll = log_z - picked
    objective = nll if mean is None else (1 - smoothing) * nll + smoothing * (log_z - mean)
    return probabilities, nll, objective


class LinearCrossEntropy(torch.autograd.Function):
    """The output layer and the (smoothed) cross-entropy summed over rows, in one pass.

    Why: the (N, V) logits are the largest activation of the model (N ~ 1-5k target tokens,
    V = 8-32k), and the usual path keeps logits, log-probabilities and their gradients, several
    (N, V) tensors at once. Here the rows go through in chunks of CHUNK_LOGITS logits: each
    chunk's logits turn in place into d loss / d logits = softmax - ((1 - eps) onehot(y) + eps / V),
    which goes at once into the gradients of x and of the weight, so the backward only scales
    them. No (N, V) tensor ever exists; the chunk buffer has the same size every step, where an
    (N, V) one of a new size every batch fragmented the heap and set training's peak memory.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(
        ctx,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        target: Tensor,
        smoothing: float,
        gradients: bool,
        real: Tensor | None = None,
    ):
        need_x, need_w, need_b = (gradients and need for need in ctx.needs_input_grad[:3])
        need_b = need_b and bias is not None
        vocab, wide = weight.size(0), torch.promote_types(weight.dtype, torch.float32)
        # one copy for every chunk (AMP); on oneDNN, the prepacked transpose of the parameter
        weight_t = weight.to(wide).t() if need_x and not onednn_applies(x, weight) else None
        any_gradient = need_x or need_w or need_b
        grad_xs, grad_w, grad_b = [], None, None
        objective_sum = nll_sum = x.new_zeros((), dtype=wide)
        rows = max(1, CHUNK_LOGITS // vocab)
        for start in range(0, len(target), rows):
            xs, ys = x[start : start + rows], target[start : start + rows]
            # fp32 softmax under AMP; the logits' buffer becomes the softmax, then the gradient
            grad, nll, objective = _softmax_and_losses(
                parameter_linear(xs, weight, bias).to(wide), ys, smoothing
            )
            counted = None if real is None else real[start : start + rows, None].to(wide)
            if counted is not None:
                nll, objective = nll * counted[:, 0], objective * counted[:, 0]
            objective_sum, nll_sum = objective_sum + objective.sum(), nll_sum + nll.sum()
            if not any_gradient:
                continue
            grad.scatter_add_(1, ys[:, None], grad.new_full((len(ys), 1), smoothing - 1.0))
            if smoothing:
                grad.sub_(smoothing / vocab)
            if counted is not None:
                grad.mul_(counted)
            if need_b:
                grad_b = grad.sum(0) if grad_b is None else grad_b.add_(grad.sum(0))
            grad = as_operand(grad, weight)  # cast once for both products
            if need_x:
                grad_xs.append(
                    parameter_linear(grad, weight, transposed=True)
                    if weight_t is None
                    else linear(grad, weight_t, prepack=False)
                )
            if need_w:
                part = weight_gradient(grad, xs.to(wide), operands(weight)).to(wide)  # summed in fp32
                grad_w = part if grad_w is None else grad_w.add_(part)
        grad_x = (grad_xs[0] if len(grad_xs) == 1 else torch.cat(grad_xs)) if grad_xs else None
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        ctx.dtypes = x.dtype, weight.dtype
        ctx.mark_non_differentiable(nll_sum)
        return objective_sum, nll_sum

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_objective: Tensor, _grad_nll: Tensor):
        x_dtype, weight_dtype = ctx.dtypes
        grad_x, grad_w, grad_b = (
            None if g is None else (g * grad_objective).to(dtype)
            for g, dtype in zip(ctx.saved_tensors, (x_dtype, weight_dtype, weight_dtype), strict=True)
        )
        return grad_x, grad_w, grad_b, None, None, None, None
