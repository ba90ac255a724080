"""Real data: Multi30k de->en from ../shared (skipped where it is absent)."""

from typer.testing import CliRunner

from nmt.cli import app
from nmt.config import load_config
from nmt.data.sources import load_split
from tests.conftest import MULTI30K, needs_multi30k

runner = CliRunner()


@needs_multi30k
def test_multi30k_config_reads_the_real_splits():
    cfg = load_config("multi30k-luong-dot.yaml", [f"data.dir={MULTI30K}"])
    sizes = {split: len(load_split(cfg.data, split)) for split in ("train", "valid", "test")}
    assert sizes == {"train": 29000, "valid": 1014, "test": 1000}
    assert load_split(cfg.data, "test")[0][1].startswith("A man in an orange hat")


@needs_multi30k
def test_train_briefly_then_eval_prints_bleu_by_length(tmp_path):
    overrides = [
        f"data.dir={MULTI30K}",
        "tokenizer.vocab_size=1000",
        "model.embedding=32",
        "model.encoder.hidden=32",
        "model.decoder.hidden=64",
        "train.max_steps=10",
        "train.valid_every=10",
        "decode.max_len=20",
        "decode.beam=1",
        "decode.batch_size=200",
    ]
    args = ["train", "-c", "multi30k-luong-dot.yaml", "--output", str(tmp_path / "run"), "--quiet"]
    result = runner.invoke(app, args + [x for o in overrides for x in ("--set", o)])
    assert result.exit_code == 0, result.output
    src, ref = MULTI30K / "test_2016_flickr.de", MULTI30K / "test_2016_flickr.en"
    result = runner.invoke(app, ["eval", "-m", str(tmp_path / "run"), "--src", str(src), "--ref", str(ref)])
    assert result.exit_code == 0, result.output
    assert "BLEU by ref length" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith(("1-10", "11-20"))]
    assert sum(int(r[1]) for r in rows) > 900  # Multi30k sentences are short: nearly all in 1-20
