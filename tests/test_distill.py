"""`nmt distill`: the distilled corpus is the teacher's `nmt translate` output, cleaned of
degenerate lines; a killed distillation goes on from its last chunk to the same corpus; the
student trains on it (and on the references, weighted); bad input is one line."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from typer.testing import CliRunner

from nmt.cli import app
from nmt.commands.distill import Filters
from tests.test_faults import ROOT, fails_cleanly, sets

runner = CliRunner()
KEEP_ALL = ["--max-ratio", "100", "--max-repeats", "100"]


@pytest.fixture(scope="module")
def small_toy(toy_dir, tmp_path_factory):
    """The toy task with 400 training pairs: each test translates them once or twice."""
    folder = tmp_path_factory.mktemp("small-toy")
    for name in ("train.human", "train.iso"):
        lines = (toy_dir / name).read_text().splitlines(keepends=True)[:400]
        (folder / name).write_text("".join(lines))
    for name in ("valid.human", "valid.iso", "test.human", "test.iso"):
        (folder / name).write_text((toy_dir / name).read_text())
    return folder


def student(folder, data_dir, **train):
    """A tiny student config of the toy task (the teacher's languages)."""
    config = {
        "base": "toy-luong.yaml",
        "data": {"dir": str(data_dir), "cache_dir": str(folder / "cache")},
        "tokenizer": {"vocab_size": 120},
        "model": {"embedding": 16, "encoder": {"hidden": 16}, "decoder": {"hidden": 32}},
        "train": {"max_steps": 10, "log_every": 5, "valid_every": 10, **train},
        "decode": {"max_len": 16},
    }
    path = folder / "student.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def distill(teacher, config, out, *extra):
    return ["distill", "--teacher", teacher, "-c", config, "-o", out, "--beam", "2", *extra]


@pytest.fixture(scope="module")
def distilled(translating_model, small_toy, tmp_path_factory):
    folder = tmp_path_factory.mktemp("distilled")
    config = student(folder, small_toy)
    args = distill(translating_model.run, config, folder / "out", "--stage", "data", "-q", *KEEP_ALL)
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return folder


def test_the_distilled_corpus_is_the_teacher_s_translation(distilled, translating_model, small_toy, tmp_path):
    corpus = distilled / "out" / "data"
    hyps = tmp_path / "hyps.iso"
    source = small_toy / "train.human"
    args = ["translate", "-m", translating_model.run, "-i", source, "-o", hyps, "--beam", "2", "-q"]
    assert runner.invoke(app, [str(a) for a in args]).exit_code == 0
    assert (corpus / "train.iso").read_text() == hyps.read_text()
    assert (corpus / "train.human").read_text() == source.read_text()
    for name in ("valid.human", "valid.iso", "test.human", "test.iso"):
        assert (corpus / name).read_text() == (small_toy / name).read_text()
    manifest = json.loads((corpus / "distill.json").read_text())
    assert manifest["pairs"] == {"translated": 400, "kept": 400, "dropped": {}}
    assert manifest["settings"]["decode"]["beam"] == 2
    assert not (distilled / "out" / "data.parts").exists()


def test_degenerate_outputs_are_dropped_and_counted(translating_model, small_toy, tmp_path):
    filters = Filters(max_ratio=3.0, max_repeats=2)
    assert filters.reason("a b c", "") == "empty output"
    assert filters.reason("a", "a b c d") == "length ratio above 3"
    assert filters.reason("a b c d e f g h i", "x y z x y z x y z") == "a word trigram more than 2 times"
    assert filters.reason("ein Hund", "a dog") is None
    config = student(tmp_path, small_toy)
    args = distill(
        translating_model.run, config, tmp_path / "out", "--stage", "data", "-q", "--max-ratio", "1"
    )
    assert runner.invoke(app, [str(a) for a in args]).exit_code == 0
    manifest = json.loads((tmp_path / "out" / "data" / "distill.json").read_text())
    dropped = manifest["pairs"]["dropped"]["length ratio above 1"]
    assert dropped > 0 and manifest["pairs"]["kept"] == 400 - dropped
    assert len((tmp_path / "out" / "data" / "train.iso").read_text().splitlines()) == 400 - dropped
    shown = (tmp_path / "out" / "data" / "dropped.tsv").read_text().splitlines()
    assert len(shown) == 1 + dropped and shown[1].split("\t")[1] == "length ratio above 1"
    number, _, source, _ = shown[1].split("\t")
    assert (small_toy / "train.human").read_text().splitlines()[int(number) - 1] == source


def test_a_killed_distillation_goes_on_from_its_last_chunk(distilled, translating_model, small_toy, tmp_path):
    config = student(tmp_path, small_toy)
    out = tmp_path / "out"
    args = distill(translating_model.run, config, out, "--stage", "data", "--chunk", "100", *KEEP_ALL)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "nmt", *map(str, args), "-q"]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while (
        len(list((out / "data.parts").glob("*.txt"))) < 2 and proc.poll() is None and time.time() < deadline
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    chunks = len(list((out / "data.parts").glob("*.txt")))
    assert 2 <= chunks < 4 and not (out / "data").exists()
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert f"resuming: {100 * chunks} of 400 training sources already translated" in result.stderr
    expected = distilled / "out" / "data"
    for name in ("train.human", "train.iso"):
        assert (out / "data" / name).read_text() == (expected / name).read_text()


def test_the_student_trains_on_the_distilled_corpus_beside_the_references(distilled, tmp_path):
    out = distilled / "out"
    config = distilled / "student.yaml"
    args = [
        "distill",
        "--teacher",
        "unused",
        "-c",
        config,
        "-o",
        out,
        "--stage",
        "train",
        "--references",
        "0.5",
    ]
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert "trained 10 steps" in result.stdout
    data = yaml.safe_load((out / "student.yaml").read_text())["data"]
    assert data["dir"] == str((out / "data").resolve())
    assert [c["weight"] for c in data["corpora"]] == [1.0, 0.5]
    log = (out / "student" / "train.log").read_text()
    assert "corpora:" in log and "66.6% of an epoch" in log
    again = runner.invoke(app, [str(a) for a in args])  # finished: it says so and trains no more
    assert again.exit_code == 0 and "trained 10 steps" in again.stdout


def test_bad_input_is_one_line(translating_model, small_toy, tmp_path):
    config = student(tmp_path, small_toy)
    out = tmp_path / "out"
    reverse = sets(["data.src_lang=iso", "data.tgt_lang=human"])
    fails_cleanly(
        [*distill(translating_model.run, config, out), *reverse],
        "translates human->iso, and the student's config iso->human",
    )
    assert not out.exists()
    fails_cleanly(
        [*distill(translating_model.run, config, out), "--stage", "train"], "no distilled corpus yet"
    )
    corpora = sets([f"data.corpora=[{{train: train, dir: {small_toy}}}]"])
    fails_cleanly([*distill(translating_model.run, config, out), *corpora], "translates one training split")
