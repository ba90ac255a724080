"""`nmt train` as a function: a new run, or the continuation of one, and the line it ends with.

Everything that can fail (config, data, model) is checked before a new run directory is
created, and it is created whole; a run is locked against a second process while one trains in it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from nmt.checkpoint import read_checkpoint
from nmt.config import load_config
from nmt.errors import NMTError
from nmt.rundir import CHECKPOINTS, CONFIG, LAST, RunLock, check_new_run_dir, prepare_run_dir, resume_config
from nmt.train import distributed
from nmt.train.progress import TrainResult
from nmt.train.trainer import Trainer


def train(
    config: str | Path | None,
    overrides: list[str] | dict[str, Any] | None,
    out: str | Path | None,
    resume: str | Path | None,
    quiet: bool,
) -> TrainResult:
    """`nmt train`: a new run in `out`, or the continuation of the run in `resume`. `overrides`
    are `--set` strings, or a {"section.key": value} dict (values as Python objects)."""
    if isinstance(overrides, dict):
        overrides = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    distributed.init()
    rank0 = distributed.rank_and_world()[0] == 0
    with contextlib.ExitStack() as held:  # left in reverse: the lock first, then the processes
        held.callback(distributed.shutdown)
        if resume:
            trainer = _resumed(Path(resume), config, overrides or [], quiet, rank0, held)
        else:
            trainer = _started(config, overrides or [], out, quiet, rank0, held)
        return trainer.train()


def _started(
    config: str | Path | None,
    overrides: list[str],
    out: str | Path | None,
    quiet: bool,
    rank0: bool,
    held: contextlib.ExitStack,
) -> Trainer:
    """A trainer for a new run: data and model are ready before the folder exists."""
    if config is None:
        raise NMTError("train: give --config FILE (or --resume RUN_DIR)")
    cfg = load_config(config, overrides)
    run_dir = Path(out) if out else Path("runs") / Path(config).stem
    check_new_run_dir(run_dir)
    trainer = Trainer(cfg, run_dir, quiet=quiet)
    if rank0:
        prepare_run_dir(run_dir, cfg)
    distributed.barrier()
    if rank0:
        held.callback(RunLock(run_dir).release)
    return trainer


def _resumed(
    run_dir: Path,
    config: str | Path | None,
    overrides: list[str],
    quiet: bool,
    rank0: bool,
    held: contextlib.ExitStack,
) -> Trainer:
    """A trainer that continues the run in `run_dir` from its last.pt (or starts it afresh when
    it was killed before its first checkpoint), with the budgets and reporting `overrides` allow."""
    if rank0 and (run_dir / CONFIG).is_file():
        held.callback(RunLock(run_dir).release)
    last = run_dir / CHECKPOINTS / LAST
    state = read_checkpoint(last) if last.is_file() else None
    cfg, changes = resume_config(
        run_dir, config, overrides, write=rank0, checkpoint_config=state and state["config"]
    )
    trainer = Trainer(cfg, run_dir, quiet=quiet, resume=state is not None, checkpoint=state)
    trainer.notes += [f"resuming with {c}" for c in changes]
    if state is None:
        trainer.notes.append("no checkpoint yet: starting the run afresh from its config")
    return trainer
