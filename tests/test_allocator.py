"""nmt restarts itself on tcmalloc when the system has it (nmt/allocator.py), in real processes."""

import errno
import os
import signal
import subprocess
import sys

import pytest

from nmt import allocator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
has_tcmalloc = allocator.tcmalloc_library() is not None


def nmt(*args, env=None, **kwargs):
    env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    env.pop("LD_PRELOAD", None)
    return subprocess.run(
        [sys.executable, "-m", "nmt", *args], env=env, capture_output=True, text=True, **kwargs
    )


@pytest.mark.skipif(not has_tcmalloc, reason="no tcmalloc on this system (Debian: libtcmalloc-minimal4)")
def test_nmt_runs_on_tcmalloc_when_the_system_has_it():
    result = nmt("env")
    assert result.returncode == 0, result.stderr
    assert "memory allocator: tcmalloc" in result.stdout


def test_nmt_allocator_system_keeps_glibcs():
    result = nmt("env", env={allocator.SWITCH: "system"})
    assert result.returncode == 0, result.stderr
    assert "memory allocator: system (glibc; NMT_ALLOCATOR=system)" in result.stdout


def test_the_restart_keeps_arguments_standard_input_and_the_exit_code(tmp_path):
    (tmp_path / "ref.txt").write_text("a small test\n")
    result = nmt("eval", "--hyp", "/dev/stdin", "--ref", str(tmp_path / "ref.txt"), input="a small test\n")
    assert result.returncode == 0, result.stderr
    assert "BLEU" in result.stdout and "100.0" in result.stdout
    assert (
        nmt("eval", "--hyp", str(tmp_path / "missing.txt"), "--ref", str(tmp_path / "ref.txt")).returncode
        == 2
    )


@pytest.mark.skipif(sys.platform != "linux", reason="the restart is for Linux only")
def test_a_restart_that_cannot_exec_goes_on_without_tcmalloc_and_ctrl_c_unblocked(monkeypatch):
    for name in ("LD_PRELOAD", allocator.SWITCH, f"{allocator.SWITCH}_TRIED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(allocator, "tcmalloc_library", lambda: "libtcmalloc_minimal.so.4")
    masks = []

    def refused(*args):
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        raise OSError(errno.E2BIG, "Argument list too long")

    monkeypatch.setattr(os, "execve", refused)
    allocator.restart_with_tcmalloc()  # returns: this process goes on, on glibc's malloc
    assert len(masks) == 1 and signal.SIGINT in masks[0]  # held while the exec was tried
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


FREED = """
from nmt.allocator import FreePages
pages = FreePages()
blocks = [bytearray(1 << 20) for _ in range(64)]  # 64 MiB, then freed: free pages in tcmalloc's heap
del blocks
before = pages.free()
print(before >= 32 << 20, pages.trim(limit=128 << 20), pages.trim(limit=16 << 20), pages.free() < 8 << 20)
"""


@pytest.mark.skipif(not has_tcmalloc, reason="no tcmalloc on this system (Debian: libtcmalloc-minimal4)")
def test_free_pages_are_handed_back_past_the_limit_only():
    env = {**os.environ, "PYTHONPATH": ROOT, "LD_PRELOAD": allocator.tcmalloc_library()}
    result = subprocess.run([sys.executable, "-c", FREED], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False", "True", "True"]


def test_free_pages_are_a_no_op_on_glibc():
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("LD_PRELOAD", None)
    code = "from nmt.allocator import FreePages; p = FreePages(); print(p.free(), p.trim(0))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "False"]
