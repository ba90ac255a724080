"""Faults and bad input, injected for real: every error a user can cause or meet is one line on
stderr with exit code 2 and changes none of the user's files; signals, kills and full disks never
lose a run or leave one that can neither be resumed nor restarted."""

import hashlib
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from nmt.checkpoint import read_checkpoint
from nmt.cli import app
from nmt.rundir import CHECKPOINTS, LAST, METRICS, RunLock, prepare_run_dir, read_metrics
from nmt.train.trainer import Trainer
from tests.conftest import assert_resumed_at, assert_started_afresh, tiny_config

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
LOG_EVERY = 5
BASE = [f"train.log_every={LOG_EVERY}", "train.valid_every=10", "train.max_steps=30", "model.dropout=0.3"]


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def fails_cleanly(args, *fragments, folder: Path | None = None) -> str:
    before = snapshot(folder) if folder else None
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    if folder:
        assert snapshot(folder) == before, "an input file changed"
    return lines[0]


def sets(items) -> list[str]:
    return [x for item in items for x in ("--set", item)]


@pytest.fixture(scope="module")
def checkpoint(toy_dir, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("faults") / "run"
    cfg = tiny_config(toy_dir, train={"max_steps": 10, "valid_every": 10})
    prepare_run_dir(run, cfg)
    Trainer(cfg, run, quiet=True).train()
    return run / CHECKPOINTS / "best.pt"


def bomb(depth: int = 9) -> str:
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, depth):
        prev, name = chr(96 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + f"\ndata: {{src_lang: x, tgt_lang: *{chr(96 + depth)}}}\n"


CONFIG_CASES = {
    "not UTF-8": (b"data: {src_lang: \xff\xfe}\n", [], "not UTF-8"),
    "alias bomb": (bomb().encode(), [], "YAML aliases are expanded"),
    "duplicated section": (b"data: {src_lang: a, tgt_lang: b}\ndata: {src_lang: c}\n", [], "appears twice"),
    "non-string key": (b"1: x\ndata: {src_lang: a, tgt_lang: b}\n", [], "1: unknown key"),
    "a list as the top": (b"- data\n", [], "top level must be a mapping"),
    "--set not YAML": (None, ["train.lr=[1"], "not valid YAML"),
    "heads 0": (
        None,
        ["model.attention.type=multihead", "model.attention.heads=0"],
        "heads: must be at least 1",
    ),
    "dropout above 1": (None, ["model.encoder.dropout=1.5"], "encoder.dropout: must be in [0, 1)"),
    "negative lr": (None, ["train.lr=-0.1"], "train.lr: must be a finite number >= 0"),
    "NaN lr": (None, ["train.lr=.nan"], "train.lr: must be a finite number >= 0"),
    "max_steps -1": (None, ["train.max_steps=-1"], "max_steps: must be at least 1"),
    "unknown key": (None, ["train.max_step=5"], "did you mean max_steps?"),
}


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_bad_configs_are_one_line_and_make_no_run_folder(case, toy_dir, tmp_path):
    text, overrides, fragment = CONFIG_CASES[case]
    config = "toy-luong.yaml"
    if text is not None:
        config = tmp_path / "config.yaml"
        config.write_bytes(text)
    run = tmp_path / "run"
    args = ["train", "-c", config, *sets([f"data.dir={toy_dir}", *overrides]), "-o", run]
    fails_cleanly(args, fragment, folder=tmp_path if text is not None else None)
    assert not run.exists()


def test_a_late_data_error_makes_no_run_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.human").write_text("a\nb\n")
    (tmp_path / "data" / "train.iso").write_text("a\n")
    run = tmp_path / "run"
    fails_cleanly(
        ["train", "-c", "toy-luong.yaml", "--set", f"data.dir={tmp_path / 'data'}", "-o", run], "lines"
    )
    assert not run.exists()


def damaged_checkpoints(checkpoint: Path, folder: Path) -> dict[str, tuple[Path, str]]:
    state = torch.load(checkpoint, weights_only=True)
    cases = {
        "no model": ({k: v for k, v in state.items() if k != "model"}, "no model"),
        "corrupt tokenizer": ({**state, "tokenizers": {"src": b"junk", "tgt": b"junk"}}, "tokenizer"),
        "weights of another size": (
            {**state, "config": {**state["config"], "model": {**state["config"]["model"], "embedding": 24}}},
            "weights do not match its config",
        ),
        "config not a mapping": ({**state, "config": [1, 2]}, "config is not a mapping"),
    }
    out = {}
    for name, (broken, fragment) in cases.items():
        path = folder / f"{name.replace(' ', '-')}.pt"
        torch.save(broken, path)
        out[name] = (path, fragment)
    return out


def test_broken_checkpoints_are_one_line(checkpoint, tmp_path):
    (tmp_path / "in.txt").write_text("1. Mai 1999\n")
    for path, fragment in damaged_checkpoints(checkpoint, tmp_path).values():
        fails_cleanly(["translate", "-m", path, "-i", tmp_path / "in.txt"], fragment, folder=tmp_path)


def test_outputs_are_checked_before_any_work(checkpoint, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("1. Mai 1999\n")
    (tmp_path / "a-folder").mkdir()
    translate = ["translate", "-m", checkpoint, "-i", source]
    fails_cleanly([*translate, "-o", source], "is also this command's input (-i)", folder=tmp_path)
    os.link(source, tmp_path / "hardlink.txt")
    fails_cleanly([*translate, "-o", tmp_path / "hardlink.txt"], "input (-i)", folder=tmp_path)
    fails_cleanly([*translate, "-o", tmp_path / "a-folder"], "is a folder", folder=tmp_path)
    fails_cleanly([*translate, "-o", tmp_path / "missing" / "out.txt"], "does not exist", folder=tmp_path)
    fails_cleanly([*translate, "--attention", source], "input (-i)", folder=tmp_path)
    evaluate = ["eval", "--hyp", source, "--ref", source]
    fails_cleanly([*evaluate, "--details", source], "--details", folder=tmp_path)


def test_a_folder_that_is_not_a_run_is_never_written_into(toy_dir, tmp_path):
    folder = tmp_path / "precious"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.pt").write_bytes(b"the user's own file")
    fails_cleanly(
        ["train", "-c", "toy-luong.yaml", "--set", f"data.dir={toy_dir}", "-o", folder],
        "not an empty folder or a run",
        folder=folder,
    )


def test_a_byte_order_mark_is_not_part_of_the_text(tmp_path):
    (tmp_path / "hyp.txt").write_text("A cat sits on the mat .\n")
    (tmp_path / "ref.txt").write_bytes("\ufeffA cat sits on the mat .\n".encode())
    result = runner.invoke(
        app, ["eval", "--hyp", tmp_path / "hyp.txt", "--ref", tmp_path / "ref.txt", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert '"BLEU": 100.0' in result.stdout


@pytest.mark.parametrize(
    "damage",
    [
        lambda train: (train / "src.tokens").write_bytes((train / "src.tokens").read_bytes()[:-2]),
        lambda train: (train / "tgt.offsets").unlink(),
        lambda train: (train / "src.lengths").write_bytes(b"x"),
        lambda train: (train.parent / "meta.json").write_text("{"),
    ],
    ids=["truncated tokens", "missing offsets", "short lengths", "bad meta.json"],
)
def test_a_damaged_data_cache_is_rebuilt(toy_dir, tmp_path, damage):
    cfg = tiny_config(toy_dir, data={"cache_dir": str(tmp_path / "cache")}, train={"max_steps": 2})
    from nmt.data.prepare import prepare

    first = prepare(cfg)
    tokens = first.train.src.tokens.tolist()  # read before the damage: the arrays map the files
    damage(first.cache_dir / "train")
    again = prepare(cfg)
    assert not again.from_cache and again.train.src.tokens.tolist() == tokens
    assert prepare(cfg).from_cache
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.cache_dir.name]  # nothing left aside


# -- real faults in real processes --------------------------------------------------------------


def without_permission_override(command: list[str]) -> list[str]:
    """As root, the command runs without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (setpriv, from
    util-linux), so file permissions bind it as they bind a user; otherwise it runs as it is."""
    if os.geteuid() != 0:
        return command
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *command]


def test_an_unreadable_input_is_one_line(checkpoint, tmp_path):
    locked = tmp_path / "secret.txt"
    locked.write_text("1. Mai 1999\n")
    locked.chmod(0o000)
    command = [sys.executable, "-m", "nmt", "translate", "-m", str(checkpoint), "-i", str(locked), "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(without_permission_override(command), capture_output=True, text=True, env=env)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(locked) in line and ("not readable" in line or "Permission denied" in line), line


def nmt_process(args, env_extra=None, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "nmt", *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def train_args(toy_dir, run, *extra) -> list:
    return ["train", "-c", "toy-luong.yaml", *sets([f"data.dir={toy_dir}", *BASE, *extra]), "-o", run, "-q"]


def losses(run) -> list[tuple[int, float]]:
    return [(m["step"], m["loss"]) for m in read_metrics(run) if "loss" in m]


def valid_losses(run) -> list[tuple[int, float]]:
    return [(m["step"], m["valid_loss"]) for m in read_metrics(run) if "valid_loss" in m]


@pytest.fixture(scope="module")
def reference(toy_dir, tmp_path_factory) -> Path:
    """The uninterrupted run every interrupted one must reproduce exactly. It is the second run
    of its config: the first one prepares the data cache and measures the machine's weight
    gradients for its shapes, which every run after it reads, so the reference starts from what
    the runs compared with it start from (a CI machine once gave the first run other losses in
    the sixth digit, and only it)."""
    folder = tmp_path_factory.mktemp("reference")
    for name in ("first", "run"):
        proc = nmt_process(train_args(toy_dir, folder / name))
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    return folder / "run"


def wait_for_step(run: Path, proc: subprocess.Popen, step: int) -> None:
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (run / METRICS).exists() and any(s >= step for s, _ in losses(run)):
            return
        time.sleep(0.1)
    raise AssertionError(f"no step {step} logged: {proc.stderr.read() if proc.poll() is not None else ''}")


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_at_a_step_boundary_and_the_resume_is_exact(
    toy_dir, tmp_path, reference, signum, code
):
    run = tmp_path / "run"
    proc = nmt_process(train_args(toy_dir, run))
    wait_for_step(run, proc, 12)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert f"continue with: nmt train --resume {run}" in err.strip().splitlines()[-1]
    step = read_checkpoint(run / CHECKPOINTS / LAST)["progress"]["step"]
    assert 12 <= step < 30
    before = read_metrics(run)
    assert f"at step {step}; continue with" in err  # saved where it stopped, and said so
    result = runner.invoke(app, ["train", "--resume", str(run), "-q"])
    assert result.exit_code == 0, result.output
    assert_resumed_at(run, before, step, LOG_EVERY)
    assert losses(run) == losses(reference)
    assert valid_losses(run) == valid_losses(reference)


def test_kill_9_loses_only_minutes_and_resumes_exactly(toy_dir, tmp_path, reference):
    run = tmp_path / "run"
    proc = nmt_process(train_args(toy_dir, run, "train.valid_every=1000", "train.save_every_minutes=0.0001"))
    wait_for_step(run, proc, 15)
    proc.kill()
    proc.wait()
    step = read_checkpoint(run / CHECKPOINTS / LAST)["progress"]["step"]
    assert step >= 5 and step % 5 == 0  # saved by time, at a log step, with no validation yet
    before = read_metrics(run)
    result = runner.invoke(app, ["train", "--resume", str(run), "-q", "--set", "train.valid_every=10"])
    assert result.exit_code == 0, result.output
    assert_resumed_at(run, before, step, LOG_EVERY)
    assert losses(run) == losses(reference)


def limit_file_size(size: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return apply


def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_run_resumes(toy_dir, tmp_path, reference):
    run = tmp_path / "run"
    first = nmt_process(train_args(toy_dir, run, "train.max_steps=10"))
    assert first.wait(timeout=600) == 0, first.stderr.read()
    size = (run / CHECKPOINTS / LAST).stat().st_size
    before = snapshot(run / CHECKPOINTS)
    full = nmt_process(
        ["train", "--resume", run, "--set", "train.max_steps=30", "-q"], preexec_fn=limit_file_size(size // 2)
    )
    _, err = full.communicate(timeout=600)
    assert full.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and "File too large" in err, err
    assert snapshot(run / CHECKPOINTS) == before  # the last good checkpoints are intact
    step = read_checkpoint(run / CHECKPOINTS / LAST)["progress"]["step"]
    assert step == 10
    metrics = read_metrics(run)
    result = runner.invoke(app, ["train", "--resume", str(run), "--set", "train.max_steps=30", "-q"])
    assert result.exit_code == 0, result.output
    assert_resumed_at(run, metrics, step, LOG_EVERY)
    assert losses(run) == losses(reference)


# -- resume that cannot be fooled ---------------------------------------------------------------


@pytest.fixture
def short_run(toy_dir, tmp_path) -> Path:
    run = tmp_path / "run"
    result = runner.invoke(app, train_args(toy_dir, run, "train.max_steps=10"))
    assert result.exit_code == 0, result.output
    return run


def test_a_second_process_cannot_train_the_same_run(short_run):
    lock = RunLock(short_run)
    try:
        fails_cleanly(
            ["train", "--resume", short_run, "--set", "train.max_steps=20"], f"pid {os.getpid()} is training"
        )
    finally:
        lock.release()


def test_a_finished_run_says_so_and_does_nothing(short_run):
    before = snapshot(short_run / CHECKPOINTS)
    metrics = (short_run / METRICS).read_text()
    result = runner.invoke(app, ["train", "--resume", str(short_run), "-q"])
    assert result.exit_code == 0 and "already finished: reached train.max_steps (10)" in result.stdout
    assert snapshot(short_run / CHECKPOINTS) == before and (short_run / METRICS).read_text() == metrics


def test_an_edited_config_is_caught_on_resume(short_run):
    config = short_run / "config.yaml"
    text = config.read_text()
    config.write_text(text.replace("hidden: 256", "hidden: 64").replace("lr: 0.003", "lr: 0.01"))
    fails_cleanly(["train", "--resume", short_run], "model.decoder.hidden (256 -> 64)", "train.lr")
    config.write_text(text)
    before = read_metrics(short_run)
    step = read_checkpoint(short_run / CHECKPOINTS / LAST)["progress"]["step"]
    result = runner.invoke(app, ["train", "--resume", str(short_run), "--set", "train.max_steps=15", "-q"])
    assert result.exit_code == 0, result.output
    assert "resuming with train.max_steps: 10 -> 15" in (short_run / "train.log").read_text()
    assert step == 10
    assert_resumed_at(short_run, before, step, LOG_EVERY)


def test_a_torn_metrics_line_and_a_damaged_best_are_repaired_on_resume(short_run):
    with open(short_run / METRICS, "a") as f:
        f.write('{"step": 11, "lo')  # a crash in the middle of an append
    (short_run / CHECKPOINTS / "best.pt").write_bytes(b"")  # a full disk while copying it
    before = read_metrics(short_run)  # the torn line is not one of them
    step = read_checkpoint(short_run / CHECKPOINTS / LAST)["progress"]["step"]
    result = runner.invoke(app, ["train", "--resume", str(short_run), "--set", "train.max_steps=15", "-q"])
    assert result.exit_code == 0, result.output
    assert [m["step"] for m in read_metrics(short_run) if "loss" in m] == [5, 10, 15]
    assert step == 10
    assert_resumed_at(short_run, before, step, LOG_EVERY)
    read_checkpoint(short_run / CHECKPOINTS / "best.pt")
    assert "best.pt was missing or damaged" in (short_run / "train.log").read_text()


def test_a_run_killed_before_its_first_checkpoint_resumes_afresh(toy_dir, tmp_path, reference):
    run = tmp_path / "run"
    proc = nmt_process(train_args(toy_dir, run, "train.save_every_minutes=0", "train.valid_every=1000"))
    wait_for_step(run, proc, 5)
    proc.kill()
    proc.wait()
    assert not (run / CHECKPOINTS / LAST).exists()
    before = read_metrics(run)  # the killed session's lines: step 5 at least
    result = runner.invoke(app, ["train", "--resume", str(run), "-q"])
    assert result.exit_code == 0, result.output
    assert_started_afresh(run, before, LOG_EVERY)
    assert losses(run) == losses(reference)
