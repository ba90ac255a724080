"""Training: the command (`run`), the loop (`trainer`) and its parts: the learner, epochs,
budgets, validation, checkpoints, reporting, signals, progress; loss, schedules, precision,
distributed.

The package is also callable, as the notebook entry point: `nmt.train("toy-luong.yaml",
overrides={"train.max_steps": 200}, output="runs/toy")` is `nmt train` from Python. A module
class with `__call__` lets the one name be both this package and that function (a plain
function named `train` in `nmt/__init__.py` would be replaced by this package the moment it is
imported). Importing it stays light: torch loads on the first call.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nmt.train.progress import TrainResult


class _CallablePackage(types.ModuleType):
    def __call__(
        self,
        config: str | Path | None = None,
        overrides: dict[str, Any] | list[str] | None = None,
        output: str | Path | None = None,
        resume: str | Path | None = None,
        quiet: bool = False,
        plugins: list[str | Path] | None = None,
    ) -> TrainResult:
        """Train as `nmt train` does: `config` a YAML file or a built-in config's name,
        `overrides` {"section.key": value} (or "section.key=value" strings), `output` the run
        directory (default runs/CONFIG), `resume` a run directory to continue, `plugins` files
        of your own classes (`--plugin`). Progress bars use `tqdm.auto`, so they render in
        Jupyter. Returns the `TrainResult` (run_dir, best, ...)."""
        from nmt.plugins import load_files
        from nmt.train.run import train

        load_files(plugins or [])
        return train(config, overrides, output, resume, quiet, plugins=[Path(p) for p in plugins or []])


sys.modules[__name__].__class__ = _CallablePackage
