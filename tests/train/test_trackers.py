"""Experiment trackers write real logs: TensorBoard event files and an MLflow store, with the
metrics of metrics.jsonl and an attention heatmap per validation; a resumed run continues them."""

from pathlib import Path

import pytest

from nmt.errors import NMTError
from nmt.rundir import TRAIN_LOG, prepare_run_dir, read_metrics
from nmt.train.trackers import Tracker
from nmt.train.trainer import Trainer
from tests.conftest import tiny_config

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed (make install has it)")
pytest.importorskip("mlflow", reason="the mlflow extra is not installed (make install has it)")


@pytest.fixture(scope="module")
def tracked_run(toy_dir, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("tracked") / "run"
    cfg = tiny_config(
        toy_dir, train={"loggers": ["tensorboard", "mlflow"], "max_steps": 10, "valid_every": 5}
    )
    prepare_run_dir(run, cfg)
    Trainer(cfg, run, quiet=True).train()
    return run


def test_tensorboard_gets_the_scalars_and_an_attention_image(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tracked_run / "tensorboard"), size_guidance={"images": 0}).Reload()
    tags = events.Tags()
    assert {"loss", "valid_bleu", "valid_loss"} <= set(tags["scalars"])
    assert [e.step for e in events.Scalars("valid_loss")] == [5, 10]
    assert "attention" in tags["images"] and events.Images("attention")[-1].width > 100


def test_mlflow_gets_params_metrics_and_an_attention_image(tracked_run):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tracked_run / 'mlflow' / 'mlflow.db'}")
    run_id = (tracked_run / "mlflow" / "run-id").read_text().strip()
    run = client.get_run(run_id)
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.params["model.attention.type"] == "general"
    history = client.get_metric_history(run_id, "valid_loss")
    logged = [m["valid_loss"] for m in read_metrics(tracked_run) if "valid_loss" in m]
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(logged)
    images = [a.path for a in client.list_artifacts(run_id, "images")]
    assert any(p.endswith(".png") and "attention" in p for p in images)


def test_a_resumed_run_continues_the_same_mlflow_run(tracked_run):
    from mlflow.tracking import MlflowClient

    from nmt.rundir import resume_config

    run_id = (tracked_run / "mlflow" / "run-id").read_text().strip()
    cfg, _ = resume_config(tracked_run, None, ["train.max_steps=15"])
    Trainer(cfg, tracked_run, quiet=True, resume=True).train()
    client = MlflowClient(f"sqlite:///{tracked_run / 'mlflow' / 'mlflow.db'}")
    assert [
        r.info.run_id for r in client.search_runs(client.get_experiment_by_name("nmt").experiment_id)
    ] == [run_id]
    assert max(m.step for m in client.get_metric_history(run_id, "valid_loss")) == 15


def test_train_log_holds_what_the_trainer_said(tracked_run):
    log = (tracked_run / TRAIN_LOG).read_text()
    assert "model: luong decoder, general attention" in log
    assert "step 10: valid loss" in log
    assert "trained 10 steps (reached train.max_steps (10))" in log


def test_a_missing_tracker_package_is_one_clear_error(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_mlflow(name, *args, **kwargs):
        if name.startswith("mlflow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mlflow)
    with pytest.raises(NMTError, match=r"pip install 'nmt\[mlflow\]'"):
        Tracker.build("mlflow", tmp_path, tiny_config())
