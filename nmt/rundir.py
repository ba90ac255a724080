"""The run directory: its layout, and the helpers that create, resume and read one.

A run directory holds `config.yaml` (resolved), `metrics.jsonl` (one JSON object a line),
`train.log`, `checkpoints/` (`last.pt`, `best.pt`, ...), `valid/` and `plots/`. These helpers
need no torch, so the command line can read a run without loading the trainer.
"""

from __future__ import annotations

import json
from pathlib import Path

from nmt.config import Config, config_from_dict, load_config
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text, read_lines

CONFIG, METRICS, TRAIN_LOG, LOCK = "config.yaml", "metrics.jsonl", "train.log", ".lock"
CHECKPOINTS, BEST, LAST = "checkpoints", "best.pt", "last.pt"

# Keys that may change when a run is resumed: budgets and reporting, nothing that alters the maths.
RESUMABLE_CHANGES = {
    "train.max_steps",
    "train.max_epochs",
    "train.max_time",
    "train.log_every",
    "train.valid_every",
    "train.patience",
    "train.keep_best",
    "train.average_last",
    "train.loggers",
    "train.device",
    "train.save_every_minutes",
}


def check_new_run_dir(run_dir: Path) -> None:
    """Refuse, before any work, a folder that holds a run or anything else of the user's."""
    if (run_dir / CONFIG).exists():
        raise NMTError(
            f"{run_dir} already holds a run; continue it with --resume {run_dir} or choose another --output"
        )
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise NMTError(f"{run_dir}: exists and is not an empty folder or a run; choose another --output")


def prepare_run_dir(run_dir: Path, cfg: Config) -> None:
    """A new run directory with its config, created whole or not at all (built under a temporary
    name beside it, then renamed), so no half-made folder is ever left behind."""
    import shutil
    import tempfile

    check_new_run_dir(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.", dir=run_dir.parent))
    try:
        (staging / CHECKPOINTS).mkdir()
        atomic_write_text(staging / CONFIG, cfg.to_yaml())
        if run_dir.is_dir():
            run_dir.rmdir()  # empty, checked above
        staging.rename(run_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


class RunLock:
    """An OS lock on a run directory while a process trains in it, released when the process
    exits or dies: a second `--resume` of the same run is refused instead of training twice."""

    def __init__(self, run_dir: Path):
        import fcntl
        import os

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

    def release(self) -> None:
        self.file.close()


def resume_config(
    run_dir: Path,
    config: str | None,
    overrides: list[str],
    write: bool = True,
    checkpoint_config: dict | None = None,
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
    wanted = load_config(config or saved_path, overrides)
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
    """The run's metrics; a last line cut short by a crash during an append is skipped."""
    lines = [line for line in read_lines(Path(run_dir) / METRICS) if line.strip()]
    entries = []
    for i, line in enumerate(lines):
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise NMTError(f"{Path(run_dir) / METRICS}: line {i + 1} is not JSON") from None
    return entries
