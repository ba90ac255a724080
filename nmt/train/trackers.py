"""Experiment trackers that receive what the trainer records: `train.loggers: [tensorboard, mlflow]`.

`metrics.jsonl` stays the run's own record; a tracker is a second copy in the tool a team already
uses to compare runs. Each is an optional extra (`pip install 'nmt[tensorboard]'`, `'nmt[mlflow]'`)
and writes inside the run directory unless told otherwise (MLflow honours MLFLOW_TRACKING_URI).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nmt.config import Config
from nmt.errors import NMTError
from nmt.registry import Registry
from nmt.rundir import flatten


class Tracker(Registry):
    """Scalars per step, the config once, and an attention heatmap (an RGB array) per validation."""

    def __init__(self, run_dir: Path, cfg: Config):
        self.run_dir = run_dir

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def log_image(self, name: str, image: Any, step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _missing(name: str, extra: str) -> NMTError:
    return NMTError(f"train.loggers: {name} is not installed; pip install 'nmt[{extra}]' or remove it")


class TensorBoard(Tracker, name="tensorboard"):
    """Event files in RUN_DIR/tensorboard (`tensorboard --logdir runs/`)."""

    def __init__(self, run_dir, cfg):
        super().__init__(run_dir, cfg)
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise _missing("tensorboard", "tensorboard") from None
        self.writer = SummaryWriter(str(run_dir / "tensorboard"))
        self.writer.add_text("config", "```yaml\n" + cfg.to_yaml() + "```")

    def log_metrics(self, metrics, step):
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def log_image(self, name, image, step):
        self.writer.add_image(name, image, step, dataformats="HWC")

    def close(self):
        self.writer.close()


class MLflow(Tracker, name="mlflow"):
    """An MLflow run named after the run directory, in experiment `nmt`; a resumed run continues
    the same MLflow run. Without MLFLOW_TRACKING_URI the store is RUN_DIR/mlflow (SQLite, no server)."""

    def __init__(self, run_dir, cfg):
        super().__init__(run_dir, cfg)
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise _missing("mlflow", "mlflow") from None
        home = run_dir / "mlflow"
        home.mkdir(parents=True, exist_ok=True)
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(home / 'mlflow.db').resolve()}"
        self.client = MlflowClient(uri)
        experiment = self.client.get_experiment_by_name("nmt")
        experiment_id = (
            experiment.experiment_id
            if experiment
            else self.client.create_experiment(
                "nmt", artifact_location=(home / "artifacts").resolve().as_uri()
            )
        )
        id_file = home / "run-id"
        if id_file.is_file():
            self.run_id = id_file.read_text().strip()
        else:
            self.run_id = self.client.create_run(experiment_id, run_name=run_dir.name).info.run_id
            id_file.write_text(self.run_id + "\n")
            for key, value in flatten(cfg.to_dict()).items():
                self.client.log_param(self.run_id, key, value)

    def log_metrics(self, metrics, step):
        for key, value in metrics.items():
            self.client.log_metric(self.run_id, key, value, step=step)

    def log_image(self, name, image, step):
        self.client.log_image(self.run_id, image, key=name, step=step)

    def close(self):
        self.client.set_terminated(self.run_id)


def open_trackers(names: list[str], run_dir: Path, cfg: Config) -> list[Tracker]:
    return [Tracker.build(name, run_dir, cfg) for name in dict.fromkeys(names)]
