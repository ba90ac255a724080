"""The checkpoint life cycle of a run: best.pt follows improvements, the k best and the last n
snapshots are kept and nothing else, a damaged best.pt is rebuilt, last.pt is due on time."""

import time

import pytest

from nmt.checkpoint import FORMAT_VERSION, read_checkpoint, write_state
from nmt.train.checkpoints import CheckpointKeeper


def write(path, step: int) -> None:
    write_state(
        path, {"format_version": FORMAT_VERSION, "config": {}, "model": {}, "tokenizers": {}, "step": step}
    )


def validate(keeper: CheckpointKeeper, validations: list, step: int, value: float, improved: bool) -> None:
    """What the trainer does at a validation: last.pt first, then the keeper."""
    validations.append((step, value))
    write(keeper.directory / "last.pt", step)
    keeper.after_validation(validations, improved)


def kept(keeper: CheckpointKeeper) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in keeper.directory.glob("step-*.pt"))


def test_the_k_best_and_the_last_n_snapshots_are_kept(tmp_path):
    keeper, validations = CheckpointKeeper(tmp_path, keep_best=2, average_last=2, higher_is_better=True), []
    for step, bleu in ((1, 10.0), (2, 30.0), (3, 20.0), (4, 5.0), (5, 6.0)):
        validate(keeper, validations, step, bleu, improved=bleu == 30.0 or step == 1)
    assert kept(keeper) == [2, 3, 4, 5]  # best two (30, 20) and the last two
    assert read_checkpoint(tmp_path / "best.pt")["step"] == 2


def test_without_snapshots_only_best_and_last_are_written(tmp_path):
    keeper, validations = CheckpointKeeper(tmp_path, keep_best=1, average_last=0, higher_is_better=False), []
    validate(keeper, validations, 1, 3.0, improved=True)
    validate(keeper, validations, 2, 4.0, improved=False)
    assert kept(keeper) == [] and read_checkpoint(tmp_path / "best.pt")["step"] == 1


@pytest.mark.parametrize("snapshots", [True, False])
def test_a_damaged_best_is_rebuilt_from_the_best_snapshot_or_else_last(tmp_path, snapshots):
    keeper = CheckpointKeeper(
        tmp_path, keep_best=2 if snapshots else 1, average_last=0, higher_is_better=False
    )
    validations = []
    for step, ppl in ((1, 9.0), (2, 4.0), (3, 6.0)):
        validate(keeper, validations, step, ppl, improved=step < 3)
    assert keeper.repair_best(validations) == ""  # whole: nothing to do
    (tmp_path / "best.pt").write_bytes(b"torn")
    note = keeper.repair_best(validations)
    source = "step-2.pt" if snapshots else "last.pt"
    assert note.endswith(f"rebuilt it from {source}")
    assert read_checkpoint(tmp_path / "best.pt")["step"] == (2 if snapshots else 3)
    assert keeper.repair_best([]) == ""  # no validation yet: no best to rebuild


def test_last_is_due_every_so_many_minutes(tmp_path):
    keeper = CheckpointKeeper(tmp_path, 1, 0, True)
    assert not keeper.due(0) and not keeper.due(5)
    keeper.last_save = time.perf_counter() - 301
    assert keeper.due(5) and not keeper.due(0)  # 0: only at validations
    keeper.saved()
    assert not keeper.due(5)
