"""Atomic writes: all or nothing, the usual permissions for a new file, the old ones kept for a
replaced file, and no process-wide state touched to get there."""

import os
import stat
from pathlib import Path

import pytest

from nmt.errors import NMTError
from nmt.fileio import atomic_write, atomic_write_text, check_outputs


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_0666_less_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.txt", "x\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "a.txt") == 0o640
    assert os.umask(old) == old  # the process umask is left as it was


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    path.chmod(0o600)
    atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n" and mode(path) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")

    def fail(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(NMTError, match="out.txt: disk full"):  # one line naming the file, for the CLI
        atomic_write(path, fail)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_importing_fileio_does_not_touch_the_umask():
    from pathlib import Path

    import nmt.fileio

    assert "os.umask(" not in Path(nmt.fileio.__file__).read_text()


@pytest.mark.parametrize(
    ("second", "folder"),
    [
        ("out.txt", None),  # the same spelling
        ("sub/../out.txt", None),  # another spelling of one path
        ("link.txt", None),  # a link to it, before either exists
        (None, "out.txt"),  # a folder written into where a file is written
    ],
)
def test_two_outputs_on_one_path_are_refused(tmp_path, second, folder):
    """One path named by two of a command's outputs: the last written would replace the other."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.txt").symlink_to(tmp_path / "out.txt")
    outputs = {"-o": tmp_path / "out.txt", "--attention": second and tmp_path / second}
    with pytest.raises(NMTError, match="is also this command's -o output; give each output its own path"):
        check_outputs(outputs, {}, {"--plot-attention": folder and tmp_path / folder})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "sub"]


def test_distinct_outputs_and_a_shared_device_are_taken(tmp_path):
    check_outputs(
        {"-o": tmp_path / "a.txt", "--attention": tmp_path / "b.jsonl"}, {}, {"--plot": tmp_path / "c"}
    )
    check_outputs({"-o": Path(os.devnull), "--attention": Path(os.devnull)}, {})
