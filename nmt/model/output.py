"""The output layer p(y_t) = softmax(W_s x_t): one owner for the logits and for the training loss.

Dropout on the pre-output vector, then the projection to the vocabulary, are written once here,
whether a search asks for logits or training asks for the loss of the real target positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.model.linear import linear


class OutputLayer(nn.Linear):
    """Dropout then W_s (Luong eq. 6; Bahdanau's final layer after the deep output)."""

    def __init__(self, in_features: int, vocab_size: int, dropout: float):
        super().__init__(in_features, vocab_size)
        self.p = dropout

    def forward(self, pre_output: Tensor) -> Tensor:
        """Pre-output vectors (..., P) -> logits (..., V)."""
        return linear(F.dropout(pre_output, self.p, self.training), self.weight, self.bias)

    def loss(self, pre_output: Tensor, target: Tensor, label_smoothing: float = 0.0) -> tuple[Tensor, Tensor]:
        """Summed (label-smoothed) cross-entropy and summed NLL of `target` (N,) given the
        pre-output vectors (N, P) of the real target positions, without keeping the logits."""
        x = F.dropout(pre_output, self.p, self.training)
        return LinearCrossEntropy.apply(x, self.weight, self.bias, target, label_smoothing)


class LinearCrossEntropy(torch.autograd.Function):
    """The output layer and the (smoothed) cross-entropy summed over rows, in one pass.

    Why: the (N, V) logits are the largest activation of the model (N ~ 1-3k target tokens,
    V = 8-32k), and the usual path keeps logits, log-probabilities and their gradients, several
    (N, V) tensors at once. Here the forward turns the logits buffer in place into the gradient
    d loss / d logits = softmax - ((1 - eps) onehot(y) + eps / V), so one (N, V) buffer lives
    until backward, which is then three matrix products.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, smoothing: float):
        logits = linear(x, weight, bias, prepack=False)  # a new weight every training step
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp32 softmax under AMP
        picked = logits.gather(1, target[:, None]).squeeze(1)
        mean = logits.mean(-1) if smoothing else None
        top = logits.amax(-1, keepdim=True)
        grad = logits.sub_(top).exp_()
        total = grad.sum(-1, keepdim=True)
        grad.div_(total)  # softmax
        log_z = (top + total.log()).squeeze(1)
        nll = log_z - picked
        objective = nll if mean is None else (1 - smoothing) * nll + smoothing * (log_z - mean)
        grad.scatter_add_(1, target[:, None], grad.new_full((len(target), 1), smoothing - 1.0))
        if smoothing:
            grad.sub_(smoothing / grad.size(1))
        ctx.save_for_backward(x, weight, grad)
        ctx.has_bias = bias is not None
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return objective.sum(), nll_sum

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_objective: Tensor, _grad_nll: Tensor):
        x, weight, grad = ctx.saved_tensors
        grad_x = linear(grad, weight.to(grad.dtype).t(), prepack=False).mul_(grad_objective).to(x.dtype)
        grad_weight = (
            linear(grad.t(), x.to(grad.dtype).t(), prepack=False).mul_(grad_objective).to(weight.dtype)
        )
        grad_bias = grad.sum(0).mul_(grad_objective).to(weight.dtype) if ctx.has_bias else None
        return grad_x, grad_weight, grad_bias, None, None
