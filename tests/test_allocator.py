"""nmt restarts itself on tcmalloc when the system has it (nmt/allocator.py), in real processes."""

import ctypes.util
import os
import subprocess
import sys

import pytest

from nmt import allocator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
has_tcmalloc = any(map(ctypes.util.find_library, allocator.LIBRARIES))


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
