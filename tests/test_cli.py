"""The command line: help, version, and one clean line with exit code 2 for every user error."""

import os
import re
import signal
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nmt.allocator import tcmalloc_library
from nmt.cli import app
from nmt.version import VERSION

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
    assert result.exit_code == 0 and VERSION in result.stdout


def test_import_nmt_leaves_the_version_lookup_for_when_it_is_asked():
    """`import nmt` comes before nmt can handle Ctrl-C, so it stays cheap (the metadata lookup
    of the version took 50 ms of it)."""
    code = "import sys, nmt; print('nmt.version' in sys.modules, nmt.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", VERSION]


# A Ctrl-C at each moment of start-up, sent by the child to itself from an audit hook
# (sys.addaudithook, installed by a sitecustomize on its path) at the first audit event of a kind
# naming a module or file, so the moment is the same on a busy machine as on a quiet one (a
# signal sent from here after reading the child's output arrived, under load, after the child
# had finished). Once per test: the hook leaves a marker, and the restart onto tcmalloc
# (nmt/allocator.py) keeps the environment.
HOOK = """
import os, signal, sys
_event, _name, _marker = os.environ["NMT_TEST_SIGINT_AT"].split("|")
def _sigint(event, args):
    if event == _event and _name in " ".join(map(str, args[:2])) and not os.path.exists(_marker):
        open(_marker, "w").close()
        os.kill(os.getpid(), signal.SIGINT)
sys.addaudithook(_sigint)
"""
PLUGIN = "from nmt.model.attention import Attention\n"  # imports torch while it runs
RESTARTS = bool(tcmalloc_library())  # without tcmalloc nmt does not exec itself again
START_UP = [
    ("import", "nmt.allocator"),  # before the restart
    pytest.param(
        "os.exec", "python", marks=pytest.mark.skipif(not RESTARTS, reason="no tcmalloc: no restart")
    ),
    ("import", "typer"),  # after it: the command line's imports
    ("import", "nmt.cli.translate"),
    ("compile", "plugin.py"),  # a --plugin file, imported before the model is read
    ("import", "torch"),  # which imports torch
    ("import", "nmt.checkpoint"),
]


def _ctrl_c_as_a_terminal() -> None:
    """The child starts with SIGINT's default action, as from a shell's prompt: a pytest-xdist
    worker ignores SIGINT, and a process that starts with it ignored (a background job's lot)
    never sees a Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("event", "name"), START_UP)
def test_ctrl_c_during_start_up_ends_in_one_line_without_a_traceback(tmp_path, event, name):
    """Ctrl-C in the first half second (the restart, the command line's imports, a plugin's)
    printed a traceback 9 times in 13, and was lost when it came between the restart's exec and
    Python's start. It ends in one line, `interrupted`, and exit 130 (or quietly, as Typer ends
    a command it reached). -2: Python ends by SIGINT itself when the interrupt came through code
    it compiled at run time (a dataclass's methods); a shell reports 130 for both."""
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(HOOK)
    (tmp_path / "plugin.py").write_text(PLUGIN)
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "hook"), str(Path(__file__).resolve().parents[1])]),
        "NMT_TEST_SIGINT_AT": f"{event}|{name}|{tmp_path / 'sent'}",
    }
    command = [
        sys.executable,
        "-m",
        "nmt",
        "translate",
        "-m",
        "missing",
        "-i",
        "in.txt",
        "--plugin",
        "plugin.py",
    ]
    proc = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        preexec_fn=_ctrl_c_as_a_terminal,
    )
    assert (tmp_path / "sent").exists(), f"no {event} event naming {name}: {proc.stderr}"
    assert "Traceback" not in proc.stderr and proc.stderr.splitlines() in ([], ["interrupted"]), proc.stderr
    assert proc.returncode in (130, -signal.SIGINT), proc.stderr


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


COMMANDS = [
    ["train"],
    ["translate"],
    ["serve"],
    ["eval"],
    ["configs"],
    ["data", "toy"],
    ["data", "prepare"],
    ["data", "stats"],
    ["plot", "attention"],
    ["plot", "curves"],
]


def help_text(command: list[str]) -> str:
    result = runner.invoke(app, [*command, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_reads_like_other_tools(command):
    text = help_text(command)
    assert "<bool>" not in text and "<list[" not in text and "range>" not in text and "<path>" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    if any(word in text for word in ("--output", "-o,")):
        assert "-o, --output PATH" in text


def test_choice_options_list_their_values_and_devices_default_to_auto():
    translate = help_text(["translate"])
    assert "--length-penalty <none|avg|gnmt>" in translate and "--batch-type <sentences|tokens>" in translate
    assert "separated by a tab" in " ".join(translate.split())  # not eaten by markup
    evaluate = help_text(["eval"])
    assert "--by <ref|src>" in evaluate and "13a, intl, zh, char, none" in " ".join(evaluate.split())
    for text in (translate, evaluate):
        assert "[default: auto]" in " ".join(text.split())


def test_options_come_in_panels_by_what_they_are_for():
    translate = help_text(["translate"])
    panels = [line[:-1] for line in translate.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert panels == ["Model and input", "Search", "Sampling", "Steering", "Output", "Speed", "Options"]
    sections = dict(zip(panels, re.split(r"\n(?:" + "|".join(panels) + "):\n", translate)[1:], strict=True))
    assert "--plugin FILE" in sections["Model and input"] and "--beam INT" in sections["Search"]
    assert "--top-p FLOAT" in sections["Sampling"] and "--prefixes PATH" in sections["Steering"]
    assert "--scores" in sections["Output"] and "--precision" in sections["Speed"]
    for command in (["train"], ["serve"], ["align"], ["explore"], ["score"], ["release"], ["export"]):
        assert "Model and input:\n" in help_text(command) and "--plugin FILE" in help_text(command), command


def test_the_tokenize_choices_are_sacrebleus():
    from sacrebleu.metrics import BLEU

    from nmt.cli.evaluate import Tokenizer

    assert set(typing.get_args(Tokenizer)) == set(BLEU.TOKENIZERS)


def test_flags_take_no_value():
    line = fails_cleanly(["translate", "-m", "x.pt", "--no-unk", "true"], "unexpected extra argument")
    assert "(see nmt translate --help)" in line


def test_config_option_completes_builtin_names():
    env = {
        **os.environ,
        "_NMT_COMPLETE": "complete_bash",
        "COMP_WORDS": "nmt train -c toy",
        "COMP_CWORD": "3",
    }
    script = Path(sys.executable).parent / "nmt"  # completion keys on the program name
    out = subprocess.run([str(script)], env=env, capture_output=True, text=True).stdout
    assert "toy-luong.yaml" in out and "toy-bahdanau.yaml" in out and "multi30k" not in out


def test_a_set_typo_names_the_command_line_and_suggests(tmp_path):
    line = fails_cleanly(["train", "-c", "toy-luong.yaml", "--set", "model.atention.type=dot"], "--set")
    assert "did you mean attention?" in line and "toy-luong.yaml" not in line
    fails_cleanly(
        ["train", "-c", "toy-luong.yaml", "--set", "train.lr=fast"], "--set: train.lr: expected float"
    )
    fails_cleanly(["train", "-c", "toy-luong.yaml", "--set", "train.lr=[1"], "not valid YAML")


def test_an_unknown_key_in_a_file_gets_a_suggestion(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: {src_lang: de, tgt_lang: en}\ntrain: {max_step: 5}\n")
    fails_cleanly(
        ["train", "-c", str(bad)], str(bad), "train.max_step: unknown key", "did you mean max_steps?"
    )


def test_configs_show_prints_every_key_with_its_description():
    import yaml

    from nmt.config import config_from_dict, load_config

    result = runner.invoke(app, ["configs", "--show", "toy-luong"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all("  # " in line for line in lines), [line for line in lines if "  # " not in line]
    assert "  beam: 1  # beam size; 1 is greedy search" in lines
    assert config_from_dict(yaml.safe_load(result.stdout)) == load_config("toy-luong")


def test_env_prints_versions_devices_and_threads():
    result = runner.invoke(app, ["env"])
    assert result.exit_code == 0
    for fragment in ("nmt ", "torch ", "CUDA available: ", "MPS available: ", "threads: ", "bf16 units: "):
        assert fragment in result.stdout


def test_env_bench_names_the_cpu_and_times_the_yardstick_on_each_backend():
    result = runner.invoke(app, ["env", "--bench"])
    assert result.exit_code == 0
    assert "CPU: " in result.stdout and "64 x 512 @ 512 x 8000" in result.stdout
    timings = re.findall(
        r"^  (MKL|oneDNN|oneDNN prepacked|oneDNN bf16) +([\d.]+) ms +([\d.]+) GFLOP/s$", result.stdout, re.M
    )
    assert [name for name, *_ in timings][:1] == ["MKL"] and all(float(ms) > 0 for _, ms, _ in timings)
    from nmt.model.linear import BF16_UNITS

    assert ("oneDNN bf16" in [name for name, *_ in timings]) == BF16_UNITS  # where the CPU has bf16 units
    from nmt.machine import INT8_ENGINES, int8_engines

    int8 = re.findall(r"^  int8 (fbgemm|oneDNN) +([\d.]+) ms +([\d.]+) Gop/s$", result.stdout, re.M)
    assert [name for name, *_ in int8] == [INT8_ENGINES[e] for e in int8_engines()]  # each engine torch has
    assert all(float(ms) > 0 for _, ms, _ in int8)
