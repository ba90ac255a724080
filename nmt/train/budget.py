"""When a run stops: `train.max_steps`, `max_epochs`, `max_time` (validation included) or
`patience` validations without improvement, and which validations fit `valid_share`. Under
torchrun every process must stop and validate at the same step, so the clock is agreed on across
processes."""

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
        if cfg.max_time and distributed.any_true(
            self.clock.elapsed() + self.reserve() >= cfg.max_time, self.device
        ):
            return f"reached train.max_time ({cfg.max_time:g} s)"
        return ""

    def reserve(self) -> float:
        """Seconds kept back from `train.max_time` for what runs after training: the last
        validation, and with `average_last` the averaged model's, each taken to cost what the
        slowest so far did. It never shrinks, so the budget schedule's share only grows and a
        run that stopped on time stays stopped."""
        return self.progress.slowest_valid_seconds * (2 if self.cfg.average_last else 1)

    def validation_fits(self) -> bool:
        """Whether a scheduled validation runs under `train.valid_share`: one costing what the
        last did must keep the time spent validating within that share of the time so far. The
        first always runs; a slow machine validates less often rather than for longer."""
        share, p = self.cfg.valid_share, self.progress
        if not share or self.spent():  # the last validation always runs
            return True
        over = p.valid_seconds + p.last_valid_seconds > share * self.clock.elapsed()
        return not distributed.any_true(over, self.device)

    def steps_bought(self, seconds_per_step: float) -> int:
        """About how many steps `train.max_time` buys in all at `seconds_per_step`, validating
        aside (the `reserve` kept back, as `spent` keeps it)."""
        left = self.cfg.max_time - self.clock.elapsed() - self.reserve()
        return self.progress.step + max(int(left / seconds_per_step), 0)

    def patience_spent(self) -> bool:
        return bool(self.cfg.patience) and self.progress.bad_validations >= self.cfg.patience

    def early_stop(self) -> str:
        return f"early stopping: no improvement of valid {self.cfg.metric} in {self.cfg.patience} validations"

    def share(self, epochs: float) -> float:
        """The share (0-1) of the tightest budget used so far, `epochs` counting the current one
        in part. Time ends where the `reserve` begins (`spent`), so a budget schedule reaches its
        end as training does; the clock is averaged over the processes, so every
        replica sets the same learning rate."""
        cfg = self.cfg
        shares = [self.progress.step / cfg.max_steps]
        if cfg.max_epochs:
            shares.append(epochs / cfg.max_epochs)
        if cfg.max_time:
            sums = [self.clock.elapsed(), self.reserve()]
            seconds, reserved = distributed.all_reduce_sums(sums, self.device)
            world = distributed.rank_and_world()[1]
            shares.append(seconds / max(world * cfg.max_time - reserved, 1e-9))
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
