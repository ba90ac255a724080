"""When a run stops: each budget on its own, the tightest one's share, the last validation kept
inside max_time, which validations fit valid_share, patience, and a finished run that a raised
budget reopens."""

import pytest
import torch

from nmt.config import TrainConfig
from nmt.train.budget import Budget
from nmt.train.progress import Clock, Progress


class FixedClock(Clock):
    def __init__(self, progress: Progress, seconds: float):
        super().__init__(progress)
        self.seconds = seconds

    def elapsed(self) -> float:
        return self.seconds


def budget(seconds: float = 0.0, **train) -> tuple[Budget, Progress]:
    cfg = TrainConfig(**{"max_steps": 100, **train})
    progress = Progress()
    return Budget(cfg, progress, FixedClock(progress, seconds), torch.device("cpu")), progress


def test_each_budget_says_why_it_is_spent():
    steps, p = budget()
    assert steps.spent() == ""
    p.step = 100
    assert steps.spent() == "reached train.max_steps (100)"
    epochs, p = budget(max_epochs=2)
    p.epoch = 2
    assert epochs.spent() == "reached train.max_epochs (2)"
    assert budget(seconds=59.0, max_time=60)[0].spent() == ""
    assert budget(seconds=60.0, max_time=60)[0].spent() == "reached train.max_time (60 s)"


def test_the_share_is_that_of_the_tightest_budget():
    b, p = budget(seconds=30.0, max_time=120, max_epochs=4)
    p.step = 10
    assert b.share(epochs=1.0) == pytest.approx(0.25)  # time 0.25 = epochs 0.25 > steps 0.10
    assert b.share(epochs=3.0) == pytest.approx(0.75)
    p.step = 90
    assert b.share(epochs=1.0) == pytest.approx(0.9)


def test_max_time_keeps_room_for_the_last_validation():
    """A run stops when the last validation, costing what the slowest so far did, would end past
    max_time; the budget schedule then reaches its end where training stops, not after it."""
    b, p = budget(seconds=50.0, max_time=60)
    assert b.spent() == ""
    p.slowest_valid_seconds = 10.0
    assert b.spent() == "reached train.max_time (60 s)"
    p.finished = b.spent()  # on a resume it stays finished
    assert b.already_finished() == "reached train.max_time (60 s)"
    b, p = budget(seconds=25.0, max_time=60)
    p.slowest_valid_seconds = 10.0
    assert b.share(epochs=0.0) == pytest.approx(0.5)  # 25 of the 50 s left for training
    averaging, p = budget(seconds=25.0, max_time=60, average_last=3)
    p.slowest_valid_seconds = 10.0
    assert averaging.share(epochs=0.0) == pytest.approx(25 / 40)  # and as long for the average


def test_valid_share_skips_validations_that_would_pass_it():
    """Validating stays within the share of the time so far: the first validation always runs
    (nothing to estimate by), later ones only while one more of the last's cost fits."""
    assert budget(seconds=10.0)[0].validation_fits()  # 0: every scheduled validation runs
    b, p = budget(seconds=100.0, valid_share=0.1)
    assert b.validation_fits()
    p.valid_seconds = p.last_valid_seconds = 6.0
    assert not b.validation_fits()  # 6 + 6 > 10 of 100 s
    b.clock.seconds = 130.0
    assert b.validation_fits()  # 12 <= 13


def test_patience_counts_validations_without_improvement():
    b, p = budget(patience=2)
    for value, improved in ((30.0, True), (29.0, False)):
        p.add_validation(value, improved)
    assert not b.patience_spent()
    p.add_validation(28.0, False)
    assert b.patience_spent()
    assert b.early_stop() == "early stopping: no improvement of valid bleu in 2 validations"
    assert not budget(patience=0)[0].patience_spent()  # 0: no early stopping


def test_a_finished_run_stays_finished_until_a_budget_is_raised():
    b, p = budget()
    p.step, p.finished = 100, "reached train.max_steps (100)"
    assert b.already_finished() == "reached train.max_steps (100)"
    b.cfg.max_steps = 200  # `--resume --set train.max_steps=200`
    assert b.already_finished() == ""
    assert p.finished == ""  # reopened: it trains on
    stopped, p = budget(patience=1)
    p.add_validation(1.0, False)
    p.finished = "early stopping: no improvement of valid bleu in 1 validations"
    assert stopped.already_finished() == p.finished  # patience still spent: nothing to do
