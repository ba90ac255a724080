"""Test set-up: keep every cache out of $HOME and never wait on the network."""

import os
import tempfile

os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="nmt-hf-"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="nmt-mpl-"))

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from nmt.config import Config, config_from_dict  # noqa: E402
from nmt.data.toy import write_toy_corpus  # noqa: E402

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
needs_multi30k = pytest.mark.skipif(
    not (MULTI30K / "train.de").is_file(),
    reason=f"Multi30k not found at {MULTI30K} (only the project's own machines have ../shared)",
)


def tiny_config(data_dir: Path | str = "data", **sections) -> Config:
    """A small, fast model on the toy task; `sections` override whole config sections."""
    raw = {
        "data": {"src_lang": "human", "tgt_lang": "iso", "dir": str(data_dir), "max_len": 60},
        "tokenizer": {"vocab_size": 120},
        "model": {
            "embedding": 16,
            "dropout": 0.0,
            "encoder": {"hidden": 16},
            "decoder": {"hidden": 32},
            "attention": {"type": "general"},
        },
        "train": {"max_steps": 20, "log_every": 5, "valid_every": 10, "device": "cpu", "lr": 0.01},
        "decode": {"max_len": 16, "batch_size": 50},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return config_from_dict(raw)


@pytest.fixture(scope="session", autouse=True)
def _work_in_a_temp_dir(tmp_path_factory):
    """Relative outputs (data/cache, runs/) land in a temp dir, never in the checkout."""
    os.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(scope="session")
def toy_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("toy")
    write_toy_corpus(out, seed=3, sizes={"train": 1500, "valid": 60, "test": 60})
    return out


@pytest.fixture(scope="session")
def toy_model(toy_dir, tmp_path_factory):
    """A small toy model trained briefly through the Trainer (shared by the forced decoding,
    alignment and explorer tests), with the validation loss the trainer reports for its weights."""
    from types import SimpleNamespace

    from nmt.rundir import prepare_run_dir
    from nmt.train.trainer import Trainer

    cfg = tiny_config(
        toy_dir, train={"max_steps": 80, "valid_every": 80, "log_every": 40, "device": "cpu", "lr": 0.01}
    )
    run = tmp_path_factory.mktemp("toy-model") / "run"
    prepare_run_dir(run, cfg)
    trainer = Trainer(cfg, run, quiet=True)
    trainer.train()
    scores, _ = trainer.evaluate_model()
    return SimpleNamespace(run=run, last=run / "checkpoints" / "last.pt", valid_loss=scores["valid_loss"])
