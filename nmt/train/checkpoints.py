"""The checkpoint life cycle of a run: last.pt, best.pt, the k best and the last n validation
snapshots (step-N.pt), the average of the last n, a damaged best.pt rebuilt, and the random
state of every process that a resume needs besides the weights."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from nmt.checkpoint import TRANSLATING, average_checkpoints, read_checkpoint
from nmt.config import TrainConfig
from nmt.errors import NMTError
from nmt.fileio import atomic_copy
from nmt.rundir import BEST, LAST
from nmt.train import distributed
from nmt.train.progress import HIGHER_IS_BETTER


class CheckpointKeeper:
    def __init__(self, directory: Path, keep_best: int, average_last: int, higher_is_better: bool):
        self.directory = Path(directory)
        self.keep_best, self.average_last = keep_best, average_last
        self.sign = 1.0 if higher_is_better else -1.0
        self.last_save = time.perf_counter()

    @classmethod
    def of(cls, directory: Path, train: TrainConfig) -> CheckpointKeeper:
        """The keeper a run's `train` settings ask for."""
        return cls(directory, train.keep_best, train.average_last, HIGHER_IS_BETTER[train.metric])

    @property
    def higher_is_better(self) -> bool:
        return self.sign > 0

    def saved(self) -> None:
        self.last_save = time.perf_counter()

    def due(self, minutes: float) -> bool:
        """Whether last.pt is due (every `minutes`); rank 0's clock decides for every process,
        since saving gathers them all."""
        rank0 = distributed.rank_and_world()[0] == 0
        late = rank0 and bool(minutes) and time.perf_counter() - self.last_save >= 60 * minutes
        return distributed.broadcast_from_rank0(late)

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

    def repair_best(self, validations: list[tuple[int, float]]) -> str:
        """A best.pt that is missing, unreadable or damaged (a crash or a full disk while writing
        it) is rebuilt from the best validation's snapshot if one was kept, else from last.pt;
        one that is whole but older than the best validation (a full disk stopped its copy from
        last.pt) is brought up to date when a file of that step exists. Returns a note saying
        so ('' when best.pt is current or no validation has run)."""
        if not validations:
            return ""
        best, best_step = self.directory / BEST, max(validations, key=lambda sv: self.sign * sv[1])[0]
        whole, step = _saved_at(best)
        if whole and step in (best_step, None):  # None: a checkpoint that does not say
            return ""
        sources = {path: _saved_at(path) for path in (self.snapshot(best_step), self.directory / LAST)}
        source = next((path for path, (_, at) in sources.items() if at == best_step), None)
        if source is None and whole:
            return ""  # the best weights are gone: keep the older best
        source = source or next((path for path, (ok, _) in sources.items() if ok), self.directory / LAST)
        atomic_copy(source, best)
        state = "older than the best validation" if whole else "missing or damaged"
        return f"{best} was {state}; rebuilt it from {source.name}"

    def average(self, validations: list[tuple[int, float]]) -> dict[str, torch.Tensor] | None:
        """Mean weights of the last `average_last` validation snapshots (None if fewer than 2)."""
        steps = [s for s, _ in validations[-self.average_last :]]
        if self.average_last < 2 or len(steps) < 2:
            return None
        return average_checkpoints([self.snapshot(step) for step in steps])["model"]


def _saved_at(path: Path) -> tuple[bool, int | None]:
    """Whether `path` is a whole checkpoint, and the step it was saved at (None if unknown)."""
    try:
        state = read_checkpoint(path, mmap=True, entries=TRANSLATING)
    except NMTError:
        return False, None
    progress = state.get("progress")
    return True, progress.get("step") if isinstance(progress, dict) else None


def rng_state(generator: torch.Generator) -> dict[str, object]:
    """This process's random state: torch's, the teacher-forcing coins', CUDA's."""
    rng = {"torch": torch.get_rng_state(), "teacher_forcing": generator.get_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def rng_record(states: list[dict]) -> dict:
    """The `rng` entry of a checkpoint from every process's state: the first process's, and all
    of them under torchrun (replicas draw different dropout masks and coins)."""
    return states[0] | ({"processes": states} if len(states) > 1 else {})


def restore_rng(rng: dict, generator: torch.Generator, rank: int, world: int) -> None:
    """The random state a checkpoint stored: each process its own when it holds one per process
    of this run (replicas draw different dropout masks and coins), else the first process's."""
    if len(rng.get("processes", [])) == world:
        rng = rng["processes"][rank]
    torch.set_rng_state(rng["torch"].cpu())
    generator.set_state(rng["teacher_forcing"].cpu())
    if torch.cuda.is_available() and "cuda" in rng:
        torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
