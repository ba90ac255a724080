"""The command line: help, version, and one clean line with exit code 2 for every user error."""

import subprocess
import sys

from typer.testing import CliRunner

from nmt import __version__
from nmt.cli import app

runner = CliRunner()


def fails_cleanly(args, *fragments):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_help_lists_every_command_with_an_example():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("train", "translate", "eval", "data", "configs"):
        assert command in result.output
    assert result.output.count("(nmt ") >= 5


def test_help_does_not_import_heavy_packages():
    code = "import sys; from nmt.cli import app; heavy = {'torch', 'datasets', 'matplotlib', 'sacrebleu'}; "
    code += "print(sorted(heavy & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and __version__ in result.stdout


def test_configs_lists_the_builtins():
    result = runner.invoke(app, ["configs"])
    assert "multi30k-luong-dot.yaml" in result.stdout and "iwslt-luong-dot.yaml" in result.stdout


def test_missing_config(tmp_path):
    fails_cleanly(["train", "--config", str(tmp_path / "nope.yaml")], "config not found")


def test_config_error_names_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: {src_lang: de, tgt_lang: en}\nmodel: {attention: {type: fancy}}\n")
    fails_cleanly(
        ["train", "--config", str(bad), "--output", str(tmp_path / "run")], str(bad), "model.attention.type"
    )


def test_mismatched_line_counts(tmp_path, toy_dir):
    (tmp_path / "train.human").write_text("a\nb\n")
    (tmp_path / "train.iso").write_text("a\n")
    args = [
        "train",
        "-c",
        "toy-luong.yaml",
        "--set",
        f"data.dir={tmp_path}",
        "--output",
        str(tmp_path / "run"),
    ]
    fails_cleanly(args, "has 2 lines but", "has 1")


def test_not_a_checkpoint(tmp_path):
    fake = tmp_path / "model.pt"
    fake.write_text("hello")
    fails_cleanly(["translate", "--model", str(fake)], "not an nmt checkpoint")
    fails_cleanly(["translate", "--model", str(tmp_path / "missing.pt")], "checkpoint not found")


def test_eval_line_count_mismatch(tmp_path):
    (tmp_path / "h").write_text("a\nb\n")
    (tmp_path / "r").write_text("a\n")
    fails_cleanly(
        ["eval", "--hyp", str(tmp_path / "h"), "--ref", str(tmp_path / "r")], "has 2 lines", "have 1"
    )


def test_eval_needs_hyp_or_model(tmp_path):
    (tmp_path / "r").write_text("a\n")
    fails_cleanly(["eval", "--ref", str(tmp_path / "r")], "--hyp")
