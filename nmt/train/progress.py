"""What a run has done so far besides its weights: the counters a resume continues from, the
clock across sessions, and the loss window between two log lines."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt.rundir import CHECKPOINTS

if TYPE_CHECKING:
    from torch import Tensor

HIGHER_IS_BETTER = {"bleu": True, "ppl": False, "loss": False}


@dataclass
class Progress:
    """Everything besides weights that a resumed run needs to continue where it stopped."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already consumed
    elapsed: float = 0.0  # training wall-clock seconds before this session
    validations: list[tuple[int, float]] = field(default_factory=list)  # (step, metric value)
    best: float | None = None
    bad_validations: int = 0  # since the last improvement, for early stopping
    skipped_steps: int = 0  # AMP overflow steps the scaler skipped
    valid_seconds: float = 0.0  # wall-clock seconds spent validating, every session included
    last_valid_seconds: float = 0.0  # what the last validation took: the next one's estimate
    slowest_valid_seconds: float = 0.0  # kept back from max_time for the last validation
    finished: str = ""  # why the run ended, once it has: a resume then has nothing to do

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Progress:
        """The progress a checkpoint stored (its validations come back as lists)."""
        progress = dict(state)
        progress["validations"] = [tuple(v) for v in progress["validations"]]
        return cls(**progress)

    def improves(self, value: float, higher_is_better: bool) -> bool:
        """Whether a validation `value` beats the best so far (the first one always does)."""
        return self.best is None or (value > self.best if higher_is_better else value < self.best)

    def add_validation(self, value: float, improved: bool) -> None:
        self.validations.append((self.step, value))
        self.best = value if improved else self.best
        self.bad_validations = 0 if improved else self.bad_validations + 1


class Clock:
    """Wall-clock seconds of training so far, across resumed sessions: the seconds the
    checkpoint had (`progress.elapsed`) plus this session's."""

    def __init__(self, progress: Progress, session_start: float | None = None):
        self.progress = progress
        self.session_start = time.perf_counter() if session_start is None else session_start

    def elapsed(self) -> float:
        return self.progress.elapsed + time.perf_counter() - self.session_start


@dataclass
class LogWindow:
    """Training NLL and target tokens since the last log line (and guided alignment's summed
    loss and linked rows), and when the window started."""

    nll: float | Tensor = 0.0  # a tensor on the training device once a step is added: read when logged
    tokens: int = 0
    guided: float | Tensor = 0.0
    guided_rows: float | Tensor = 0.0
    start: float = field(default_factory=time.perf_counter)

    def add(self, nll: Tensor, tokens: int, guided: Tensor | None = None) -> None:
        self.nll, self.tokens = self.nll + nll, self.tokens + tokens
        if guided is not None:
            self.guided, self.guided_rows = self.guided + guided[0], self.guided_rows + guided[1]

    def sums(self) -> list:
        """[NLL, tokens, guided loss, rows]: what a checkpoint keeps and what torchrun's
        processes add up (a checkpoint from before guided alignment keeps the first two)."""
        return [float(self.nll), self.tokens, float(self.guided), float(self.guided_rows)]

    def entry(self, sums: list, progress: Progress, lr: float) -> dict[str, Any]:
        """The log line's metrics entry: the window's loss, perplexity and speed (`sums` added
        up over the processes), and guided alignment's loss per linked row when there is one."""
        nll, tokens, guided, rows = sums
        rate, loss = tokens / (time.perf_counter() - self.start), nll / tokens
        p = progress
        entry = {"step": p.step, "epoch": p.epoch, "loss": loss, "ppl": math.exp(min(loss, 50))}
        if rows:
            entry["alignment_loss"] = guided / rows
        return entry | {"lr": lr, "tgt_tokens_per_s": rate, "skipped_steps": p.skipped_steps}


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    best: float | None
    metric: str
    stopped: str  # why training ended
    last_valid: dict
    rank: int  # 0 for the process that reports under torchrun
    epochs: float = 0.0  # epochs trained, the current one counted in part
    seconds: float = 0.0  # wall-clock seconds of the run, validation included
    valid_seconds: float = 0.0  # of which validating

    def summary(self) -> str:
        """The one line `nmt train` ends with: the budget spent and what it bought."""
        best = "none" if self.best is None else f"{self.best:.2f}"
        share = self.valid_seconds / self.seconds if self.seconds else 0.0
        return (
            f"trained {self.steps} steps ({self.stopped}): {self.epochs:.2f} epochs in "
            f"{self.seconds:.0f} s, {share:.0%} of it validating; best valid {self.metric} {best}; "
            f"checkpoints in {self.run_dir / CHECKPOINTS}"
        )
