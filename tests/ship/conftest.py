"""One tiny toy run shared by the shipping tests: two-layer encoder and decoder (the case the ONNX
exporter needs care with), three validation snapshots kept and averaged by the trainer. It is too
short to translate (it writes nothing for every input), so the ONNX engine is compared with torch
on `translating_model` (tests/conftest.py) instead."""

import pytest
from typer.testing import CliRunner

from nmt.cli import app

runner = CliRunner()
TINY = [
    "model.embedding=16",
    "model.encoder.hidden=16",
    "model.encoder.layers=2",
    "model.decoder.hidden=32",
    "model.decoder.layers=2",
    "tokenizer.vocab_size=120",
    "train.log_every=10",
    "train.valid_every=10",
    "train.max_steps=30",
    "train.average_last=3",
    "decode.max_len=16",
]


def invoke(*args, code: int = 0):
    """Run `nmt ARGS` in-process; check the exit code; return the result."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


@pytest.fixture(scope="session")
def toy_run(toy_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ship") / "run"
    sets = [x for item in [*TINY, f"data.dir={toy_dir}"] for x in ("--set", item)]
    invoke("train", "-c", "toy-luong.yaml", *sets, "--output", out, "--quiet")
    return out
