"""The weight gradient's backend, and the output layer's products', measured per machine
(`nmt.train.backends`): both backends give F.linear's results, a shape is measured once and
cached for the machine, a run records its choices and a resumed run computes with them."""

import json
import os
import re

import pytest
import torch
import torch.nn.functional as F

from nmt.checkpoint import read_checkpoint
from nmt.cli.app import app
from nmt.errors import NMTError
from nmt.model import linear
from nmt.rundir import CHECKPOINTS, LAST
from nmt.train import backends
from nmt.train.backends import BackendChoices
from tests.train.test_trainer import nmt_train, runner


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own machine cache (conftest puts linear's choice back afterwards)."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(backends.FORCED, raising=False)


@pytest.mark.skipif(not linear.ONEDNN, reason="this torch has no oneDNN")
@pytest.mark.parametrize("backend", sorted(linear.WEIGHT_GRADIENT))
def test_each_backend_gives_the_weight_gradient_of_f_linear(backend, monkeypatch):
    monkeypatch.setattr(linear, "choose_weight_gradient", lambda *shape: backend)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, 24, generator=g, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(40, 24, generator=g))
    bias = torch.nn.Parameter(torch.randn(40, generator=g))
    upstream = torch.randn(3, 7, 40, generator=g)
    (linear.linear(x, weight, bias) * upstream).sum().backward()
    ours = (x.grad, weight.grad, bias.grad)
    x.grad = weight.grad = bias.grad = None
    (F.linear(x, weight, bias) * upstream).sum().backward()
    for mine, reference in zip(ours, (x.grad, weight.grad, bias.grad), strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not linear.ONEDNN, reason="this torch has no oneDNN")
@pytest.mark.parametrize("backend", sorted(linear.OUTPUT_PRODUCT))
def test_each_backend_gives_the_output_layers_products_of_f_linear(backend, monkeypatch):
    monkeypatch.setattr(linear, "choose_output_product", lambda *shape: backend)
    g = torch.Generator().manual_seed(0)
    x, grad = torch.randn(30, 24, generator=g), torch.randn(30, 40, generator=g)
    weight = torch.nn.Parameter(torch.randn(40, 24, generator=g))
    bias = torch.randn(40, generator=g)
    expected = F.linear(x, weight, bias), grad @ weight
    for _ in range(2):  # and again after the weight changed (a step)
        logits = linear.parameter_linear(x, weight, bias)
        torch.testing.assert_close(logits, expected[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(linear.parameter_linear(grad, weight, transposed=True), expected[1])
        with torch.no_grad():
            weight.mul_(0.5)
        expected = F.linear(x, weight, bias), grad @ weight


def test_the_output_layers_products_are_chosen_by_shape_and_kind(monkeypatch):
    calls = []
    monkeypatch.setattr(
        backends, "time_backends", lambda *shape: calls.append(shape) or {"onednn": 2.0, "mkl": 1.0}
    )
    choices = BackendChoices()
    choices.install()
    assert linear.choose_output_product(1000, 8000, 512, False) == "mkl"
    assert linear.choose_output_product(900, 512, 8000, True) == "mkl"
    assert linear.choose_weight_gradient(1000, 8000, 512) == "mkl"
    assert calls == [
        (1024, 8000, 512, "logits"),
        (1024, 512, 8000, "input gradient"),
        (1024, 8000, 512, "weight gradient"),
    ]
    assert set(choices.chosen) == {
        "logits 1024 x 8000 x 512",
        "input gradient 1024 x 512 x 8000",
        "1024 x 8000 x 512",
    }
    report = backends.choices_report().splitlines()[1:]
    assert [line.split()[0] for line in report] == ["input", "1024", "logits"]  # by shape, then name


def test_the_output_layers_products_are_timed_with_their_layout_once_a_step():
    timings = backends.time_backends(64, 96, 32, "logits") | backends.time_backends(
        64, 32, 96, "input gradient"
    )
    assert set(timings) == set(linear.OUTPUT_PRODUCT) and all(ms > 0 for ms in timings.values())


def test_a_run_recorded_before_the_output_layers_choice_keeps_it_on_onednn(monkeypatch):
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    older = BackendChoices.for_run({"backends": {"1024 x 8000 x 512": "mkl"}}, measure=True)
    assert older.choose(1000, 8000, 512, "logits") == "onednn"  # what it ran on
    assert older.choose(1000, 512, 8000, "input gradient") == "onednn"
    assert older.choose(64, 2048, 512) == "mkl"  # a weight gradient it had not met: measured
    newer = BackendChoices.for_run({"backends": {"logits 1024 x 8000 x 512": "mkl"}}, measure=True)
    assert newer.choose(1000, 8000, 512, "logits") == "mkl"
    assert newer.choose(1000, 512, 8000, "input gradient") == "mkl"  # measured


def test_a_shape_is_measured_once_and_cached_for_the_machine(monkeypatch):
    calls = []

    def timed(rows, out, inner, kind):
        calls.append((rows, out, inner, kind))
        return {"onednn": 2.0, "mkl": 1.0}

    monkeypatch.setattr(backends, "time_backends", timed)
    choices = BackendChoices()
    assert choices.choose(900, 800, 512) == "mkl"
    assert choices.choose(1000, 800, 512) == "mkl"  # the same bucket: not measured again
    assert calls == [(1024, 800, 512, "weight gradient")]
    cached = json.loads(backends.cache_file().read_text())[backends.machine_key()]
    assert cached == {"1024 x 800 x 512": {"choice": "mkl", "ms": {"onednn": 2.0, "mkl": 1.0}}}

    monkeypatch.setattr(backends, "time_backends", lambda *shape: pytest.fail("measured again"))
    assert BackendChoices().choose(600, 800, 512) == "mkl"  # another process on this machine
    line = r"\n  1024 x 800 x 512 +mkl +\(mkl 1.00 ms, onednn 2.00 ms\)$"
    assert re.search(line, backends.choices_report())


def test_processes_that_meet_a_shape_after_another_measured_it_take_its_choice(monkeypatch):
    """Two trainings of a machine: one that started before the other measured a shape reads
    the file again rather than measure on its own, and a measurement saved second gives way to
    the first, so both compute with one backend (two runs of one config apart by rounding, one
    of them the reference of an exact-resume test, was a CI failure)."""
    first, second = BackendChoices(), BackendChoices()  # both started with an empty cache
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    assert first.choose(64, 200, 256) == "mkl"
    monkeypatch.setattr(backends, "time_backends", lambda *shape: pytest.fail("measured again"))
    assert second.choose(64, 200, 256) == "mkl"

    late = BackendChoices()
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 1.0, "mkl": 2.0})
    monkeypatch.setattr(backends.CACHE, "entries", lambda machine: ({}, ""))  # measured at once
    assert late.choose(64, 300, 256) == "onednn"
    other = BackendChoices()
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    assert other.choose(64, 300, 256) == "onednn"  # saved second: the file's choice wins


def test_a_real_measurement_times_both_backends_and_keeps_the_faster():
    choices = BackendChoices()
    choice = choices.choose(30, 64, 48)
    entry = json.loads(backends.cache_file().read_text())[backends.machine_key()]["32 x 64 x 48"]
    assert set(entry["ms"]) == set(linear.WEIGHT_GRADIENT) and all(ms > 0 for ms in entry["ms"].values())
    assert choice == entry["choice"] == backends.faster(entry["ms"])


def test_another_backend_is_chosen_only_when_clearly_faster():
    assert backends.faster({"onednn": 10.0, "mkl": 8.9}) == "mkl"
    assert backends.faster({"onednn": 10.0, "mkl": 9.5}) == "onednn"  # a near tie stays as it was
    assert backends.faster({"onednn": 10.0, "mkl": 12.0}) == "onednn"


def test_damaged_cache_entries_are_measured_again(monkeypatch):
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    backends.cache_file().parent.mkdir(parents=True)
    backends.cache_file().write_text(json.dumps({backends.machine_key(): {"64 x 8 x 8": {"choice": "blas"}}}))
    assert BackendChoices().choose(64, 8, 8) == "mkl"
    backends.cache_file().write_text("[1, 2]")
    assert BackendChoices().choose(64, 8, 16) == "mkl"
    assert BackendChoices({"64 x 8 x 32": "blas"}).choose(64, 8, 32) == "mkl"  # a recorded unknown name


def test_a_run_from_before_recorded_choices_resumes_on_the_default(monkeypatch):
    monkeypatch.setattr(backends, "time_backends", lambda *shape: pytest.fail("measured"))
    old = BackendChoices.for_run({"progress": {}}, measure=True)
    assert old.choose(1024, 8000, 512) == "onednn" and old.chosen == {"1024 x 8000 x 512": "onednn"}
    monkeypatch.setenv(backends.FORCED, "mkl")  # what the environment forced is recorded too
    forced = BackendChoices()
    assert forced.choose(64, 8, 8) == "mkl" and forced.chosen == {"64 x 8 x 8": "mkl"}


def test_recorded_choices_win_and_the_environment_wins_over_all(monkeypatch):
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 1.0, "mkl": 2.0})
    choices = BackendChoices({"64 x 800 x 512": "mkl"})
    assert choices.choose(64, 800, 512) == "mkl"  # a resumed run: what it computed with
    assert choices.choose(64, 800, 256) == "onednn"  # a shape it had not met: measured
    assert BackendChoices(measure=False).choose(8, 8, 8) == "onednn"  # no cache, no measuring
    monkeypatch.setenv(backends.FORCED, "mkl")
    assert BackendChoices({"64 x 800 x 512": "onednn"}).choose(64, 800, 512) == "mkl"
    monkeypatch.setenv(backends.FORCED, "blas")
    with pytest.raises(NMTError, match="NMT_WEIGHT_GRADIENT='blas' is not a backend; use one of onednn, mkl"):
        BackendChoices()


def test_a_forced_name_with_control_characters_is_quoted(monkeypatch):
    monkeypatch.setenv(backends.FORCED, "mkl\x1b[2K\ronednn")  # a terminal would show "onednn"
    with pytest.raises(NMTError) as refused:
        BackendChoices()
    assert "NMT_WEIGHT_GRADIENT='mkl\\x1b[2K\\ronednn' is not a backend" in str(refused.value)


def test_the_environment_replacing_a_resumed_runs_backends_says_so_and_records_what_runs(monkeypatch):
    monkeypatch.setattr(backends, "time_backends", lambda *shape: pytest.fail("measured"))
    monkeypatch.setenv(backends.FORCED, "mkl")
    resumed = BackendChoices.for_run({"backends": {"1024 x 8000 x 512": "onednn"}}, measure=True)
    assert resumed.choose(1000, 8000, 512) == "mkl"
    assert resumed.chosen == {"1024 x 8000 x 512": "mkl"}  # what ran, so the next resume computes alike
    (note,) = resumed.notes
    assert note.startswith("NMT_WEIGHT_GRADIENT=mkl replaces the onednn this run computed with until now")
    assert "not bit-identical" in note
    assert BackendChoices.for_run({"backends": {"1024 x 8000 x 512": "mkl"}}, measure=True).notes == []


WRONG_TYPES = {
    "64 x 8 x 8": {"choice": ["mkl"], "ms": {"mkl": 1.0}},
    "128 x 8 x 8": {"choice": "mkl", "ms": "1.0"},
    "256 x 8 x 8": {"choice": "mkl", "ms": [1.0, 2.0]},
    "512 x 8 x 8": {"choice": "mkl", "ms": {"mkl": "1.0", "onednn": None}},
    "1024 x 8 x 8": {"choice": None},
    "1" * 5000 + " x 8 x 8": {"choice": "mkl", "ms": {"mkl": 1.0}},
    "2048 x 8 x 8": {"choice": "mkl", "ms": {"mkl": 1.0, "onednn": 2.0}},  # the one valid entry
}


def test_entries_of_the_wrong_types_are_measured_again_and_the_report_shows_the_valid_ones(monkeypatch):
    backends.cache_file().parent.mkdir(parents=True)
    backends.cache_file().write_text(json.dumps({backends.machine_key(): WRONG_TYPES, "other": 3}))
    report = backends.choices_report()
    assert report.splitlines()[1:] == ["  2048 x 8 x 8         mkl     (mkl 1.00 ms, onednn 2.00 ms)"]
    measured = []
    monkeypatch.setattr(
        backends, "time_backends", lambda *shape: measured.append(shape) or {"onednn": 1.0, "mkl": 2.0}
    )
    choices = BackendChoices()
    assert [choices.choose(rows, 8, 8) for rows in (64, 128, 2048)] == ["onednn", "onednn", "mkl"]
    assert measured == [(64, 8, 8, "weight gradient"), (128, 8, 8, "weight gradient")]


def test_env_bench_reads_a_damaged_cache_without_a_traceback():
    backends.cache_file().parent.mkdir(parents=True)
    backends.cache_file().write_text(json.dumps({backends.machine_key(): WRONG_TYPES}))
    result = runner.invoke(app, ["env", "--bench"])
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert "2048 x 8 x 8" in result.output and "64 x 8 x 8 " not in result.output


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "too-large"])
def test_a_cache_that_is_not_a_small_regular_file_is_ignored_with_one_line_and_left_as_it_is(
    kind, monkeypatch
):
    path = backends.cache_file()
    path.parent.mkdir(parents=True)
    make = {
        "fifo": lambda: os.mkfifo(path),
        "dev-zero": lambda: path.symlink_to("/dev/zero"),
        "folder": lambda: path.mkdir(),
        "too-large": lambda: path.write_bytes(b" " * (2 << 20)),
    }
    make[kind]()
    before = os.lstat(path)
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    choices = BackendChoices()  # a FIFO without a writer would hang here; /dev/zero fill the memory
    (note,) = choices.notes
    assert note.startswith(f"{path}: ") and note.endswith(
        "ignored, so this process measures again and keeps what it finds"
    )
    assert choices.choose(64, 8, 8) == "mkl"  # measured, kept by this process
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino, after.st_size) == (before.st_mode, before.st_ino, before.st_size)
    assert backends.choices_report() == note  # nmt env --bench says the same line


@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
def test_a_lock_file_that_is_not_a_regular_file_leaves_the_choice_to_this_process(
    kind, tmp_path, monkeypatch
):
    lock = backends.cache_file().with_name(".backends.json.lock")
    lock.parent.mkdir(parents=True)
    make = {"fifo": os.mkfifo, "folder": os.mkdir, "link": lambda p: p.symlink_to(tmp_path / "elsewhere")}
    make[kind](lock)
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    assert BackendChoices().choose(64, 8, 8) == "mkl"  # a FIFO without a reader would hang the write
    assert not backends.cache_file().exists() and not (tmp_path / "elsewhere").exists()


def test_an_unwritable_cache_leaves_the_choice_to_this_process(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("NMT_CACHE_DIR", str(blocker / "under-a-file"))
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    assert BackendChoices().choose(64, 8, 8) == "mkl"


def test_a_run_records_its_choices_and_a_resumed_run_keeps_them(toy_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    run = tmp_path / "run"
    # teacher forcing throughout: the output layer's whole-step products (and the validation's)
    steps = ["train.max_steps=4", "train.valid_every=4", "train.teacher_forcing_ratio=1"]
    nmt_train(toy_dir, run, *steps, "train.device=cpu")
    recorded = read_checkpoint(run / CHECKPOINTS / LAST)["backends"]
    assert recorded and set(recorded.values()) == {"mkl"}
    assert {re.sub(r"[\d x]+$", "", key) for key in recorded} == {"", "logits", "input gradient"}

    seen = []
    install = BackendChoices.install
    monkeypatch.setattr(
        BackendChoices, "install", lambda self: seen.append(dict(self.chosen)) or install(self)
    )
    backends.cache_file().unlink()  # the machine forgot; the run did not
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 1.0, "mkl": 2.0})
    resumed = runner.invoke(app, ["train", "--resume", str(run), "--set", "train.max_steps=8", "-q"])
    assert resumed.exit_code == 0, resumed.output
    assert seen == [recorded]
    after = read_checkpoint(run / CHECKPOINTS / LAST)["backends"]  # with any shape met since
    assert {key: after[key] for key in recorded} == recorded


def test_training_beside_a_fifo_cache_logs_one_line_and_trains(toy_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(backends, "time_backends", lambda *shape: {"onednn": 2.0, "mkl": 1.0})
    backends.cache_file().parent.mkdir(parents=True)
    os.mkfifo(backends.cache_file())
    run = tmp_path / "run"
    nmt_train(toy_dir, run, "train.max_steps=2", "train.valid_every=2", "train.device=cpu")
    log = (run / "train.log").read_text()
    assert log.count("not a regular file (a FIFO); ignored") == 1
    assert set(read_checkpoint(run / CHECKPOINTS / LAST)["backends"].values()) == {"mkl"}
