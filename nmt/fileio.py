"""Small file helpers shared by every layer: atomic writes and strict UTF-8 reading."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO

from nmt.errors import NMTError


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through a temp file in the same directory, fsync, then rename.

    A crash at any moment leaves either the old file or the new one, never half of one. A new
    file gets the usual permissions (0666 less the umask); a replaced one keeps its own.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # /dev/stdout, /dev/null, a FIFO: never replace those
        with open(path, "wb") as f:
            write(f)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the kernel applies the umask
    try:
        with os.fdopen(fd, "wb") as f:
            if path.exists():
                os.chmod(tmp, path.stat().st_mode & 0o7777)
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def read_lines(path: Path, errors: str = "strict", hint: str = "") -> list[str]:
    """Read a UTF-8 text file as a list of lines without their newline characters.

    `errors="replace"` turns invalid bytes into U+FFFD instead of stopping.
    """
    path = Path(path)
    if not path.exists():
        raise NMTError(f"{path}: file not found")
    if path.is_dir():
        raise NMTError(f"{path}: is a directory, not a text file")
    return decode_lines(path.read_bytes(), str(path), errors, hint)


def decode_lines(data: bytes, where: str, errors: str = "strict", hint: str = "") -> list[str]:
    """UTF-8 bytes -> lines; a bad byte is one error naming `where` and the line number."""
    try:
        text = data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise NMTError(
            f"{where}: line {line} is not valid UTF-8; re-encode the file as UTF-8{hint}"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def require_folder(path: Path) -> None:
    """Refuse an output whose folder does not exist, before any work: a typo in a path should not
    cost a long run, nor quietly create a tree of folders."""
    folder = Path(path).parent
    if not folder.is_dir():
        raise NMTError(f"{path}: folder {folder} does not exist; create it first")
