"""Files nmt trusts carry checksums written with them and checked when they are read: a data
cache overwritten in place is rebuilt (not reported as prepared and trained on), a training file
cut short under a running `nmt train` ends it in one line (not SIGBUS), and a checkpoint whose
bytes changed, or whose weights are not finite, is refused in one line. Files written before
checksums existed still work."""

import json
import os
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from nmt.checkpoint import read_checkpoint, write_state
from nmt.cli import app
from nmt.rundir import CHECKPOINTS, LAST, METRICS, read_metrics
from tests.conftest import TINY, one_line_error, sets

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


# -- the data cache -----------------------------------------------------------------------------


def prepare(toy_dir: Path, cache: Path) -> str:
    """`nmt data prepare` of the toy task into `cache`; its report line."""
    settings = [f"data.dir={toy_dir}", f"data.cache_dir={cache}", "tokenizer.vocab_size=120"]
    result = runner.invoke(app, ["data", "prepare", "-c", "toy-luong.yaml", *sets(settings)])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout.strip().splitlines()[-1]


def cache_folder(cache: Path) -> Path:
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    return folder


def overwrite(path: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of `path` in place: same size, same inode, the mapped pages change too."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def damage_tokens(train: Path) -> None:
    """Ids no vocabulary has, in the middle of the source tokens (uint16 on disk)."""
    overwrite(train / "src.tokens", (train / "src.tokens").stat().st_size // 2 & ~1, b"\xff" * 64)


def damage_offsets(train: Path) -> None:
    """A sentence boundary moved by one token: still increasing, still ending where it should."""
    middle = (train / "tgt.offsets").stat().st_size // 16 * 8
    with open(train / "tgt.offsets", "rb") as f:
        f.seek(middle)
        (value,) = struct.unpack("<q", f.read(8))
    overwrite(train / "tgt.offsets", middle, struct.pack("<q", value + 1))


def damage_lengths(train: Path) -> None:
    overwrite(train / "src.lengths", (train / "src.lengths").stat().st_size // 2 & ~1, struct.pack("<H", 59))


@pytest.mark.parametrize("damage", [damage_tokens, damage_offsets, damage_lengths], ids=lambda f: f.__name__)
def test_a_cache_overwritten_in_place_is_rebuilt_not_trusted(toy_dir, tmp_path, damage):
    cache = tmp_path / "cache"
    assert prepare(toy_dir, cache).startswith("prepared:")
    train = cache_folder(cache) / "train"
    whole = {p.name: p.read_bytes() for p in train.iterdir()}
    damage(train)
    assert prepare(toy_dir, cache).startswith("prepared:")  # rebuilt, not "already prepared"
    assert {p.name: p.read_bytes() for p in train.iterdir()} == whole
    assert prepare(toy_dir, cache).startswith("already prepared:")
    assert [p.name for p in cache.iterdir()] == [train.parent.name]  # nothing left aside


def test_training_on_a_cache_damaged_in_place_rebuilds_it(toy_dir, tmp_path):
    cache = tmp_path / "cache"
    prepare(toy_dir, cache)
    damage_tokens(cache_folder(cache) / "train")  # was: IndexError from the embedding, every rerun
    args = ["train", "-c", "toy-luong.yaml", *sets([*TINY, f"data.dir={toy_dir}", f"data.cache_dir={cache}"])]
    result = runner.invoke(app, [*args, "-o", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "(cached)" not in (tmp_path / "run" / "train.log").read_text()


def test_a_cache_from_before_checksums_is_rebuilt_once(toy_dir, tmp_path):
    cache = tmp_path / "cache"
    prepare(toy_dir, cache)
    meta_path = cache_folder(cache) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["layout"] = {
        k: v for k, v in meta["layout"].items() if k in ("pairs", "token_dtype", "length_dtype")
    }
    meta_path.write_text(json.dumps(meta))  # as nmt 0.x wrote it: no checksums
    assert prepare(toy_dir, cache).startswith("prepared:")
    assert prepare(toy_dir, cache).startswith("already prepared:")


def nmt_process(args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "nmt", *map(str, args)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_step(run: Path, proc: subprocess.Popen, step: int) -> None:
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (run / METRICS).is_file() and any(m["step"] >= step for m in read_metrics(run)):
            return
        time.sleep(0.05)
    raise AssertionError(f"no step {step} logged: {proc.communicate()[1] if proc.poll() is not None else ''}")


def test_a_training_file_cut_short_while_training_ends_in_one_line_and_the_run_resumes(toy_dir, tmp_path):
    cache, run = tmp_path / "cache", tmp_path / "run"
    settings = [*TINY, "train.max_steps=100000", f"data.dir={toy_dir}", f"data.cache_dir={cache}"]
    proc = nmt_process(["train", "-c", "toy-luong.yaml", *sets(settings), "-o", run, "-q"])
    try:
        wait_for_step(run, proc, 6)
        tokens = cache_folder(cache) / "train" / "src.tokens"
        os.truncate(tokens, tokens.stat().st_size // 2)  # another program, a full disk, a user
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 2, f"exit code {proc.returncode} (-7 is SIGBUS): {err}"
    (line,) = err.strip().splitlines()
    assert str(tokens) in line and "cut short while training" in line, line
    result = runner.invoke(app, ["train", "--resume", str(run), "-q", "--set", "train.max_steps=10"])
    assert result.exit_code == 0, (result.output, result.exception)  # the cache rebuilt, the run goes on


def test_checking_the_mapped_files_costs_microseconds_a_step(toy_dir, tmp_path):
    from nmt.data.prepare import prepare as prepare_data
    from tests.conftest import tiny_config

    data = prepare_data(tiny_config(toy_dir, data={"cache_dir": str(tmp_path / "cache")}))
    started = time.perf_counter()
    for _ in range(1000):
        data.train.check_mapped()
    assert (time.perf_counter() - started) / 1000 < 1e-3  # measured: 1.3 us (four fstat calls)


# -- checkpoints --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(toy_dir, tmp_path_factory) -> Path:
    """A finished tiny run (its last.pt holds the optimiser state)."""
    out = tmp_path_factory.mktemp("integrity") / "run"
    args = ["train", "-c", "toy-luong.yaml", *sets([*TINY, f"data.dir={toy_dir}"]), "-o", str(out), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    return out


def record_offset(path: Path, tensor: torch.Tensor) -> int:
    """Where in the checkpoint file (a zip archive) the bytes of `tensor` are stored."""
    data = tensor.contiguous().numpy().tobytes()
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            if info.file_size == len(data) and z.read(info) == data:
                f.seek(info.header_offset + 26)
                name_length, extra_length = struct.unpack("<HH", f.read(4))
                return info.header_offset + 30 + name_length + extra_length
    raise AssertionError("tensor not found in the checkpoint")


def copy_run(source: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(source, target)
    return target


def translate(model: Path, tmp_path: Path):
    source = tmp_path / "in.txt"
    source.write_text("1. Mai 1999\nSonntag, 12. März 1989\n")
    return runner.invoke(app, ["translate", "-m", str(model), "-i", str(source), "-q"])


def test_a_checkpoint_whose_weights_changed_on_disk_is_refused_in_one_line_error(run, tmp_path):
    best = copy_run(run, tmp_path / "run") / CHECKPOINTS / "best.pt"
    weights = torch.load(best, weights_only=True)["model"]
    name = max(weights, key=lambda k: weights[k].numel())
    overwrite(best, record_offset(best, weights[name]) + 8, struct.pack("<f", 1234.5))
    one_line_error(translate(best, tmp_path), str(best), "damaged")


def test_a_last_pt_whose_optimiser_state_changed_on_disk_is_refused_on_resume(run, tmp_path):
    moved = copy_run(run, tmp_path / "run")
    last = moved / CHECKPOINTS / LAST
    moment = torch.load(last, weights_only=True)["optimizer"]["state"][0]["exp_avg_sq"]
    overwrite(last, record_offset(last, moment), struct.pack("<f", -1.0))  # a negative second moment
    result = runner.invoke(app, ["train", "--resume", str(moved), "-q", "--set", "train.max_steps=20"])
    one_line_error(result, str(last), "damaged", "optimizer")


def test_non_finite_weights_are_refused_in_one_line_error(run, tmp_path):
    state = torch.load(run / CHECKPOINTS / "best.pt", weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = torch.full_like(state["model"][name], float("nan"))
    write_state(tmp_path / "nan.pt", state)  # written whole, checksums and all: only the values are bad
    one_line_error(translate(tmp_path / "nan.pt", tmp_path), str(tmp_path / "nan.pt"), "not finite", name)


def test_a_checkpoint_from_before_checksums_loads_and_translates_the_same(run, tmp_path):
    best = run / CHECKPOINTS / "best.pt"
    state = torch.load(best, weights_only=True)
    old = {k: v for k, v in state.items() if k != "checksums"}
    torch.save(old, tmp_path / "old.pt")
    assert read_checkpoint(tmp_path / "old.pt")["progress"] == state["progress"]
    new, before = translate(best, tmp_path), translate(tmp_path / "old.pt", tmp_path)
    assert before.exit_code == 0 and before.stdout == new.stdout


def test_checksums_are_written_with_every_checkpoint(run):
    for name in ("best.pt", LAST):
        state = torch.load(run / CHECKPOINTS / name, weights_only=True)
        assert set(state["checksums"]) == set(state) - {"checksums"}
