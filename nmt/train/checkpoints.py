"""Which checkpoints a run keeps: last.pt, best.pt, the k best and the last n validation
snapshots (step-N.pt), and the average of the last n."""

from __future__ import annotations

from pathlib import Path

import torch

from nmt.checkpoint import average_checkpoints
from nmt.fileio import atomic_copy
from nmt.rundir import BEST, LAST


class CheckpointKeeper:
    def __init__(self, directory: Path, keep_best: int, average_last: int, higher_is_better: bool):
        self.directory = Path(directory)
        self.keep_best, self.average_last = keep_best, average_last
        self.sign = 1.0 if higher_is_better else -1.0

    def snapshot(self, step: int) -> Path:
        return self.directory / f"step-{step}.pt"

    @property
    def keeps_snapshots(self) -> bool:
        return self.keep_best > 1 or self.average_last > 1

    def after_validation(self, validations: list[tuple[int, float]], improved: bool) -> None:
        """`last.pt` has just been written for the newest validation; copy and prune the rest."""
        step = validations[-1][0]
        if improved:
            atomic_copy(self.directory / LAST, self.directory / BEST)
        if not self.keeps_snapshots:
            return
        atomic_copy(self.directory / LAST, self.snapshot(step))
        ranked = sorted(validations, key=lambda sv: -self.sign * sv[1])
        keep = {s for s, _ in ranked[: self.keep_best]} | {s for s, _ in validations[-self.average_last :]}
        for path in self.directory.glob("step-*.pt"):
            if int(path.stem.split("-")[1]) not in keep:
                path.unlink()

    def average(self, validations: list[tuple[int, float]]) -> dict[str, torch.Tensor] | None:
        """Mean weights of the last `average_last` validation snapshots (None if fewer than 2)."""
        steps = [s for s, _ in validations[-self.average_last :]]
        if self.average_last < 2 or len(steps) < 2:
            return None
        return average_checkpoints([self.snapshot(step) for step in steps])["model"]
