"""The training engine: exact resume, crash safety, schedules, losses, budgets, DDP."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from nmt.checkpoint import read_checkpoint
from nmt.cli import app
from nmt.config import TrainConfig
from nmt.errors import NMTError
from nmt.rundir import prepare_run_dir, read_metrics, resume_config
from nmt.train.loss import loss_sums, teacher_forcing_ratio
from nmt.train.schedule import Schedule
from nmt.train.trainer import Trainer
from nmt.vocab import PAD
from tests.conftest import assert_image, assert_resumed_at, tiny_config

runner = CliRunner()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = [
    "model.embedding=16",
    "model.encoder.hidden=16",
    "model.decoder.hidden=32",
    "tokenizer.vocab_size=120",
    "train.log_every=5",
    "train.valid_every=10",
    "decode.max_len=12",
    "model.dropout=0.3",
    "train.teacher_forcing_ratio=0.8",
]


def sets(items):
    return [x for item in items for x in ("--set", item)]


def train_args(toy_dir, out, *extra) -> list[str]:
    """The `nmt train` arguments of a toy run into `out`."""
    overrides = sets([*BASE, f"data.dir={toy_dir}", *extra])
    return ["train", "-c", "toy-luong.yaml", *overrides, "--output", str(out), "-q"]


def nmt_train(toy_dir, out, *extra, check=True):
    result = runner.invoke(app, train_args(toy_dir, out, *extra))
    if check:
        assert result.exit_code == 0, result.output
    return result


def losses(run):
    return [(m["step"], m["loss"]) for m in read_metrics(run) if "loss" in m]


def train_command(toy_dir, out, *extra):
    """`nmt train` as a separate process, so a test can kill or interrupt it."""
    return [sys.executable, "-m", "nmt", *train_args(toy_dir, out, "train.max_steps=100000", *extra)]


def subprocess_env():
    return {**os.environ, "PYTHONPATH": ROOT}  # same threads as this process: bit-identical maths


def test_same_seed_same_losses_and_exact_resume_after_kill_9(toy_dir, tmp_path):
    nmt_train(toy_dir, tmp_path / "a", "train.max_steps=40")
    nmt_train(toy_dir, tmp_path / "b", "train.max_steps=40")
    assert losses(tmp_path / "a") == losses(tmp_path / "b")  # bit-identical, not approximately

    killed = tmp_path / "killed"
    cmd = train_command(toy_dir, killed)
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (killed / "metrics.jsonl").exists() and any(s >= 25 for s, _ in losses(killed)):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read().decode()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    step = read_checkpoint(killed / "checkpoints" / "last.pt")["progress"]["step"]
    assert 10 <= step < 40
    before = read_metrics(killed)
    result = runner.invoke(app, ["train", "--resume", str(killed), "--set", "train.max_steps=40", "-q"])
    assert result.exit_code == 0, result.output
    assert_resumed_at(killed, before, step, log_every=5)
    assert losses(killed) == losses(tmp_path / "a")


def test_a_crash_while_saving_leaves_the_previous_checkpoint_loadable(toy_dir, tmp_path, monkeypatch):
    from nmt.checkpoint import load_checkpoint
    from nmt.fileio import atomic_write

    nmt_train(toy_dir, tmp_path / "run", "train.max_steps=10")
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    before = last.read_bytes()

    def crash_half_way(f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # the process dies in the middle of the write

    with pytest.raises(KeyboardInterrupt):
        atomic_write(last, crash_half_way)
    assert last.read_bytes() == before
    assert load_checkpoint(last).state["progress"]["step"] == 10
    assert not [p for p in last.parent.iterdir() if p.name.endswith(".tmp")]


def test_early_stopping_keeps_best_and_averages(toy_dir, tmp_path):
    run = tmp_path / "run"
    nmt_train(
        toy_dir,
        run,
        "train.max_steps=1000",
        "train.valid_every=5",
        "train.lr=0",
        "train.metric=loss",
        "train.patience=2",
        "train.keep_best=2",
        "train.average_last=3",
    )
    valid = [m for m in read_metrics(run) if "valid_loss" in m]
    assert [m["step"] for m in valid] == [5, 10, 15]  # lr 0: nothing improves after the first
    files = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert files == ["averaged.pt", "best.pt", "last.pt", "step-10.pt", "step-15.pt", "step-5.pt"]
    assert any("valid_bleu_averaged" in m for m in read_metrics(run))


def test_valid_share_skips_validations_and_says_so(toy_dir, tmp_path):
    """At a share no toy validation fits, the first still runs (the estimate comes from it),
    the scheduled ones after it are skipped with a log line, and the last always runs."""
    run = tmp_path / "v"
    nmt_train(toy_dir, run, "train.max_steps=6", "train.valid_every=1", "train.valid_share=0.0001")
    assert [m["step"] for m in read_metrics(run) if "valid_loss" in m] == [1, 6]
    log = (run / "train.log").read_text()
    assert log.count("validation skipped") == 4  # steps 2-5; 6 is the last
    assert "step 2: validation skipped: with it, validating would pass train.valid_share, 0.0001 of" in log


def test_a_time_budget_says_how_many_steps_it_buys(toy_dir, tmp_path):
    """At the first log line (step 5), once: the steps an hour buys at the toy's speed."""
    run = tmp_path / "b"
    nmt_train(toy_dir, run, "train.max_steps=10", "train.max_time=3600")
    bought = re.findall(
        r"train.max_time \(3600 s\) buys about (\d+) steps at this speed \(([\d.e-]+) s a step\)",
        (run / "train.log").read_text(),
    )
    assert len(bought) == 1
    steps, per_step = int(bought[0][0]), float(bought[0][1])
    assert steps == pytest.approx(5 + 3600 / per_step, rel=0.02)


def test_budgets_stop_cleanly(toy_dir, tmp_path):
    result = nmt_train(toy_dir, tmp_path / "t", "train.max_steps=100000", "train.max_time=0.01")
    assert "reached train.max_time" in result.stdout
    result = nmt_train(
        toy_dir,
        tmp_path / "e",
        "train.max_steps=100000",
        "train.max_epochs=1",
        "train.batch_size=500",
        "train.valid_every=1000",
    )
    assert "reached train.max_epochs (1)" in result.stdout
    assert read_metrics(tmp_path / "e")[-1]["step"] == 3  # 1500 pairs in batches of 500


def test_the_final_line_says_what_the_budget_bought(toy_dir, tmp_path):
    # steps, epochs, wall time and the share of it spent validating; each validation's seconds
    # are in metrics.jsonl, and a resume keeps counting them
    run = tmp_path / "r"
    settings = ("train.max_steps=10", "train.valid_every=5", "train.batch_size=500")
    out = nmt_train(toy_dir, run, *settings).stdout
    line = re.search(
        r"trained 10 steps \(reached train.max_steps \(10\)\): "
        r"([\d.]+) epochs in (\d+) s, (\d+)% of it validating",
        out,
    )
    assert line and float(line.group(1)) == pytest.approx(10 / 3, abs=0.01), out  # 3 batches an epoch
    seconds = [m["valid_seconds"] for m in read_metrics(run) if "valid_bleu" in m]
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=False)
    assert state["progress"]["valid_seconds"] == pytest.approx(sum(seconds), abs=0.05)
    before = read_metrics(run)
    again = runner.invoke(app, ["train", "--resume", str(run), "-q"])  # finished mid-epoch: nothing to do
    assert "already finished" in again.stdout and "3.33 epochs" in again.stdout, again.output
    assert read_metrics(run) == before  # nothing trained, nothing logged
    assert state["progress"]["step"] == 10
    # valid_share, like valid_every, may change on a resume: it alters when, not what
    assert resume_config(run, None, ["train.valid_share=0.05"], write=False)[0].train.valid_share == 0.05
    more = runner.invoke(app, ["train", "--resume", str(run), "--set", "train.max_steps=15", "-q"])
    assert more.exit_code == 0 and "trained 15 steps" in more.stdout, more.output
    assert_resumed_at(run, before, state["progress"]["step"], log_every=5)
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=False)
    total = sum(m["valid_seconds"] for m in read_metrics(run) if "valid_bleu" in m)
    assert state["progress"]["valid_seconds"] == pytest.approx(total, abs=0.05)


def test_a_validation_subset_translates_the_same_few_pairs_every_time(toy_dir, tmp_path):
    run = tmp_path / "s"
    out = nmt_train(toy_dir, run, "train.max_steps=10", "train.valid_every=5", "train.valid_subset=7").stdout
    assert "validation: BLEU on 7 of " in (run / "train.log").read_text() and "trained 10 steps" in out
    first, second = ((run / "valid" / f"step-{n}.txt").read_text().splitlines() for n in (5, 10))
    assert len(first) == len(second) == 7
    # the loss still covers every validation pair: it equals that of a run without a subset
    nmt_train(toy_dir, tmp_path / "f", "train.max_steps=10", "train.valid_every=5")
    losses = [[m["valid_loss"] for m in read_metrics(r) if "valid_loss" in m] for r in (run, tmp_path / "f")]
    assert losses[0] == losses[1]
    assert len((tmp_path / "f" / "valid" / "step-5.txt").read_text().splitlines()) > 7
    bad = nmt_train(toy_dir, tmp_path / "b", "train.valid_subset=-1", check=False)
    assert bad.exit_code == 2 and "train.valid_subset" in bad.output


def test_gradient_accumulation_equals_one_big_batch(toy_dir, tmp_path):
    # SGD: the update is lr * gradient (Adam's first step is ~lr * sign(gradient), which turns float
    # noise in near-zero gradients into full-size differences)
    cfg = tiny_config(
        toy_dir, model={"dropout": 0.0}, train={"update_every": 2, "optimizer": "sgd", "momentum": 0.0}
    )
    updates = []
    for name, split in (("big", 1), ("accumulated", 2)):
        prepare_run_dir(tmp_path / name, cfg)
        trainer = Trainer(cfg, tmp_path / name, quiet=True)
        examples = list(range(48))
        groups = [examples] if split == 1 else [examples[:20], examples[20:]]
        nll, _, _ = trainer.train_step(groups)
        updates.append((nll, [p.detach().clone() for p in trainer.model.parameters()]))
    assert float(updates[0][0]) == pytest.approx(float(updates[1][0]), rel=1e-6)
    for big, acc in zip(updates[0][1], updates[1][1], strict=True):
        torch.testing.assert_close(big, acc, atol=1e-6, rtol=1e-5)


def test_a_non_finite_loss_stops_with_a_clear_message(toy_dir, tmp_path, monkeypatch):
    import nmt.train.learner as learner_module
    from nmt.train.loss import LossSums

    cfg = tiny_config(toy_dir)
    prepare_run_dir(tmp_path / "run", cfg)
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    nan = torch.tensor(float("nan"))
    monkeypatch.setattr(learner_module, "batch_loss", lambda *a: LossSums(nan, nan, 5))
    with pytest.raises(NMTError, match="non-finite loss at step 1"):
        trainer.train_step([list(range(8))])


def test_a_non_finite_loss_is_also_caught_when_the_window_is_logged(toy_dir, tmp_path):
    # on a GPU the loss is read only for log lines, so that is where divergence is found there
    cfg = tiny_config(toy_dir)
    prepare_run_dir(tmp_path / "run", cfg)
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    trainer.progress.step = 40
    trainer.window.add(torch.tensor(float("nan"), dtype=torch.float64), 7)
    with pytest.raises(NMTError, match="non-finite loss by step 40; the last good checkpoint"):
        trainer._log_window()


def test_label_smoothing_matches_torch():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    target = torch.randint(4, 11, (3, 5))
    target[1, 3:] = PAD
    for eps in (0.0, 0.1, 0.3):
        sums = loss_sums(logits, target, eps)
        expected = F.cross_entropy(
            logits.flatten(0, 1), target.flatten(), ignore_index=PAD, reduction="sum", label_smoothing=eps
        )
        torch.testing.assert_close(sums.objective, expected)
        assert sums.tokens == 13
    nll = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD, reduction="sum")
    assert float(loss_sums(logits, target, 0.3).nll) == pytest.approx(float(nll), rel=1e-6)


def test_teacher_forcing_schedule():
    cfg = TrainConfig(teacher_forcing_ratio=1.0, teacher_forcing_final=0.5, max_steps=100)
    assert [teacher_forcing_ratio(cfg, s) for s in (0, 50, 100, 200)] == [1.0, 0.75, 0.5, 0.5]
    assert teacher_forcing_ratio(TrainConfig(teacher_forcing_ratio=0.7), 10) == 0.7


def lr_trace(cfg, events):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    schedule = Schedule.build(cfg.schedule, opt, cfg)
    trace = []
    for kind, value in events:
        getattr(schedule, f"on_{kind}")(value)
        trace.append(round(schedule.lr, 8))
    restored = Schedule.build(cfg.schedule, torch.optim.SGD(model.parameters(), lr=cfg.lr), cfg)
    restored.load_state_dict(schedule.state_dict())
    assert restored.state_dict() == schedule.state_dict()
    return trace


def test_schedules():
    assert lr_trace(TrainConfig(lr=1.0), [("step", 1), ("epoch_end", 9), ("validation", False)]) == [1.0] * 3
    plateau = TrainConfig(lr=1.0, schedule="plateau", decay_patience=2, decay_factor=0.5, min_lr=0.2)
    assert lr_trace(
        plateau,
        [
            ("validation", False),
            ("validation", False),
            ("validation", True),
            ("validation", False),
            ("validation", False),
            ("validation", False),
            ("validation", False),
        ],
    ) == [1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.2]
    step = TrainConfig(lr=1.0, schedule="step", decay_start_epoch=2)
    assert lr_trace(step, [("epoch_end", 0), ("epoch_end", 1), ("epoch_end", 2)]) == [1.0, 0.5, 0.25]
    inv = TrainConfig(lr=1.0, schedule="inverse_sqrt", warmup_steps=4, min_lr=0)
    assert lr_trace(inv, [("step", 1), ("step", 3), ("step", 15)]) == [0.5, 1.0, 0.5]
    budget = Schedule.build(
        "budget", torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0), TrainConfig(lr=1.0, min_lr=0.1)
    )
    trace = []
    for spent in (0.0, 0.25, 0.8, 1.0, 1.5):
        budget.on_step(1, spent)
        trace.append(round(budget.lr, 8))
    assert trace == [1.0, 0.75, 0.2, 0.1, 0.1]


def test_budget_schedule_anneals_to_the_end_of_the_tightest_budget(toy_dir, tmp_path):
    nmt_train(
        toy_dir,
        tmp_path / "run",
        "train.schedule=budget",
        "train.max_steps=20",
        "train.log_every=5",
        "train.min_lr=0",
    )
    lrs = [(m["step"], m["lr"]) for m in read_metrics(tmp_path / "run") if "lr" in m]
    assert lrs == [(s, pytest.approx(0.003 * (1 - s / 20), abs=1e-9)) for s in (5, 10, 15, 20)]


def test_amp_on_cpu_is_refused(toy_dir, tmp_path):
    result = nmt_train(toy_dir, tmp_path / "run", "train.precision=fp16", check=False)
    assert result.exit_code == 2 and "needs a CUDA device" in result.stderr


def test_run_writes_curves_png(toy_dir, tmp_path):
    nmt_train(toy_dir, tmp_path / "run", "train.max_steps=10")
    width, height = assert_image(tmp_path / "run" / "plots" / "curves.png")
    assert width > 300 and height > 200


WORKER = os.path.join(ROOT, "tests", "train", "ddp_worker.py")


def torchrun(toy_dir, run, *extra, resume=False):
    """`nmt train` on 2 gloo processes through torchrun, watched by ddp_worker.py."""
    target = ["--resume", str(run)] if resume else ["-c", "toy-luong.yaml", "--output", str(run)]
    overrides = sets(list(extra) if resume else [*BASE, f"data.dir={toy_dir}", *extra])
    script = [WORKER, "train", *target, *overrides, "-q"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *script]


def ddp_env():
    # two processes, one core each; a rank that aborts prints its Python stacks into the failure
    return subprocess_env() | {"OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}


def rank_reports(run):
    return [json.loads(run.with_name(f"{run.name}.rank{r}.json").read_text()) for r in (0, 1)]


def test_two_processes_train_disjoint_shards_like_one_on_the_global_batch_and_only_rank0_writes(
    toy_dir, tmp_path, monkeypatch
):
    common = [
        "train.max_steps=12",
        "model.dropout=0",
        "train.teacher_forcing_ratio=1",
        "train.valid_every=12",
        "train.batch_size=16",
    ]
    started = time.perf_counter()
    done = subprocess.run(
        torchrun(toy_dir, tmp_path / "ddp", *common),
        env=ddp_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"2-process gloo DDP, 12 steps: {time.perf_counter() - started:.1f} s")
    first, second = rank_reports(tmp_path / "ddp")
    assert first["parameters"] == second["parameters"]  # the replicas stayed identical
    assert second["writes"] == [] and "ddp/checkpoints/last.pt" in first["writes"]  # only rank 0 writes
    assert first["trainers_alive"] == second["trainers_alive"] == 0  # freed before the group ended
    steps = [a + b for a, b in zip(first["steps"], second["steps"], strict=True)]
    assert all(len(set(a) & set(b)) == 0 for a, b in zip(first["steps"], second["steps"], strict=True))
    assert len(set().union(*steps)) == sum(map(len, steps))  # in one epoch no pair is read twice

    # one process, accumulating the same two batches per step: the same pairs, the same losses
    single_steps = []
    train_step = Trainer.train_step
    monkeypatch.setattr(
        Trainer,
        "train_step",
        lambda self, groups: (
            single_steps.append(sorted(int(i) for g in groups for i in g)) or train_step(self, groups)
        ),
    )
    nmt_train(toy_dir, tmp_path / "single", *common, "train.update_every=2")
    assert [sorted(s) for s in steps] == single_steps
    ddp_losses, single_losses = losses(tmp_path / "ddp"), losses(tmp_path / "single")
    assert [s for s, _ in ddp_losses] == [s for s, _ in single_losses]
    for (_, a), (_, b) in zip(ddp_losses, single_losses, strict=True):
        assert a == pytest.approx(b, rel=1e-4)


def test_killing_one_of_two_processes_then_resuming_continues_exactly(toy_dir, tmp_path):
    """Dropout and scheduled sampling draw from each process's own generators: a resume must
    give each its own state back for the losses to match the uninterrupted run bit for bit."""
    reference = tmp_path / "whole"
    done = subprocess.run(
        torchrun(toy_dir, reference, "train.max_steps=40"),
        env=ddp_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        torchrun(toy_dir, killed, "train.max_steps=100000"),
        env=ddp_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if (killed / "metrics.jsonl").exists() and any(s >= 25 for s, _ in losses(killed)):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
    os.kill(int(killed.with_name("killed.rank1.pid").read_text()), signal.SIGKILL)
    assert proc.wait(timeout=120) != 0  # torchrun stops the other rank and fails
    step = read_checkpoint(killed / "checkpoints" / "last.pt")["progress"]["step"]
    assert 10 <= step < 40
    before = read_metrics(killed)

    resumed = subprocess.run(
        torchrun(toy_dir, killed, "train.max_steps=40", resume=True),
        env=ddp_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_resumed_at(killed, before, step, log_every=5)
    assert losses(killed) == losses(reference)
    last = torch.load(killed / "checkpoints" / "last.pt", weights_only=True)
    assert len(last["rng"]["processes"]) == 2


def test_skipped_steps_are_read_at_log_lines_and_checkpoints(toy_dir, tmp_path, monkeypatch):
    """fp16's scaler says whether a step was taken as a tensor on the device; the trainer adds
    them up there and reads the count only at a log line or a checkpoint. A CPU stand-in
    says every third step overflowed: steps 3, 6, 9 and 12."""
    from nmt.train.precision import Precision

    real, calls = Precision.step, []

    def step(self, *args):
        real(self, *args)
        calls.append(None)
        return torch.tensor(len(calls) % 3 != 0)

    monkeypatch.setattr(Precision, "step", step)
    nmt_train(toy_dir, tmp_path / "run", "train.max_steps=12", "train.log_every=5", "train.valid_every=100")
    logged = [(m["step"], m["skipped_steps"]) for m in read_metrics(tmp_path / "run") if "loss" in m]
    assert logged == [(5, 1), (10, 3)]
    progress = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["progress"]
    assert (progress["step"], progress["skipped_steps"]) == (12, 4)  # saved after step 12, no log line
