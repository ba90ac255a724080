"""`nmt average`: the mean of a run's last k validation snapshots, or of named checkpoints."""

from __future__ import annotations

from pathlib import Path

from nmt.checkpoint import average_checkpoints, write_state
from nmt.errors import NMTError
from nmt.rundir import CHECKPOINTS


def run_snapshots(run_dir: Path, last: int) -> list[Path]:
    """The last `last` validation snapshots (`checkpoints/step-N.pt`) of a run, oldest first."""
    found = sorted((run_dir / CHECKPOINTS).glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    if len(found) < last:
        raise NMTError(
            f"{run_dir}: {len(found)} step-N.pt snapshots, fewer than --last {last}; runs keep them "
            f"with train.average_last or train.keep_best above 1"
        )
    return found[-last:]


def average(inputs: list[Path], last: int | None, output: Path) -> str:
    """Average `inputs` (checkpoint files, or one run directory with `last`) into `output`;
    returns a line saying what was averaged."""
    if len(inputs) == 1 and inputs[0].is_dir():
        if last is None:
            raise NMTError(f"{inputs[0]}: a run directory needs --last K (how many snapshots to average)")
        paths = run_snapshots(inputs[0], last)
    elif last is not None:
        raise NMTError("--last K goes with one run directory, not with checkpoint files")
    else:
        paths = inputs
    if any(output.resolve() == p.resolve() for p in paths if p.exists()):
        raise NMTError(f"{output}: is one of the checkpoints being averaged; choose another --output")
    write_state(output, average_checkpoints(paths))
    return f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {output}"
