"""When a run stops: `train.max_steps`, `max_epochs`, `max_time` (validation included) or
`patience` validations without improvement. Under torchrun every process must stop at the same
step, so the clock is agreed on across processes."""

from __future__ import annotations

import torch

from nmt.config import TrainConfig
from nmt.train import distributed
from nmt.train.progress import Clock, Progress


class Budget:
    def __init__(self, cfg: TrainConfig, progress: Progress, clock: Clock, device: torch.device):
        self.cfg, self.progress, self.clock, self.device = cfg, progress, clock, device

    def spent(self) -> str:
        """Why training must stop now ('' while every budget lasts)."""
        cfg, p = self.cfg, self.progress
        if p.step >= cfg.max_steps:
            return f"reached train.max_steps ({cfg.max_steps})"
        if cfg.max_epochs and p.epoch >= cfg.max_epochs:
            return f"reached train.max_epochs ({cfg.max_epochs})"
        if cfg.max_time and distributed.any_true(self.clock.elapsed() >= cfg.max_time, self.device):
            return f"reached train.max_time ({cfg.max_time:g} s)"
        return ""

    def patience_spent(self) -> bool:
        return bool(self.cfg.patience) and self.progress.bad_validations >= self.cfg.patience

    def early_stop(self) -> str:
        return f"early stopping: no improvement of valid {self.cfg.metric} in {self.cfg.patience} validations"

    def share(self, epochs: float) -> float:
        """The share (0-1) of the tightest budget used so far, `epochs` counting the current one
        in part; the clock is averaged over the processes, so every replica sets the same
        learning rate."""
        cfg = self.cfg
        shares = [self.progress.step / cfg.max_steps]
        if cfg.max_epochs:
            shares.append(epochs / cfg.max_epochs)
        if cfg.max_time:
            (seconds,) = distributed.all_reduce_sums([self.clock.elapsed()], self.device)
            shares.append(seconds / distributed.rank_and_world()[1] / cfg.max_time)
        return max(shares)

    def already_finished(self) -> str:
        """Why a resumed run has nothing left to do ('' when it has: a budget was raised, which
        reopens the run)."""
        p = self.progress
        if not p.finished:
            return ""
        if reason := self.spent():
            return reason
        if self.patience_spent():
            return p.finished
        p.finished = ""
        return ""
