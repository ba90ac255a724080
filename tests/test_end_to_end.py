"""The whole path on the toy task: data -> train -> translate -> eval, resume, and refusal."""

import json

import pytest
from typer.testing import CliRunner

from nmt.checkpoint import read_checkpoint
from nmt.cli import app
from nmt.rundir import read_metrics
from tests.conftest import assert_image, assert_resumed_at

runner = CliRunner()
TINY = [
    "model.embedding=16",
    "model.encoder.hidden=16",
    "model.decoder.hidden=32",
    "tokenizer.vocab_size=120",
    "train.log_every=10",
    "train.valid_every=20",
    "decode.max_len=16",
]


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def sets(items):
    return [x for item in items for x in ("--set", item)]


def train_toy(toy_dir, out, *extra):
    """A tiny model on the toy corpus, through the CLI."""
    invoke(
        "train",
        "-c",
        "toy-luong.yaml",
        *sets([*TINY, f"data.dir={toy_dir}", *extra]),
        "--output",
        out,
        "--quiet",
    )
    return out


@pytest.fixture(scope="module")
def trained(toy_dir, tmp_path_factory):
    return train_toy(toy_dir, tmp_path_factory.mktemp("runs") / "toy", "train.max_steps=40")


def test_training_writes_config_checkpoints_and_metrics(trained):
    assert (trained / "config.yaml").is_file()
    assert (trained / "checkpoints" / "best.pt").is_file() and (trained / "checkpoints" / "last.pt").is_file()
    metrics = read_metrics(trained)
    train_lines = [m for m in metrics if "loss" in m]
    valid_lines = [m for m in metrics if "valid_bleu" in m]
    assert [m["step"] for m in train_lines] == [10, 20, 30, 40]
    assert train_lines[-1]["loss"] < train_lines[0]["loss"]
    assert [m["step"] for m in valid_lines] == [20, 40]
    assert all(k.startswith("valid") for m in valid_lines for k in m if k not in ("step", "epoch", "time"))


def test_translate_and_eval(trained, toy_dir, tmp_path):
    hyp = tmp_path / "hyp.txt"
    invoke(
        "translate",
        "-m",
        trained,
        "-i",
        toy_dir / "test.human",
        "-o",
        hyp,
        "--plot-attention",
        tmp_path,
        "--plot-first",
        2,
    )
    lines = hyp.read_text().splitlines()
    assert len(lines) == len((toy_dir / "test.human").read_text().splitlines())
    for n in (1, 2):  # --plot-first 2: one heatmap per sentence, and no more
        width, height = png_size(tmp_path / f"attention-{n}.png")
        assert width >= 300 and height >= 200
    assert not (tmp_path / "attention-3.png").exists()
    beam = tmp_path / "beam.txt"
    invoke(
        "translate",
        "-m",
        trained / "checkpoints" / "last.pt",
        "-i",
        toy_dir / "test.human",
        "-o",
        beam,
        "--beam",
        3,
    )
    assert len(beam.read_text().splitlines()) == len(lines)
    report = json.loads(invoke("eval", "--hyp", hyp, "--ref", toy_dir / "test.iso", "--json").stdout)
    assert report["sentences"] == len(lines) and 0 <= report["systems"][0]["scores"]["BLEU"] <= 100
    direct = json.loads(
        invoke(
            "eval", "-m", trained, "--src", toy_dir / "test.human", "--ref", toy_dir / "test.iso", "--json"
        ).stdout
    )
    assert direct["systems"][0]["scores"] == pytest.approx(report["systems"][0]["scores"])


def test_translate_keeps_empty_lines_and_line_count(trained):
    result = runner.invoke(app, ["translate", "-m", str(trained)], input="March 3, 2021\n\n  \n5.6.1990\n")
    assert result.exit_code == 0
    assert result.stdout.split("\n")[1:3] == ["", ""] and len(result.stdout.splitlines()) == 4


def test_existing_run_is_never_overwritten(trained, toy_dir):
    before = (trained / "checkpoints" / "last.pt").read_bytes()
    result = runner.invoke(
        app, ["train", "-c", "toy-luong.yaml", "--set", f"data.dir={toy_dir}", "--output", str(trained)]
    )
    assert result.exit_code == 2 and "already holds a run" in result.stderr
    assert (trained / "checkpoints" / "last.pt").read_bytes() == before


def test_resume_continues_and_refuses_changed_maths(trained, tmp_path):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(trained, run)
    refused = runner.invoke(app, ["train", "--resume", str(run), "--set", "model.attention.type=dot"])
    assert refused.exit_code == 2 and "model.attention.type" in refused.stderr
    before = read_metrics(run)
    step = read_checkpoint(run / "checkpoints" / "last.pt")["progress"]["step"]
    assert step == 40
    invoke("train", "--resume", run, "--set", "train.max_steps=60", "--quiet")
    steps = [m["step"] for m in read_metrics(run) if "loss" in m]
    assert steps == [10, 20, 30, 40, 50, 60]
    assert_resumed_at(run, before, step, log_every=10)  # continued at 40, did not retrain 1-40


@pytest.mark.slow
def test_the_demo_model_learns_the_toy_task(tmp_path, monkeypatch):
    """The demo's config, trained briefly on the full toy corpus, gets most dates exactly right.
    Its weight gradients on oneDNN throughout: timed per shape (`nmt.train.backends`) on a machine
    the other test worker keeps busy, some went to MKL, and 500 steps of other rounding ended at
    0.848 once."""
    monkeypatch.setenv("NMT_WEIGHT_GRADIENT", "onednn")
    data = tmp_path / "data"
    invoke("data", "toy", "--output", data)
    invoke(
        "train",
        "-c",
        "toy-luong.yaml",
        *sets([f"data.dir={data}", "train.max_steps=500", "train.valid_every=500"]),
        "--output",
        tmp_path / "run",
        "--quiet",
    )
    valid = [m for m in read_metrics(tmp_path / "run") if "valid_exact_match" in m]
    assert valid[-1]["valid_exact_match"] > 0.9


def png_size(path):
    """The (width, height) of a PNG checked to be one (`assert_image`) and not a blank canvas."""
    import matplotlib.image

    size = assert_image(path, "png")
    image = matplotlib.image.imread(path)
    assert image.std() > 0.02  # not a blank canvas
    assert (image.shape[1], image.shape[0]) == size
    return size


def test_plot_attention_from_jsonl_and_from_a_checkpoint(trained, toy_dir, tmp_path):
    att = tmp_path / "att.jsonl"
    invoke(
        "translate",
        "-m",
        trained,
        "-i",
        toy_dir / "test.human",
        "-o",
        tmp_path / "out.txt",
        "--attention",
        att,
    )
    invoke("plot", "attention", "--attention", att, "--index", 3, "-o", tmp_path / "a.png")
    invoke("plot", "attention", "-m", trained, "--sentence", "Montag, 5. März 2001", "-o", tmp_path / "b.png")
    for name in ("a.png", "b.png"):
        width, height = png_size(tmp_path / name)
        assert width >= 400 and height >= 300
    bad = runner.invoke(app, ["plot", "attention", "--attention", str(att), "--index", "999", "-o", "x.png"])
    assert bad.exit_code == 2 and "no sentence 999" in bad.stderr


def test_plot_curves_overlays_runs(trained, tmp_path):
    invoke("plot", "curves", trained, trained, "-o", tmp_path / "curves.png")
    width, height = png_size(tmp_path / "curves.png")
    assert width >= 1000 and height >= 700
    assert all("time" in m for m in read_metrics(trained))


def test_interactive_mode_answers_each_line(trained, monkeypatch, capsys):
    from nmt.commands.translate import OutputOptions, interactive
    from nmt.decode.translator import load_translator

    answers = iter(["5.6.1990", ""])

    def fake_input(prompt):
        try:
            return next(answers)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    interactive(load_translator([trained], {}), OutputOptions())
    assert capsys.readouterr().out.count("\n") == 2
