"""The run directory: its layout, and the helpers that create, resume and read one.

A run directory holds `config.yaml` (resolved), `metrics.jsonl` (one JSON object a line),
`train.log`, `checkpoints/` (`last.pt`, `best.pt`, ...), `valid/` and `plots/`. These helpers
need no torch, so the command line can read a run without loading the trainer.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from nmt.config import Config, config_from_dict, load_config
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text, folder_beside, read_lines
from nmt.jsonvalues import JSONError, parse_json

CONFIG, METRICS, TRAIN_LOG, LOCK = "config.yaml", "metrics.jsonl", "train.log", ".lock"
CHECKPOINTS, BEST, LAST = "checkpoints", "best.pt", "last.pt"

# Keys that may change when a run is resumed: budgets and reporting, nothing that alters the maths.
RESUMABLE_CHANGES = {
    "train.max_steps",
    "train.max_epochs",
    "train.max_time",
    "train.log_every",
    "train.valid_every",
    "train.valid_share",
    "train.patience",
    "train.keep_best",
    "train.average_last",
    "train.loggers",
    "train.device",
    "train.precision",  # a resume in another precision says so (nmt.train.precision)
    "train.save_every_minutes",
}


def check_new_run_dir(run_dir: Path) -> None:
    """Refuse, before any work, a folder that holds a run or anything else of the user's, and a
    place where no folder can be made (a file in the path, no permission, a read-only disk)."""
    if (run_dir / CONFIG).exists():
        holder = lock_holder(run_dir)
        if holder:
            raise NMTError(_held_by(run_dir, holder))
        raise NMTError(
            f"{run_dir} already holds a run; continue it with --resume {run_dir} or choose another --output"
        )
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise NMTError(f"{run_dir}: exists and is not an empty folder or a run; choose another --output")
    _check_can_make(run_dir)


def _held_by(run_dir: Path, holder: str) -> str:
    return (
        f"{run_dir}: another nmt train (pid {holder}) holds this folder: it started a run there first; "
        "choose another --output"
    )


def _check_can_make(run_dir: Path) -> None:
    """A folder can be made beside where `run_dir` will be: tried for real in the nearest folder
    that exists (permissions alone do not tell a read-only disk), and removed at once."""
    parent = run_dir.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise NMTError(f"{run_dir}: {parent} is a file, not a folder; choose another --output")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".nmt-probe-", dir=parent))
    except OSError as e:
        raise NMTError(
            f"{run_dir}: cannot make a folder in {parent} ({e.strerror}); "
            "check its permissions or choose another --output"
        ) from None


def prepare_run_dir(run_dir: Path, cfg: Config) -> RunLock:
    """A new run directory with its config, created whole or not at all (built under a temporary
    name beside it, then renamed), and locked from the moment it appears, so a second `nmt train`
    into the same folder is told that this process holds it. The caller releases the lock."""
    check_new_run_dir(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = folder_beside(run_dir)
    lock = None
    try:
        (staging / CHECKPOINTS).mkdir()
        atomic_write_text(staging / CONFIG, cfg.to_yaml())
        lock = RunLock(staging)
        lock.move(run_dir)
    except BaseException:
        if lock is not None and lock.run_dir == run_dir:  # stopped just after the rename
            lock.discard()
        elif lock is not None:
            lock.release()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return lock


def lock_holder(run_dir: Path) -> str | None:
    """The pid of the process training in `run_dir`, or None when none holds its lock."""
    import fcntl

    try:
        with open(run_dir / LOCK, encoding="utf-8") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return f.read().strip() or "unknown"
    except OSError:
        pass
    return None


class RunLock:
    """An OS lock on a run directory while a process trains in it, released when the process
    exits or dies: a second `--resume` of the same run is refused instead of training twice."""

    def __init__(self, run_dir: Path):
        import fcntl

        self.run_dir, self.was_empty = run_dir, False  # was_empty: the user's empty folder, replaced
        self.file = open(run_dir / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 (held until exit)
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise NMTError(
                f"{run_dir}: pid {holder} is training in this run; wait for it to finish or stop it first"
            ) from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(str(os.getpid()))
        self.file.flush()

    def move(self, run_dir: Path) -> None:
        """Rename the locked folder to `run_dir` in one step (an empty folder there is replaced);
        refused when another process made a run there meanwhile."""
        was_empty = run_dir.is_dir()
        try:
            self.run_dir.rename(run_dir)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
            holder = lock_holder(run_dir)
            if holder:
                raise NMTError(_held_by(run_dir, holder)) from None
            raise NMTError(
                f"{run_dir}: another process put files in this folder meanwhile; choose another --output"
            ) from None
        self.run_dir, self.was_empty = run_dir, was_empty

    def discard(self) -> None:
        """Remove the new run this lock holds (a start-up stopped before the first step), the
        lock held until it is gone; an empty folder the user had named is left, empty."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.was_empty:
            self.run_dir.mkdir(exist_ok=True)
        self.release()

    def release(self) -> None:
        self.file.close()


def resume_config(
    run_dir: Path,
    config: str | None,
    overrides: list[str],
    write: bool = True,
    checkpoint_config: dict | None = None,
    plugins: list[Path] | None = None,
) -> tuple[Config, list[str]]:
    """The run's config for a resume, and the changes it makes (`key: old -> new`).

    Only budgets and reporting may change. The reference is the config stored in the checkpoint
    (`checkpoint_config`), so a hand-edited config.yaml is caught like a changed --set; a run
    with no checkpoint yet (killed before its first) starts afresh from its config. `write`
    saves the changed config back (only one process of a distributed run should).
    """
    saved_path = run_dir / CONFIG
    if not saved_path.is_file():
        raise NMTError(f"{run_dir}: nothing to resume (no {CONFIG}); start a run with -c CONFIG -o {run_dir}")
    saved = flatten(load_config(saved_path).to_dict())
    wanted = load_config(config or saved_path, overrides, plugins)
    if checkpoint_config is None:
        before = saved
    else:  # built like any config, so an older checkpoint's missing keys read as their defaults
        before = flatten(config_from_dict(checkpoint_config, f"{run_dir}'s checkpoint").to_dict())
    after = flatten(wanted.to_dict())
    changed = sorted(k for k in after if before.get(k) != after[k])
    refused = [k for k in changed if k not in RESUMABLE_CHANGES]
    if refused:
        shown = ", ".join(f"{k} ({before.get(k)!r} -> {after[k]!r})" for k in refused[:3])
        raise NMTError(
            f"cannot resume {run_dir}: its checkpoint was trained with other settings: {shown}; "
            f"only {', '.join(sorted(RESUMABLE_CHANGES))} may change "
            "(edit config.yaml back, or start a new run)"
        )
    if write and saved != after:
        atomic_write_text(saved_path, wanted.to_yaml())
    return wanted, [f"{k}: {before.get(k)!r} -> {after[k]!r}" for k in changed]


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested config dict as {"section.key": value} (mappings that are values stay whole)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "hf_data_files":
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read_metrics(run_dir: Path) -> list[dict]:
    """The run's metrics, each an object with its step (NaN taken: a diverged fp16 run logs it);
    a last line cut short by a crash during an append is skipped."""
    path = Path(run_dir) / METRICS
    lines = [(n, line) for n, line in enumerate(read_lines(path), 1) if line.strip()]
    entries = []
    for i, (n, line) in enumerate(lines):
        try:
            entries.append(parse_json(line, f"{path}:{n}", {"step": int}, nan=True))
        except JSONError:
            if i < len(lines) - 1:
                raise
    return entries
