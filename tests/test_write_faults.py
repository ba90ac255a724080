"""Every OS error while writing is one line naming the file, exit code 2, whichever library raised
it (torch's writer wraps EFBIG and ENOSPC in a RuntimeError of its own), at each kind of write:
last.pt, best.pt, an average, the data cache, a release and an export. The faults are real: a
file size limit (RLIMIT_FSIZE, SIGXFSZ ignored so the write fails with EFBIG) and a small tmpfs
(ENOSPC), in real `nmt` processes; nothing the user had is lost, and a run still resumes."""

import os
import resource
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nmt.checkpoint import read_checkpoint
from nmt.rundir import CHECKPOINTS, LAST
from tests.conftest import TINY, one_line_error
from tests.test_faults import snapshot

ROOT = Path(__file__).resolve().parents[1]
TOO_LARGE = "File too large (free some space, raise the file size limit or write elsewhere)"
NO_SPACE = "No space left on device (free some space or write elsewhere)"


def limit_file_size(size: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return apply


def nmt(*args, limit: int | None = None) -> subprocess.CompletedProcess:
    """`nmt ARGS` in a process of its own, under a file size limit of `limit` bytes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "nmt", *map(str, args)]
    preexec = limit_file_size(limit) if limit else None
    return subprocess.run(command, env=env, capture_output=True, text=True, preexec_fn=preexec, timeout=300)


def train_args(toy_dir: Path, cache: Path, run: Path, *extra: str) -> list:
    items = [*TINY, "train.average_last=2", f"data.dir={toy_dir}", f"data.cache_dir={cache}", *extra]
    return ["train", "-c", "toy-luong.yaml", *[x for i in items for x in ("--set", i)], "-o", run, "-q"]


@pytest.fixture(scope="module")
def trained(toy_dir, tmp_path_factory):
    """A finished tiny run (last, best, two snapshots, averaged.pt), its data cache, a release
    and an export of it: the sizes every fault below is cut to."""
    folder = tmp_path_factory.mktemp("write-faults")
    cache, run = folder / "cache", folder / "run"
    proc = nmt(*train_args(toy_dir, cache, run))
    assert proc.returncode == 0, proc.stderr
    assert nmt("release", run, "-o", folder / "release").returncode == 0
    exported = nmt("export", run, "-o", folder / "export")
    return folder, cache, run, exported.returncode == 0


@pytest.fixture
def tmpfs(tmp_path):
    """A function mounting a tmpfs of `size` bytes (skipped where mounting is not permitted)."""
    mounted = []

    def mount(size: int) -> Path:
        where = tmp_path / f"tmpfs-{len(mounted)}"
        where.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or 'mount failed'}); needs root")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)


def copy_run(run: Path, where: Path) -> Path:
    target = where / f"run-{uuid.uuid4().hex[:6]}"
    shutil.copytree(run, target)
    return target


def resumes(run: Path, *extra: str) -> None:
    """The run resumes (and finishes) where it is, without a limit."""
    proc = nmt("train", "--resume", run, "-q", *[x for i in extra for x in ("--set", i)])
    assert proc.returncode == 0, proc.stderr


# -- checkpoints --------------------------------------------------------------------------------


def test_a_file_size_limit_at_last_pt_is_one_line_and_the_run_resumes(trained, tmp_path):
    _, _, run, _ = trained
    run = copy_run(run, tmp_path)
    last = run / CHECKPOINTS / LAST
    before = snapshot(run / CHECKPOINTS)
    # 60% of the file: the limit is hit inside a tensor's record, where torch's writer turns the
    # EFBIG into "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos"
    proc = nmt(
        "train", "--resume", run, "--set", "train.max_steps=20", "-q", limit=last.stat().st_size * 3 // 5
    )
    one_line_error(proc, f"{last}: {TOO_LARGE}")
    assert snapshot(run / CHECKPOINTS) == before
    resumes(run, "train.max_steps=20")
    assert read_checkpoint(last)["progress"]["step"] == 20


def test_a_full_disk_at_last_pt_is_one_line_and_the_run_resumes(trained, tmpfs, tmp_path):
    _, _, run, _ = trained
    used = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
    run = copy_run(run, tmpfs(used + 64 * 1024))  # no room for a second last.pt beside the first
    before = snapshot(run / CHECKPOINTS)
    proc = nmt("train", "--resume", run, "--set", "train.max_steps=20", "-q")
    one_line_error(proc, f"{run / CHECKPOINTS / LAST}: {NO_SPACE}")
    assert snapshot(run / CHECKPOINTS) == before
    moved = copy_run(run, tmp_path)  # the user makes room: here, moves the run to a larger disk
    resumes(moved, "train.max_steps=20")
    assert read_checkpoint(moved / CHECKPOINTS / LAST)["progress"]["step"] == 20


def test_a_full_disk_at_best_pt_is_one_line_and_the_resume_rebuilds_best(trained, toy_dir, tmpfs, tmp_path):
    folder, cache, run, _ = trained
    last_size = (run / CHECKPOINTS / LAST).stat().st_size
    # room for last.pt and the run's small files, not for the copy of last.pt into best.pt
    where = tmpfs(last_size * 3 // 2 + 64 * 1024)
    fresh = where / "run"
    proc = nmt(*train_args(toy_dir, cache, fresh, "train.average_last=1"))
    one_line_error(proc, f"{fresh / CHECKPOINTS / 'best.pt'}: {NO_SPACE}")
    assert read_checkpoint(fresh / CHECKPOINTS / LAST)["progress"]["step"] == 5
    moved = copy_run(fresh, tmp_path)  # the user frees space: here, moves the run to a larger disk
    resumes(moved)
    best = read_checkpoint(moved / CHECKPOINTS / "best.pt")
    assert best["progress"]["step"] in (5, 10)


def test_a_file_size_limit_at_an_average_is_one_line_error(trained, tmp_path):
    _, _, run, _ = trained
    out = tmp_path / "averaged.pt"
    size = (run / CHECKPOINTS / "averaged.pt").stat().st_size  # with the optimiser state: 3x nmt average's
    one_line_error(nmt("average", run, "--last", 2, "-o", out, limit=size // 10), f"{out}: {TOO_LARGE}")
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []


def test_a_full_disk_at_an_average_is_one_line_error(trained, tmpfs):
    _, _, run, _ = trained
    where = tmpfs((run / CHECKPOINTS / "averaged.pt").stat().st_size // 10)
    one_line_error(
        nmt("average", run, "--last", 2, "-o", where / "averaged.pt"), f"{where / 'averaged.pt'}: {NO_SPACE}"
    )
    assert list(where.iterdir()) == []


# -- the data cache -----------------------------------------------------------------------------


def prepare_args(toy_dir: Path, cache: Path) -> list:
    items = [*TINY, "train.average_last=2", f"data.dir={toy_dir}", f"data.cache_dir={cache}"]
    return ["data", "prepare", "-c", "toy-luong.yaml", *[x for i in items for x in ("--set", i)]]


def test_a_file_size_limit_while_building_the_cache_names_the_file(trained, toy_dir, tmp_path):
    _, cache, _, _ = trained
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    tokens = folder / "train" / "src.tokens"
    new_cache = tmp_path / "cache"
    line = one_line_error(nmt(*prepare_args(toy_dir, new_cache), limit=tokens.stat().st_size // 2), TOO_LARGE)
    assert f"{new_cache / folder.name / 'train'}/" in line and "tokens" in line, line
    assert not [p for p in new_cache.rglob("*") if p.is_file()]  # nothing half-built left behind


def test_a_full_disk_while_building_the_cache_names_the_file(trained, toy_dir, tmpfs):
    _, cache, _, _ = trained
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    where = tmpfs((folder / "train" / "src.tokens").stat().st_size // 2)
    line = one_line_error(nmt(*prepare_args(toy_dir, where)), NO_SPACE)
    assert f"{where / folder.name / 'train'}/" in line, line  # e.g. .../train/src.tokens
    assert not [p for p in where.rglob("*") if p.is_file()]


# -- releases and exports -----------------------------------------------------------------------


def test_a_file_size_limit_while_releasing_is_one_line_and_writes_nothing(trained, tmp_path):
    folder, _, run, _ = trained
    weights = (folder / "release" / "model.safetensors").stat().st_size
    out = tmp_path / "release"
    released = nmt("release", run, "-o", out, limit=weights // 2)
    one_line_error(released, f"{out / 'model.safetensors'}: {TOO_LARGE}")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_releasing_is_one_line_and_writes_nothing(trained, tmpfs):
    folder, _, run, _ = trained
    where = tmpfs((folder / "release" / "model.safetensors").stat().st_size // 2)
    one_line_error(
        nmt("release", run, "-o", where / "release"), f"{where / 'release' / 'model.safetensors'}: {NO_SPACE}"
    )
    assert list(where.iterdir()) == []


def test_a_file_size_limit_while_exporting_is_one_line_and_writes_nothing(trained, tmp_path):
    folder, _, run, exported = trained
    if not exported:
        pytest.skip("nmt export needs the onnx extra")
    graph = (folder / "export" / "encoder.onnx").stat().st_size
    out = tmp_path / "export"
    one_line_error(nmt("export", run, "-o", out, limit=graph // 2), f"{out / 'encoder.onnx'}: {TOO_LARGE}")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_exporting_is_one_line_and_writes_nothing(trained, tmpfs):
    folder, _, run, exported = trained
    if not exported:
        pytest.skip("nmt export needs the onnx extra")
    where = tmpfs((folder / "export" / "encoder.onnx").stat().st_size // 2)
    proc = nmt("export", run, "-o", where / "export")
    one_line_error(proc, f"{where / 'export' / 'encoder.onnx'}: {NO_SPACE}")
    assert list(where.iterdir()) == []


def test_a_best_pt_a_full_disk_left_behind_is_brought_up_to_date_on_resume(tmp_path):
    from nmt.checkpoint import FORMAT_VERSION, write_state
    from nmt.train.checkpoints import CheckpointKeeper

    def write(path: Path, step: int) -> None:
        entries = {"config": {}, "model": {}, "tokenizers": {}, "progress": {"step": step}}
        write_state(path, {"format_version": FORMAT_VERSION, **entries})

    keeper = CheckpointKeeper(tmp_path, keep_best=1, average_last=0, higher_is_better=True)
    validations = [(5, 10.0), (10, 20.0)]  # step 10 improved, but its copy to best.pt found no space
    write(tmp_path / "best.pt", 5)
    write(tmp_path / LAST, 10)
    assert keeper.repair_best(validations).endswith(
        "best.pt was older than the best validation; rebuilt it from last.pt"
    )
    assert read_checkpoint(tmp_path / "best.pt")["progress"]["step"] == 10
    assert keeper.repair_best(validations) == ""
    write(tmp_path / "best.pt", 5)
    write(tmp_path / LAST, 15)  # the best weights are gone: the older best is kept, not replaced
    assert keeper.repair_best(validations) == ""
    assert read_checkpoint(tmp_path / "best.pt")["progress"]["step"] == 5
