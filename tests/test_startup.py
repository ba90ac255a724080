"""`nmt train` before its first step (issue 42): everything that can be checked is checked
before the run folder is made, a signal during start-up stops the command cleanly and leaves
nothing behind, and the loser of two trainings started into one folder is told who holds it."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nmt.cli import app
from nmt.data.toy import write_toy_corpus
from nmt.errors import NMTError
from nmt.rundir import CHECKPOINTS, LAST, METRICS, prepare_run_dir
from nmt.train.signals import StopNow, StopRequest
from nmt.train.trainer import Trainer
from tests.conftest import tiny_config
from tests.test_faults import nmt_process, snapshot

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
STARTING = "during start-up, before the first step: no run was made"


def nmt(*args) -> subprocess.Popen:
    return nmt_process(args)


def train_args(data: Path, cache: Path, run: Path, *sets: str) -> list:
    settings = [f"data.dir={data}", f"data.cache_dir={cache}", "train.max_steps=300", *sets]
    return ["train", "-c", "toy-luong.yaml", *[x for s in settings for x in ("--set", s)], "-o", run, "-q"]


def one_line(text: str) -> str:
    assert "Traceback" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Big enough that the cache takes a while to build (its partial folder lives ~0.1 s)."""
    out = tmp_path_factory.mktemp("startup-corpus")
    write_toy_corpus(out, seed=5, sizes={"train": 12000, "valid": 100, "test": 10})
    return out


# -- signals during start-up ------------------------------------------------------------------


def wait_for(moment: str, cache: Path, proc: subprocess.Popen) -> None:
    """Until `moment`: seconds since the start, `partial` (the cache is being written) or `cache`
    (the cache is whole: the held-out splits and the model come next)."""
    if moment.endswith("s"):
        time.sleep(float(moment[:-1]))
        return
    pattern = "*.partial-*" if moment == "partial" else "*/meta.json"
    deadline = time.time() + 120
    while not list(cache.glob(pattern)) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)


@pytest.mark.parametrize(
    "signum,moment",
    [
        (signal.SIGINT, "0.3s"),  # importing torch
        (signal.SIGINT, "1.0s"),  # the data: scan, tokenizer
        (signal.SIGINT, "partial"),  # the cache being written
        (signal.SIGINT, "cache"),  # the held-out splits, the model
        (signal.SIGTERM, "0.6s"),
        (signal.SIGTERM, "partial"),
        (signal.SIGTERM, "cache"),
    ],
)
def test_a_signal_during_start_up_stops_it_and_leaves_nothing(corpus, tmp_path, signum, moment):
    cache, run = tmp_path / "cache", tmp_path / "run"
    proc = nmt(*train_args(corpus, cache, run))
    wait_for(moment, cache, proc)
    assert proc.poll() is None, f"start-up ended before {moment}: {proc.stderr.read()}"
    assert not run.exists(), f"the run folder exists at {moment}: training may have begun"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    name = "SIGTERM" if signum == signal.SIGTERM else "interrupted"
    assert one_line(err) == f"{name} {STARTING}"
    assert not run.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.")], "a staging folder"
    assert not list(cache.glob("*.partial-*")), "a half-written cache"


def test_a_signal_before_the_first_step_of_a_resume_leaves_the_run_as_it_was(toy_dir, tmp_path):
    run = tmp_path / "run"
    cfg = tiny_config(toy_dir, train={"max_steps": 2, "valid_every": 2, "log_every": 1, "device": "cpu"})
    prepare_run_dir(run, cfg).release()
    Trainer(cfg, run, quiet=True).train()
    before = snapshot(run / CHECKPOINTS), (run / METRICS).read_text()
    proc = nmt("train", "--resume", run, "--set", "train.max_steps=400", "-q")
    time.sleep(0.5)  # importing torch
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert one_line(err) == (
        f"interrupted during start-up, before the first step: nothing trained; "
        f"continue with: nmt train --resume {run}"
    )
    assert (snapshot(run / CHECKPOINTS), (run / METRICS).read_text()) == before


def function_of(module: str):
    """A function whose code belongs to `module`; it returns its own frame (what a signal
    handler is given when the signal lands there)."""
    namespace = {"__name__": module, "sys": sys}
    exec("def here():\n    return sys._getframe()\n", namespace)
    return namespace["here"]


def frame_of(module: str):
    return function_of(module)()


def test_a_start_up_stop_waits_in_a_library_and_is_raised_when_nmts_code_runs():
    in_torch, in_nmt = frame_of("torch.nn.modules.rnn"), function_of("nmt.data.cleaning")
    request = StopRequest(starting=True)
    try:
        request.handle(signal.SIGTERM, in_torch)  # noted, not raised
        assert request.signum == signal.SIGTERM and not request.raised
        sorted([3, 1, 2], key=lambda x: -x)  # more library code runs on
        with pytest.raises(StopNow) as stop:
            in_nmt()  # the first call into nmt's code
        assert stop.value.signum == signal.SIGTERM and request.raised
        assert sys.gettrace() is None  # the tracer is gone with it
        request.handle(signal.SIGINT, in_torch)  # clean-up is not interrupted
    finally:
        request.close()


def test_a_start_up_stop_in_nmts_own_code_is_raised_at_once_and_a_second_one_anywhere():
    request = StopRequest(starting=True)
    with pytest.raises(StopNow):
        request.handle(signal.SIGINT, frame_of("nmt.data.prepare"))
    request = StopRequest(starting=True)
    try:
        request.handle(signal.SIGINT, frame_of("numpy"))
        with pytest.raises(StopNow):
            request.handle(signal.SIGINT, frame_of("nmt.cli.app"))  # the second, wherever it lands
    finally:
        request.close()


def test_a_stop_a_library_swallowed_is_raised_again_at_the_next_check():
    request = StopRequest(starting=True)
    with contextlib.suppress(KeyboardInterrupt):  # "Exception ignored in": say, a weakref callback
        request.handle(signal.SIGINT, frame_of("nmt.model.linear"))
    with pytest.raises(StopNow):
        request.check()  # the next safe point of start-up stops all the same


def test_once_training_runs_the_first_signal_is_a_request():
    request = StopRequest(starting=True)
    request.started()
    request.handle(signal.SIGINT, frame_of("nmt.train.trainer"))
    assert request.signum == signal.SIGINT and sys.gettrace() is None  # the step boundary acts on it
    with pytest.raises(StopNow):
        request.handle(signal.SIGINT, frame_of("torch"))


# -- two trainings into one folder ------------------------------------------------------------


def test_the_loser_of_two_trainings_started_into_one_folder_is_told_who_holds_it(toy_dir, tmp_path):
    run, config = tmp_path / "run", tmp_path / "tiny.yaml"
    config.write_text(tiny_config(toy_dir, data={"cache_dir": str(tmp_path / "cache")}).to_yaml())
    args = ["train", "-c", config, "--set", "train.max_steps=2", "-o", run, "-q"]
    procs = [nmt(*args), nmt(*args)]
    results = {p.pid: (p.wait(timeout=300), p.stderr.read()) for p in procs}
    assert sorted(code for code, _ in results.values()) == [0, 2], results
    (winner,) = [pid for pid, (code, _) in results.items() if code == 0]
    (err,) = [err for code, err in results.values() if code == 2]
    assert one_line(err) == (
        f"error: {run}: another nmt train (pid {winner}) holds this folder: it started a run there "
        "first; choose another --output"
    )
    assert (run / CHECKPOINTS / LAST).is_file()
    assert sorted(os.listdir(tmp_path)) == ["cache", "run", "tiny.yaml"]  # no staging folder left


def test_a_run_made_while_this_one_was_getting_ready_is_not_replaced(toy_dir, tmp_path, monkeypatch):
    """Both passed the first check; the other renamed its folder into place first."""
    run, cfg = tmp_path / "run", tiny_config(toy_dir)
    winner = prepare_run_dir(run, cfg)
    before = snapshot(run)
    monkeypatch.setattr("nmt.rundir.check_new_run_dir", lambda run_dir: None)
    with pytest.raises(NMTError, match=rf"another nmt train \(pid {os.getpid()}\) holds this folder"):
        prepare_run_dir(run, cfg)
    winner.release()
    assert snapshot(run) == before
    assert os.listdir(tmp_path) == ["run"]


def test_a_stopped_start_up_gives_back_the_empty_folder_it_was_given(toy_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lock = prepare_run_dir(run, tiny_config(toy_dir))
    assert (run / "config.yaml").is_file()
    lock.discard()
    assert run.is_dir() and not any(run.iterdir())


# -- checked before the run folder is made ----------------------------------------------------


def split_folder(tmp_path: Path, toy_dir: Path, **replace: str) -> Path:
    """A copy of the toy data whose files named in `replace` (`valid.iso="", train.human="fifo"`)
    are empty or named pipes."""
    data = tmp_path / "data"
    data.mkdir()
    for path in toy_dir.glob("*.*"):
        (data / path.name).write_bytes(path.read_bytes())
    for name, what in replace.items():
        target = data / name.replace("_", ".")
        target.unlink()
        if what == "fifo":
            os.mkfifo(target)
        else:
            target.write_text(what)
    return data


def fails_before_starting(args: list, *fragments: str) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    line = one_line(result.stderr)
    for fragment in fragments:
        assert fragment in line, line
    return line


EMPTY_OR_PIPE = {
    "empty validation split": (
        {"valid_human": "", "valid_iso": ""},
        "valid.human and {data}/valid.iso: the validation split is empty, and training validates on it",
    ),
    "empty training split": (
        {"train_human": "", "train_iso": ""},
        "train.human and {data}/train.iso: the training split is empty",
    ),
    "training file is a pipe": (
        {"train_human": "fifo"},
        "train.human: is a named pipe; nmt reads data files",
    ),
    "validation file is a pipe": ({"valid_iso": "fifo"}, "valid.iso: is a named pipe; nmt reads data files"),
}


@pytest.mark.parametrize("case", EMPTY_OR_PIPE)
def test_an_empty_split_or_a_named_pipe_fails_before_the_run_folder(case, toy_dir, tmp_path):
    replace, fragment = EMPTY_OR_PIPE[case]
    data = split_folder(tmp_path, toy_dir, **replace)
    run, cache = tmp_path / "run", tmp_path / "cache"
    fails_before_starting(train_args(data, cache, run), f"{data}/" + fragment.format(data=data))
    assert not run.exists() and not cache.exists()  # refused before the tokenizer and the cache


def test_an_output_under_a_file_fails_before_the_data_is_prepared(toy_dir, tmp_path):
    (tmp_path / "taken").write_text("a file")
    run, cache = tmp_path / "taken" / "run", tmp_path / "cache"
    fails_before_starting(train_args(toy_dir, cache, run), f"{tmp_path / 'taken'} is a file, not a folder")
    assert not cache.exists()


def test_an_output_folder_without_write_permission_fails_before_the_data_is_prepared(toy_dir, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    run, cache = locked / "run", tmp_path / "cache"
    command = [sys.executable, "-m", "nmt", *map(str, train_args(toy_dir, cache, run))]
    if os.geteuid() == 0:  # root: without the capabilities that override file permissions
        command = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override", *command]
    proc = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert one_line(proc.stderr) == (
        f"error: {run}: cannot make a folder in {locked} (Permission denied); "
        "check its permissions or choose another --output"
    )
    assert not cache.exists() and os.listdir(locked) == []


def test_a_new_run_folder_gets_the_permissions_of_a_folder_made_by_hand(toy_dir, tmp_path):
    old = os.umask(0o022)
    try:
        prepare_run_dir(tmp_path / "run", tiny_config(toy_dir)).release()
    finally:
        os.umask(old)
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o755  # mkdtemp made it 0700


# -- the environment ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", ""])
def test_a_thread_count_openmp_cannot_read_is_one_line_before_anything_starts(value):
    proc = nmt_process(["translate", "-m", "missing"], env_extra={"OMP_NUM_THREADS": value})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert one_line(err) == (
        f"error: OMP_NUM_THREADS={value!r} is not a number of threads; set a whole number of at least 1 "
        "(e.g. OMP_NUM_THREADS=2), or unset it and nmt uses the cores that are free"
    )  # and not libgomp's "Invalid value" lines


@pytest.mark.parametrize("value", ["2", " 1 ", "2,1"])
def test_thread_counts_openmp_reads_pass(value):
    proc = nmt_process(["translate", "-m", "missing"], env_extra={"OMP_NUM_THREADS": value})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and one_line(err) == "error: missing: checkpoint not found"


def test_plots_under_a_home_matplotlib_cannot_write_to_print_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".config").write_text("")  # its config folder cannot be made: as under a read-only home
    env = {k: v for k, v in ENV.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    script = "from nmt.plots import pyplot; fig = pyplot().figure(); print('drawn')"
    done = subprocess.run(
        [sys.executable, "-c", script], env={**env, "HOME": str(home)}, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "drawn\n", "")
