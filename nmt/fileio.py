"""Small file helpers shared by every layer: atomic writes, folders that appear whole, file
checksums, and strict UTF-8 reading."""

from __future__ import annotations

import errno
import hashlib
import io
import itertools
import os
import secrets
import shutil
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TextIO

from nmt.errors import NMTError


class WriteError(NMTError):
    """An OS error while writing `path` (a full disk, a file size limit, no permission), said in
    one line; it keeps both, so a folder built aside can name the file where the user will look."""

    def __init__(self, error: OSError, path: Path):
        super().__init__(describe_os_error(error, path))
        self.error, self.path = error, Path(path)


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through `atomic_open`: a crash at any moment leaves either the old file or the new
    one, never half of one."""
    with atomic_open(path) as f:
        write(f)


@contextmanager
def atomic_open(path: Path) -> Iterator[IO[bytes]]:
    """A binary file to write that replaces `path` only when the block ends without an error:
    written to a temp file in the same directory, fsynced, then renamed. A new file gets the
    usual permissions (0666 less the umask); a replaced one keeps its own."""
    path = Path(path)
    if path.exists() and not path.is_file():  # /dev/stdout, /dev/null, a FIFO: never replace those
        with open(path, "wb") as f:
            yield f
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the kernel applies the umask
    try:
        with os.fdopen(fd, "wb") as f:
            if path.exists():
                os.chmod(tmp, path.stat().st_mode & 0o7777)
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # a full disk, a read-only folder: say which file, keep the old one
            raise WriteError(e, path) from None
        raise


@contextmanager
def atomic_text(path: Path) -> Iterator[TextIO]:
    """`atomic_open` for UTF-8 text written line by line (results streamed as they come)."""
    with atomic_open(path) as f:
        text = io.TextIOWrapper(f, encoding="utf-8", newline="")
        yield text
        text.flush()
        text.detach()


def atomic_copy(source: Path, target: Path) -> None:
    """Copy a file through `atomic_write`: a crash or a full disk never leaves half a copy."""
    with open(source, "rb") as f:
        atomic_write(target, lambda out: shutil.copyfileobj(f, out, 1 << 20))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


@contextmanager
def staged_directory(output: Path) -> Iterator[Path]:
    """A new folder beside `output` to fill, renamed to `output` when the block ends without an
    error and removed otherwise, so a failure half way leaves nothing. An OS error while filling
    it names the file as it would have been in `output` (the temporary name means nothing to a
    user: it is gone by the time they read the message)."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder_beside(output)
    try:
        yield tmp
        os.replace(tmp, output)
    except (OSError, WriteError) as e:
        error, path = (e.error, e.path) if isinstance(e, WriteError) else (e, Path(e.filename or tmp))
        raise WriteError(error, moved(path, tmp, output)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def folder_beside(output: Path) -> Path:
    """A new, hidden, uniquely named folder beside `output`, to fill and rename to it. Made with
    mode 0777, so the kernel applies the umask as for a folder made by hand (mkdtemp: 0700)."""
    tmp = output.parent / f".{output.name}.{secrets.token_hex(4)}.tmp"
    tmp.mkdir(0o777)
    return tmp


def moved(path: Path, old: Path, new: Path) -> Path:
    """`path` as it would be if the folder `old` were `new` (unchanged when outside `old`)."""
    return new / path.relative_to(old) if path.is_relative_to(old) else path


# -- checksums: a file's size and digest, written beside it, checked before it is trusted ---------
def _crc32(path: Path) -> str:
    crc, buffer = 0, bytearray(1 << 22)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            crc = zlib.crc32(memoryview(buffer)[:n], crc)
    return f"{crc:08x}"


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# crc32 where speed matters (a data cache, checked every time it opens: 2.7 GB/s on the bench
# machine), sha256 for files that are shipped (what the Hugging Face hub shows for a file: 1.6 GB/s)
DIGESTS: dict[str, Callable[[Path], str]] = {"crc32": _crc32, "sha256": _sha256}


def file_identity(path: Path) -> dict:
    """What tells one file from another without reading it: its path, modification time and
    size. Writing the file, or replacing it (a rename, a copy), changes it."""
    stat = Path(path).stat()
    return {"path": str(Path(path).resolve()), "mtime_ns": stat.st_mtime_ns, "size": stat.st_size}


def file_entry(path: Path, digest: str = "sha256") -> dict:
    """A manifest entry for `path`: its size and its digest (`crc32` or `sha256`)."""
    return {"bytes": Path(path).stat().st_size, digest: DIGESTS[digest](path)}


def mismatch(directory: Path, entries: dict[str, dict]) -> str | None:
    """Why a file of `entries` (name -> `file_entry`) in `directory` is not the file that was
    written, or None when each is: missing, another size (checked first: it costs nothing) or
    another digest."""
    directory = Path(directory)
    for name, entry in entries.items():
        path = directory / name
        if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int):
            return f"{path}: its entry in the manifest is not readable"
        if not path.is_file():
            return f"{path}: missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{path}: {path.stat().st_size} bytes, not the {entry['bytes']} written"
    for name, entry in entries.items():
        digest = next((d for d in DIGESTS if d in entry), None)
        if digest is None or DIGESTS[digest](directory / name) != entry[digest]:
            return f"{directory / name}: its {digest or 'checksum'} differs from the one written with it"
    return None


def read_lines(path: Path, errors: str = "strict", hint: str = "") -> list[str]:
    """Read a UTF-8 text file as a list of lines without their newline characters.

    `errors="replace"` turns invalid bytes into U+FFFD instead of stopping.
    """
    path = Path(path)
    _check_readable(path)
    return decode_lines(path.read_bytes(), str(path), errors, hint)


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise NMTError(f"{path}: file not found")
    if path.is_dir():
        raise NMTError(f"{path}: is a directory, not a text file")


def line_chunks(
    f: IO[bytes], where: str, size: int, errors: str = "strict", hint: str = ""
) -> Iterator[tuple[int, list[str]]]:
    """(number of the first line, lines) of a binary file, `size` lines at a time: a file of
    any length is read in the memory of one chunk."""
    first = 1
    while raw := list(itertools.islice(f, size)):
        yield first, decode_lines(b"".join(raw), where, errors, hint, first)
        first += len(raw)


def iter_lines(path: Path, errors: str = "strict") -> Iterator[str]:
    """The lines of a UTF-8 text file, read as they are needed (a missing file fails here, not
    at the first line)."""
    path = Path(path)
    _check_readable(path)

    def lines() -> Iterator[str]:
        with open(path, "rb") as f:
            for _, chunk in line_chunks(f, str(path), 10_000, errors):
                yield from chunk

    return lines()


def count_lines(path: Path) -> int:
    """How many lines `read_lines` would return, counted without decoding (for progress bars)."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            count, last = count + block.count(b"\n"), block[-1:]
    return count + (last != b"\n")


def decode_lines(
    data: bytes, where: str, errors: str = "strict", hint: str = "", first_line: int = 1
) -> list[str]:
    """UTF-8 bytes -> lines; a bad byte is one error naming `where` and the line number
    (counted from `first_line`, for a file read a chunk at a time)."""
    try:
        text = data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        line = first_line + data[: e.start].count(b"\n")
        raise NMTError(
            f"{where}: line {line} is not valid UTF-8; re-encode the file as UTF-8{hint}"
        ) from None
    if first_line == 1:
        text = text.removeprefix("\ufeff")  # a byte-order mark is not part of the first line
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def check_outputs(
    outputs: dict[str, Path | None],
    inputs: dict[str, Path | None],
    folders: dict[str, Path | None] | None = None,
) -> None:
    """Before any work: every output file can be written where it is named, none is one of the
    command's inputs, and no two outputs (files, or `folders` written into) are one path, where
    the last written would silently replace the other (compared as resolved paths and as inodes,
    so links count too).

    `outputs`, `inputs` and `folders` map an option name (`-o`, `--ref`) to its path, or None
    when unset."""
    _check_distinct(outputs | (folders or {}))
    for option, out in outputs.items():
        if out is None or not str(out) or Path(out).is_char_device() or Path(out).is_fifo():
            continue
        out = Path(out)
        if out.is_dir():
            raise NMTError(f"{option} {out}: is a folder; give a file name")
        parent = out.parent
        if not parent.is_dir():
            raise NMTError(f"{option} {out}: the folder {parent} does not exist; create it first")
        for name, source in inputs.items():
            if source is not None and _same_file(out, Path(source)):
                raise NMTError(
                    f"{option} {out}: is also this command's input ({name}); write the output elsewhere"
                )


def _check_distinct(outputs: dict[str, Path | None]) -> None:
    """No two of a command's outputs are one path; devices and pipes (/dev/null) may be shared."""
    named = [(option, Path(out)) for option, out in outputs.items() if out is not None and str(out)]
    named = [(option, out) for option, out in named if not (out.is_char_device() or out.is_fifo())]
    for i, (option, out) in enumerate(named):
        for other, earlier in named[:i]:
            if _same_file(out, earlier):
                raise NMTError(
                    f"{option} {out}: is also this command's {other} output; give each output its own path"
                )


def check_same_length(files: dict[Path | None, list[str] | None]) -> None:
    """Parallel files must have as many lines each; the error names them and their counts."""
    check_same_counts({path: len(lines) for path, lines in files.items() if lines is not None})


def check_same_counts(counts: dict[Path | None, int]) -> None:
    """`check_same_length` of files whose lines were counted (`count_lines`), not read."""
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{path} has {n}" for path, n in counts.items())
        raise NMTError(f"the files must have one line per sentence each, but {listed} lines")


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def describe_os_error(e: OSError, path: Path | None = None) -> str:
    """`path: reason`, with a hint for the failures a user can fix; `path`, when given, is named
    instead of the error's own file name (which may be a temporary file of an atomic write)."""
    where = path or e.filename or "nmt"
    reason = e.strerror or (str(e.args[0]) if e.args else type(e).__name__)
    hints = {
        errno.ENOSPC: "free some space or write elsewhere",
        errno.EDQUOT: "free some space or write elsewhere",
        errno.EFBIG: "free some space, raise the file size limit or write elsewhere",
        errno.EACCES: "check its permissions",
        errno.EPERM: "check its permissions",
        errno.EROFS: "write elsewhere",
        errno.EISDIR: "give a file name, not a folder",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
    }
    hint = hints.get(e.errno or 0)
    return f"{where}: {reason}" + (f" ({hint})" if hint else "")


# the errors of a write that a user can fix (space, limits, permissions), not bugs
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO}


def os_error_in(error: BaseException) -> OSError | None:
    """The OS error a library wrapped in an error of its own (torch's writer raises a
    RuntimeError 'unexpected pos' while handling the EFBIG or ENOSPC of its file), if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno in WRITE_ERRNOS:
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
