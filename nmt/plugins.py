"""Plugins: Python files of a user's own classes (an attention, a decoder style, a bridge),
imported before a config is checked, and recorded in every model that needs them.

A config names them (`plugins: [my_attention.py]`, relative to the config), and every command
that builds or loads a model takes `--plugin FILE`. A file registers its classes as nmt's own do
(`class Mine(Attention, name="mine")`), so `model.attention.type: mine` is valid once it is
imported. Importing runs the file, so nmt imports only what its user names.

A checkpoint, a release and a run record each plugin's file name, sha256 and source. A model
that needs one loads only with the file (`--plugin`, the same sha256: one line naming both hashes
when it differs) or with `--trust-plugin`, which runs the source recorded in the model and says
so; without either, one line and exit 2. A model never runs code on load unless its user says
so. A resumed run (`nmt train --resume`) is its user's own: it imports the file its config names
when that file is unchanged.
"""

from __future__ import annotations

import hashlib
import linecache
import re
import sys
import traceback
import types
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nmt.errors import NMTError
from nmt.registry import forget

TRUST_HINT = "--trust-plugin to run the source recorded in the model"
MAX_BYTES = 1 << 20  # a plugin is a page of Python; a bigger file is not one


@dataclass(frozen=True)
class Plugin:
    """One imported file: its name, the sha256 of its bytes, its source, and where it was read
    ('' for a source recorded in a model)."""

    name: str
    sha256: str
    source: str
    path: str = ""

    def record(self) -> dict[str, str]:
        """What a checkpoint, a release or a run keeps of it."""
        return {"name": self.name, "sha256": self.sha256, "source": self.source, "path": self.path}

    @property
    def short(self) -> str:
        return self.sha256[:16]


_loaded: dict[str, Plugin] = {}  # sha256 -> the plugin imported into this process
_by_path: dict[str, Plugin] = {}  # a file's resolved path -> the plugin standing for it
_trusted = [False]


def trust(allowed: bool = True) -> None:
    """`--trust-plugin`: a model's recorded plugins may run in this process."""
    _trusted[0] = allowed


def loaded() -> list[Plugin]:
    return list(_loaded.values())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_file(path: Path | str) -> Plugin:
    """Import the plugin file `path` (once a process: a file of the same bytes is imported once)."""
    path = Path(path)
    key = str(path.resolve())
    if key in _by_path:
        return _by_path[key]
    try:
        if not path.is_file():
            raise NMTError(f"plugin {path}: not found (not a file); give the path of your .py file")
        data = path.read_bytes()
    except OSError as e:
        raise NMTError(f"plugin {path}: cannot read it ({e.strerror})") from None
    if len(data) > MAX_BYTES:
        raise NMTError(f"plugin {path}: {len(data):,} bytes, over the {MAX_BYTES:,} a plugin may have")
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NMTError(f"plugin {path}: not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    plugin = _import(Plugin(path.name, sha256(data), source, key), str(path))
    _by_path[key] = plugin
    return plugin


def load_files(paths: Iterable[Path | str]) -> list[Plugin]:
    return [load_file(path) for path in paths]


def _import(plugin: Plugin, label: str) -> Plugin:
    """Run the plugin's source as a module of its own, unless a plugin of the same bytes ran."""
    if plugin.sha256 in _loaded:
        return _loaded[plugin.sha256]
    stem = re.sub(r"\W", "_", Path(plugin.name).stem) or "plugin"
    module = types.ModuleType(f"nmt_plugin_{stem}_{plugin.short}")
    module.__file__ = label
    sys.modules[module.__name__] = module  # dataclasses look their module up while it runs
    linecache.cache[label] = (len(plugin.source), None, plugin.source.splitlines(True), label)
    try:
        exec(compile(plugin.source, label, "exec"), module.__dict__)  # noqa: S102 (the user named it)
    except BaseException as e:
        del sys.modules[module.__name__]
        forget(module.__name__)  # no class of a file that failed stays registered
        if isinstance(e, KeyboardInterrupt | SystemExit):
            raise
        raise NMTError(f"plugin {label}: {_where(e, label)}") from None
    _loaded[plugin.sha256] = plugin
    return plugin


def _where(error: BaseException, label: str) -> str:
    """The error, with the plugin's line it came from where there is one."""
    if isinstance(error, SyntaxError):
        return f"line {error.lineno}: {error.msg}"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == label]
    at = f"line {lines[-1]}: " if lines else ""
    detail = str(error) if isinstance(error, NMTError) else f"{type(error).__name__}: {error}"
    return at + " ".join(detail.split())[:300]


def check_records(value: object, where: str) -> list[Plugin]:
    """A model's recorded plugins, checked: a list of entries with text fields whose source has
    the sha256 recorded with it (a damaged or edited entry is refused)."""
    if value is None:
        return []
    fields = ("name", "sha256", "source", "path")
    if not isinstance(value, list) or not all(
        isinstance(entry, dict) and all(isinstance(entry.get(f), str) for f in fields) for entry in value
    ):
        raise NMTError(f"{where}: a damaged record of its plugins; use the model as it was written")
    plugins = [Plugin(*(entry[f] for f in fields)) for entry in value]
    for plugin in plugins:
        if sha256(plugin.source.encode("utf-8")) != plugin.sha256:
            raise NMTError(
                f"{where}: its plugin {plugin.name} does not have the sha256 recorded with it (damaged)"
            )
    return plugins


def require(records: object, where: str, own_files: bool = False) -> None:
    """Make the plugins a model recorded importable, as its user allows: each one already
    imported (a --plugin of the same sha256), else with `own_files` (a run resumed) its file,
    unchanged, else its recorded source under --trust-plugin, said in one line on stderr.
    Refuses in one line otherwise."""
    for plugin in check_records(records, where):
        if plugin.sha256 in _loaded:
            continue
        file = Path(plugin.path) if plugin.path else None
        now = sha256(file.read_bytes()) if own_files and file and file.is_file() else None
        if now == plugin.sha256:
            load_file(file)
            continue
        if _trusted[0]:
            ran = _import(plugin, f"{plugin.name} (recorded in {where})")
            if file is not None:
                _by_path[str(file)] = ran  # the config's path stands for the recorded source
            print(
                f"plugin {plugin.name} (sha256 {plugin.short}): running the source recorded in "
                f"{where}, as --trust-plugin asks",
                file=sys.stderr,
            )
            continue
        raise NMTError(_missing(plugin, where, now))


def _missing(plugin: Plugin, where: str, now: str | None) -> str:
    if now is not None:
        return (
            f"{where}: its plugin {plugin.path} changed since the run began (sha256 {now[:16]}, the run's "
            f"{plugin.short}); restore the file, or resume with {TRUST_HINT}"
        )
    files = [p for p in _loaded.values() if p.path]
    given = [p for p in files if p.name == plugin.name] or files
    if given:
        return (
            f"{where} needs the plugin {plugin.name} with sha256 {plugin.short}, but --plugin "
            f"{given[0].path or given[0].name} has sha256 {given[0].short}; pass the file it was "
            f"trained with, or {TRUST_HINT}"
        )
    return (
        f"{where} needs the plugin {plugin.name} (sha256 {plugin.short}): pass --plugin FILE, or {TRUST_HINT}"
    )


def for_config(paths: Iterable[str]) -> list[Plugin]:
    """The imported plugins a config's `plugins` stand for, to record: each path's own, else
    the one imported under its file name (a model's record, or a --plugin elsewhere). Never
    imports: a config from a checkpoint names files of another machine."""
    found = []
    for path in paths:
        plugin = _by_path.get(str(Path(path).resolve())) or next(
            (p for p in reversed(_loaded.values()) if p.name == Path(path).name), None
        )
        if plugin is None:
            raise NMTError(f"the config names the plugin {path}, which is not imported; pass --plugin {path}")
        found.append(plugin)
    return found
