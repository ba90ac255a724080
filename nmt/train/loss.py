"""The training objective: token-level cross-entropy with optional label smoothing, under full
teacher forcing or a scheduled teacher-forcing ratio."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import TrainConfig
from nmt.data.batching import Batch
from nmt.data.tokenizer import PAD


@dataclass
class LossSums:
    objective: Tensor  # summed training loss (label-smoothed if asked), for backward
    nll: float  # summed negative log-likelihood, for reporting loss per token and perplexity
    tokens: int  # target tokens (padding excluded)


def teacher_forcing_ratio(cfg: TrainConfig, step: int) -> float:
    """The ratio at `step`, moving linearly to `teacher_forcing_final` by `max_steps` if set."""
    if cfg.teacher_forcing_final is None:
        return cfg.teacher_forcing_ratio
    progress = min(1.0, step / max(1, cfg.max_steps))
    return cfg.teacher_forcing_ratio + progress * (cfg.teacher_forcing_final - cfg.teacher_forcing_ratio)


def loss_sums(logits: Tensor, target: Tensor, label_smoothing: float) -> LossSums:
    """(1 - eps) * NLL + eps * mean over the vocabulary of -log p (as torch's label_smoothing),
    summed over real target tokens; computed in fp32 from one log-softmax."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    real = target != PAD
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(~real, 0.0).sum()
    objective = nll
    if label_smoothing:
        uniform = -logp.mean(-1).masked_fill(~real, 0.0).sum()
        objective = (1 - label_smoothing) * nll + label_smoothing * uniform
    return LossSums(objective, float(nll.detach()), int(real.sum()))


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
        logits = F.linear(x, weight, bias)
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
        grad_x = (grad @ weight.to(grad.dtype)).mul_(grad_objective).to(x.dtype)
        grad_weight = (grad.t() @ x.to(grad.dtype)).mul_(grad_objective).to(weight.dtype)
        grad_bias = grad.sum(0).mul_(grad_objective).to(weight.dtype) if ctx.has_bias else None
        return grad_x, grad_weight, grad_bias, None, None


class TokenLoss(nn.Module):
    """A Seq2Seq and its training loss as one module, so that DDP's forward covers the output
    layer, which the fused loss applies itself (to the real target positions only)."""

    def __init__(self, model: nn.Module, cfg: TrainConfig):
        super().__init__()
        self.model, self.cfg = model, cfg

    def forward(self, batch: Batch, step: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """(summed objective, summed NLL, target tokens); label smoothing and scheduled sampling
        only while the model trains."""
        training = self.model.training
        ratio = teacher_forcing_ratio(self.cfg, step) if training else 1.0
        smoothing = self.cfg.label_smoothing if training else 0.0
        real = batch.tgt_out != PAD
        if ratio < 1.0:  # scheduled sampling feeds back every step's logits
            logits, _ = self.model(batch.src, batch.src_len, batch.tgt_in, ratio, generator)
            sums = loss_sums(logits, batch.tgt_out, smoothing)
            return sums.objective, torch.tensor(sums.nll), real.sum()
        pre_output, _ = self.model.features(batch.src, batch.src_len, batch.tgt_in)
        decoder = self.model.decoder
        layer = decoder.output_layer
        objective, nll = LinearCrossEntropy.apply(
            decoder.dropout(pre_output[real]), layer.weight, layer.bias, batch.tgt_out[real], smoothing
        )
        return objective, nll, real.sum()


def batch_loss(objective: nn.Module, batch: Batch, step: int, generator: torch.Generator) -> LossSums:
    """The loss sums of `batch` through a TokenLoss (or its DDP wrapper)."""
    total, nll, tokens = objective(batch, step, generator)
    return LossSums(total, float(nll), int(tokens))
