"""Learning-rate schedules, one class each, registered by name. Each sees the events it needs
(steps with the share of the budget spent, epoch ends, validation results) and keeps its state in
the checkpoint."""

from __future__ import annotations

import torch
from torch.autograd.graph import increment_version

from nmt.config import TrainConfig
from nmt.registry import Registry


class Schedule(Registry):
    uses_budget = False  # True: on_step needs the share of the budget spent (the trainer computes it)

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig):
        self.optimizer, self.cfg = optimizer, cfg
        self.base_lr = cfg.lr

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def on_step(self, step: int, spent: float = 0.0) -> None:
        """Called after optimiser step `step` (1-based); `spent` is the share of the run's budget
        used so far (0-1; computed only for schedules that set `uses_budget`)."""

    def on_epoch_end(self, epoch: int) -> None:
        """Called when epoch `epoch` (0-based) has been consumed."""

    def on_validation(self, improved: bool) -> None:
        """Called after each validation, with whether the watched metric improved."""

    def state_dict(self) -> dict:
        return {"lr": self.lr}

    def load_state_dict(self, state: dict) -> None:
        self.set_lr(state["lr"])


class Constant(Schedule, name="constant"):
    """The learning rate never changes."""


class Plateau(Schedule, name="plateau"):
    """Multiply by `decay_factor` after `decay_patience` validations without improvement."""

    def __init__(self, optimizer, cfg):
        super().__init__(optimizer, cfg)
        self.bad = 0

    def on_validation(self, improved):
        self.bad = 0 if improved else self.bad + 1
        if self.bad >= self.cfg.decay_patience:
            self.set_lr(max(self.cfg.min_lr, self.lr * self.cfg.decay_factor))
            self.bad = 0

    def state_dict(self):
        return {"lr": self.lr, "bad": self.bad}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.bad = state["bad"]


class StepDecay(Schedule, name="step"):
    """Luong et al. (2015) §4.1: after epoch `decay_start_epoch`, halve (decay_factor) every epoch."""

    def on_epoch_end(self, epoch):
        if epoch + 1 >= self.cfg.decay_start_epoch:
            self.set_lr(max(self.cfg.min_lr, self.lr * self.cfg.decay_factor))


class InverseSqrt(Schedule, name="inverse_sqrt"):
    """Linear warm-up to `lr` over `warmup_steps`, then lr * sqrt(warmup / step)."""

    def __init__(self, optimizer, cfg):
        super().__init__(optimizer, cfg)
        self.on_step(0)

    def on_step(self, step, spent=0.0):
        warmup = max(1, self.cfg.warmup_steps)
        scale = (step + 1) / warmup if step + 1 < warmup else (warmup / (step + 1)) ** 0.5
        self.set_lr(max(self.cfg.min_lr, self.base_lr * scale))


class Budget(Schedule, name="budget"):
    """Linear decay from `lr` to `min_lr` over the run's budget: max_steps, max_epochs or max_time,
    whichever runs out first. A run that knows when it ends can start high and still end
    annealed (Li et al. 2020, "Budgeted training"); docs/recipe.md measured it: worse than a
    constant rate at lr 1e-3, the best 20-minute run at 3e-3."""

    uses_budget = True

    def on_step(self, step, spent=0.0):
        self.set_lr(max(self.cfg.min_lr, self.base_lr * (1.0 - min(1.0, spent))))


FUSED_DEVICES = ("cuda", "cpu")  # where torch has every optimiser's fused update
OPTIMIZERS = {
    "adam": lambda params, c, fused: torch.optim.Adam(
        params, lr=c.lr, weight_decay=c.weight_decay, fused=fused
    ),
    "adamw": lambda params, c, fused: torch.optim.AdamW(
        params, lr=c.lr, weight_decay=c.weight_decay, fused=fused
    ),
    "sgd": lambda params, c, fused: torch.optim.SGD(
        params, lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay, fused=fused
    ),
}


def build_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser of `cfg`; weight decay, when set, spares 1-D parameters (biases, gains).
    Its fused form on CUDA and CPU: the whole update in a kernel or two, where the default runs
    several per parameter and step (Adam over the bench model's 13.2M parameters on a Zen 3 EPYC:
    6-10 ms a step against 37-64 ms, 5% of a training step at two threads). A run resumed from a
    checkpoint of the unfused form keeps it (the optimiser's state says which), so it goes on
    exactly as it would have."""
    params = list(params)
    fused = True if params and params[0].device.type in FUSED_DEVICES else None
    optimizer = OPTIMIZERS[cfg.optimizer](parameter_groups(params, cfg.weight_decay), cfg, fused)
    optimizer.register_step_post_hook(_mark_updated)
    return optimizer


def _mark_updated(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    """Bump the weights' versions after a fused update, which writes them without (torch 2.13 on
    a CPU): the products' prepacked weights are keyed on the version, so without the bump
    training would go on multiplying by the weights it started with."""
    for group in optimizer.param_groups:
        if group.get("fused"):
            increment_version(group["params"])


def parameter_groups(params: list, weight_decay: float) -> list:
    """Without weight decay, one group as before, so the checkpoints of such runs still resume
    (an optimiser's state holds its groups); with it, two: the weight matrices decay, the 1-D
    parameters (biases, gains) do not, as is conventional: pulling an offset or a scale towards
    0 is no regularisation."""
    if weight_decay == 0:
        return params
    matrices = [p for p in params if p.ndim >= 2]
    vectors = [p for p in params if p.ndim < 2]
    return [{"params": matrices}, {"params": vectors, "weight_decay": 0.0}]
