"""The training objective: token-level cross-entropy with optional label smoothing, under full
teacher forcing or a scheduled teacher-forcing ratio."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from nmt.config import TrainConfig
from nmt.data.batching import Batch
from nmt.train.graphs import DecoderGraphs
from nmt.vocab import PAD


@dataclass
class LossSums:
    objective: Tensor  # summed training loss (label-smoothed if asked), for backward
    nll: Tensor  # summed negative log-likelihood (detached, on the device: reading it waits for a GPU)
    tokens: int  # target tokens (padding excluded)
    guided: Tensor | None = None  # guided alignment's [summed loss, linked rows] (`alignment_sums`)


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
    return LossSums(objective, nll.detach(), int(real.sum()))


def scheduled_sampling_logits(
    model: nn.Module, batch: Batch, ratio: float, generator: torch.Generator
) -> Tensor:
    """Logits (B, T, V) where each next input is the reference token with probability `ratio`,
    else the model's own greedy prediction (detached), drawn per sentence and step (scheduled
    sampling, Bengio et al. 2015). It needs the step-by-step path, whatever the decoder."""
    mem, state = model.encode(batch.src, batch.src_len)
    tgt_in = batch.tgt_in
    B, T = tgt_in.shape
    y, logits = tgt_in[:, 0], []
    for t in range(T):
        positions = torch.full((B,), t, dtype=torch.long, device=y.device)
        step_logits, state, _ = model.step(y, state, mem, positions)
        logits.append(step_logits)
        if t + 1 < T:
            use_reference = torch.rand(B, generator=generator).to(y.device) < ratio
            y = torch.where(use_reference, tgt_in[:, t + 1], step_logits.detach().argmax(-1))
    return torch.stack(logits, 1)


class TokenLoss(nn.Module):
    """A Seq2Seq and its training loss as one module, so that DDP's forward covers the output
    layer, which the fused loss applies itself (to the real target positions only). With
    `graphs`, the decoder's side of a training batch replays a CUDA graph."""

    def __init__(self, model: nn.Module, cfg: TrainConfig, graphs: DecoderGraphs | None = None):
        super().__init__()
        self.model, self.cfg, self.graphs = model, cfg, graphs

    def forward(
        self, batch: Batch, step: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """(summed objective, summed NLL, guided alignment's [summed loss, rows] or None); label
        smoothing, scheduled sampling and guided alignment only while the model trains."""
        training = self.model.training
        ratio = teacher_forcing_ratio(self.cfg, step) if training else 1.0
        smoothing = self.cfg.label_smoothing if training else 0.0
        if ratio < 1.0:
            logits = scheduled_sampling_logits(self.model, batch, ratio, generator)
            sums = loss_sums(logits, batch.tgt_out, smoothing)
            return sums.objective, sums.nll, None
        if self.graphs is not None and training:
            memory, mask, h0, c0 = self.model.annotate(batch.src, batch.src_len)
            return *self.graphs.loss(memory, h0, c0, mask, batch.tgt_in, batch.tgt_out), None
        real = batch.tgt_out != PAD
        pre_output, weights = self.model.features(batch.src, batch.src_len, batch.tgt_in)
        output_layer = self.model.decoder.output_layer
        objective, nll = output_layer.loss(pre_output[real], batch.tgt_out[real], smoothing)
        if batch.alignment is None or not training:
            return objective, nll, None
        guided = alignment_sums(weights, batch.alignment)
        return objective + self.cfg.guided_alignment.weight * guided[0], nll, guided.detach()


def alignment_sums(weights: Tensor, targets: Tensor) -> Tensor:
    """Guided alignment's cross-entropy between attention `weights` and link `targets` (both
    (B, T, S); a target row sums to 1, or to 0 where nothing is linked), summed over the linked
    rows, and their count: [loss, rows]. Zero when the attention puts all its mass on the links
    of each row as the targets spread it, larger the further it strays."""
    logs = torch.log(weights.float().clamp_min(1e-9))
    cross = -(targets * logs).sum(-1)
    rows = targets.sum(-1) > 0
    entropy = -(targets * torch.log(targets.clamp_min(1e-9))).sum(-1)  # the floor of `cross`
    return torch.stack([(cross - entropy)[rows].sum(), rows.sum().float()])


def batch_loss(objective: nn.Module, batch: Batch, step: int, generator: torch.Generator) -> LossSums:
    """The loss sums of `batch` through a TokenLoss (or its DDP wrapper), without waiting for
    the device: the NLL stays a tensor, the tokens were counted where the batch was made."""
    total, nll, guided = objective(batch, step, generator)
    return LossSums(total, nll.detach(), batch.n_tgt_tokens, guided)
