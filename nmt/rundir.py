"""The run directory: its layout, and the helpers that create, resume and read one.

A run directory holds `config.yaml` (resolved), `metrics.jsonl` (one JSON object a line),
`train.log`, `checkpoints/` (`last.pt`, `best.pt`, ...), `valid/` and `plots/`. These helpers
need no torch, so the command line can read a run without loading the trainer.
"""

from __future__ import annotations

import json
from pathlib import Path

from nmt.config import Config, load_config
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text, read_lines

CONFIG, METRICS, TRAIN_LOG = "config.yaml", "metrics.jsonl", "train.log"
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
}


def prepare_run_dir(run_dir: Path, cfg: Config) -> None:
    """A new run directory: refuse one that already holds a run, never overwrite it."""
    if (run_dir / CONFIG).exists():
        raise NMTError(
            f"{run_dir} already holds a run; continue it with --resume {run_dir} or choose another --output"
        )
    (run_dir / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / CONFIG, cfg.to_yaml())


def resume_config(run_dir: Path, config: str | None, overrides: list[str], write: bool = True) -> Config:
    """The run's own config, with changes allowed only in budgets and reporting; `write` saves
    the changed config back (only one process of a distributed run should)."""
    saved_path = run_dir / CONFIG
    if not saved_path.is_file() or not (run_dir / CHECKPOINTS / LAST).is_file():
        raise NMTError(f"{run_dir}: nothing to resume (no {CONFIG} or {CHECKPOINTS}/{LAST})")
    saved = load_config(saved_path)
    wanted = load_config(config or saved_path, overrides)
    before, after = flatten(saved.to_dict()), flatten(wanted.to_dict())
    changed = sorted(k for k in after if before.get(k) != after[k])
    refused = [k for k in changed if k not in RESUMABLE_CHANGES]
    if refused:
        raise NMTError(
            f"cannot resume {run_dir} with a changed {', '.join(refused)} "
            f"(only {', '.join(sorted(RESUMABLE_CHANGES))} may change)"
        )
    if changed and write:
        atomic_write_text(saved_path, wanted.to_yaml())
    return wanted


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
    return [json.loads(line) for line in read_lines(Path(run_dir) / METRICS) if line.strip()]
