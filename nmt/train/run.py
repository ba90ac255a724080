"""`nmt train` as a function: a new run, or the continuation of one, and the line it ends with.

Everything that can fail (config, data, model, where the run folder goes) is checked before a
new run directory is created, and it is created whole; a run is locked against a second process
while one trains in it. A signal during start-up stops it and undoes what it began
(`nmt.train.signals`): a new run's folder is removed.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from nmt.checkpoint import read_checkpoint
from nmt.config import load_config
from nmt.errors import NMTError
from nmt.plugins import require
from nmt.rundir import CHECKPOINTS, CONFIG, LAST, RunLock, check_new_run_dir, prepare_run_dir, resume_config
from nmt.train import distributed
from nmt.train.finetune import checkpoint_config, finetuned_name
from nmt.train.progress import TrainResult
from nmt.train.signals import Interrupted, StopRequest, stop_requests
from nmt.train.trainer import Trainer


def train(
    config: str | Path | None,
    overrides: list[str] | dict[str, Any] | None,
    out: str | Path | None,
    resume: str | Path | None,
    quiet: bool,
    init_from: str | Path | None = None,
    plugins: list[Path] | None = None,
) -> TrainResult:
    """`nmt train`: a new run in `out`, or the continuation of the run in `resume`. `overrides`
    are `--set` strings, or a {"section.key": value} dict (values as Python objects). `init_from`:
    fine-tune that checkpoint (`train.init_from`; without `config`, under the checkpoint's own).
    SIGINT or SIGTERM before the first step raises `Interrupted` (exit 130 or 143) with no run
    left behind."""
    if isinstance(overrides, dict):
        overrides = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    if init_from is not None:
        if resume:
            raise NMTError("train: --init-from starts a new run; --resume continues one (give one of them)")
        overrides = [*(overrides or []), f"train.init_from={json.dumps(str(init_from))}"]
    made: list[RunLock] = []  # the new run's lock, once this process has made its folder
    try:
        with stop_requests(starting=True) as request:
            return _train(config, overrides or [], out, resume, quiet, request, made, init_from, plugins)
    except KeyboardInterrupt as stop:  # start-up: from the first step the trainer says Interrupted
        for lock in made:
            lock.discard()
        raise Interrupted.starting(stop, resume) from None
    finally:
        for lock in made:
            lock.release()


def _train(
    config: str | Path | None,
    overrides: list[str],
    out: str | Path | None,
    resume: str | Path | None,
    quiet: bool,
    request: StopRequest,
    made: list[RunLock],
    init_from: str | Path | None,
    plugins: list[Path] | None = None,
) -> TrainResult:
    """`train` under its start-up `request`: a stop a library swallowed is raised again at its
    checks, before the run folder is made and before training begins."""
    distributed.init()
    rank0 = distributed.rank_and_world()[0] == 0
    with contextlib.ExitStack() as held:  # left in reverse: a resumed run's lock, then the processes
        held.callback(distributed.shutdown)
        if resume:
            trainer = _resumed(Path(resume), config, overrides, quiet, rank0, held, plugins)
        else:
            trainer = _started(config, overrides, out, quiet, rank0, request, made, init_from, plugins)
        request.check()
        try:
            return trainer.train()
        finally:
            del trainer  # its DDP wrapper holds the process group: gone before `shutdown` ends it


def _started(
    config: str | Path | None,
    overrides: list[str],
    out: str | Path | None,
    quiet: bool,
    rank0: bool,
    request: StopRequest,
    made: list[RunLock],
    init_from: str | Path | None,
    plugins: list[Path] | None = None,
) -> Trainer:
    """A trainer for a new run: data and model are ready before the folder exists; its lock goes
    into `made`."""
    if config is None and init_from is None:
        raise NMTError("train: give --config FILE (or --resume RUN_DIR, or --init-from CHECKPOINT)")
    cfg = (
        load_config(config, overrides, plugins)
        if config is not None
        else checkpoint_config(init_from, overrides)
    )
    run_dir = (
        Path(out) if out else Path("runs") / (Path(config).stem if config else finetuned_name(init_from))
    )
    check_new_run_dir(run_dir)
    trainer = Trainer(cfg, run_dir, quiet=quiet)
    request.check()  # a stop a library swallowed: before the folder exists
    if rank0:
        made.append(prepare_run_dir(run_dir, cfg))
    distributed.barrier()
    return trainer


def _resumed(
    run_dir: Path,
    config: str | Path | None,
    overrides: list[str],
    quiet: bool,
    rank0: bool,
    held: contextlib.ExitStack,
    plugins: list[Path] | None = None,
) -> Trainer:
    """A trainer that continues the run in `run_dir` from its last.pt (or starts it afresh when
    it was killed before its first checkpoint), with the budgets and reporting `overrides` allow;
    `plugins` (--plugin) as the run was started with them, so a run started that way resumes."""
    if rank0 and (run_dir / CONFIG).is_file():
        held.callback(RunLock(run_dir).release)
    last = run_dir / CHECKPOINTS / LAST
    state = read_checkpoint(last) if last.is_file() else None
    if state is not None:  # its plugins as it trained with them, before its config imports any
        require(state.get("plugins"), str(last), own_files=True)
    cfg, changes = resume_config(
        run_dir, config, overrides, write=rank0, checkpoint_config=state and state["config"], plugins=plugins
    )
    trainer = Trainer(cfg, run_dir, quiet=quiet, resume=state is not None, checkpoint=state)
    trainer.notes += [f"resuming with {c}" for c in changes]
    if state is None:
        trainer.notes.append("no checkpoint yet: starting the run afresh from its config")
    return trainer
