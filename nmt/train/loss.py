"""The training objective: token-level cross-entropy with optional label smoothing, under full
teacher forcing or a scheduled teacher-forcing ratio."""

from __future__ import annotations

from dataclasses import dataclass

import torch
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


def batch_loss(
    model: nn.Module, batch: Batch, cfg: TrainConfig, step: int, generator: torch.Generator
) -> LossSums:
    ratio = teacher_forcing_ratio(cfg, step) if model.training else 1.0
    logits, _ = model(batch.src, batch.src_len, batch.tgt_in, ratio, generator)
    return loss_sums(logits, batch.tgt_out, cfg.label_smoothing if model.training else 0.0)
