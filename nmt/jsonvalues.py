"""The one reader of JSON that users hand in: request bodies, constraints and JSON input lines,
results, manifests and export configs. json.loads alone recurses into deep nesting
(RecursionError), refuses integers over 4300 digits (ValueError), takes NaN and Infinity, keeps
the last of two fields of one name, and passes lone surrogates on to fail later (SentencePiece,
UTF-8 output). Here each of those, and a document of another shape than the caller expects, is
one `JSONError` line that names where and what to fix."""

from __future__ import annotations

import codecs
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from nmt.errors import NMTError
from nmt.fileio import describe_os_error

MAX_DEPTH = 32  # arrays and objects inside one another: what nmt reads needs a handful
MAX_DIGITS = 20  # digits of an integer literal: an unsigned 64-bit integer; int() refuses over 4300
NUMBER = (int, float)  # a shape: any JSON number (true and false are not numbers here)
SURROGATE = re.compile("[\ud800-\udfff]")
NAMES = {
    dict: "a JSON object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}
# A shape: a type or a tuple of types (`object`: anything), [shape] for an array of them,
# {"key": shape, ...} for an object with at least those fields, {str: shape} for one whose
# every field is of that shape.
Shape = type | tuple | list | dict


class JSONError(NMTError):
    """A document refused. `malformed`: it is not a JSON document of the kind expected (not
    readable, not UTF-8, not JSON, nested too deep, another shape), which the server answers
    with 400; else it is JSON holding a value nmt refuses (a huge integer, a repeated field, a
    lone surrogate): 422."""

    def __init__(self, message: str, malformed: bool):
        super().__init__(message)
        self.malformed = malformed


class _RefusalError(Exception):
    """What is wrong, before the caller's `where` is added, and a `hint` of how to fix it that
    the caller's `fix` replaces (for a file nmt wrote, making it again is the fix) and that
    stands before the caller's `hint` (how to write the document: a fix where this says none)."""

    def __init__(self, message: str, malformed: bool = True, hint: str = ""):
        super().__init__(message)
        self.malformed, self.hint = malformed, hint


def parse_json(
    document: str | bytes,
    where: str,
    shape: Shape = object,
    *,
    depth: int = MAX_DEPTH,
    digits: int = MAX_DIGITS,
    nan: bool = False,
    fix: str = "",
    hint: str = "",
) -> Any:
    """The value of `document` (bytes: strict UTF-8, a leading byte order mark ignored), checked
    to be of `shape`; else a `JSONError` that starts with `where` (a file:line, "the request
    body") and ends with `fix` when given, else with how to fix that refusal (a smaller number,
    whole characters) or, for one that says none (not JSON, nested too deep, another shape),
    `hint`. `nan` takes NaN and Infinity as Python writes them (the losses nmt logs from a
    diverged run)."""
    try:
        value = _loads(_text(document), depth, digits, nan)
    except _RefusalError as e:
        raise _error(e, where, fix, hint) from None
    check_value(value, where, shape, depth=depth, fix=fix, hint=hint)
    return value


def read_json(path: Path, shape: Shape = dict, *, fix: str = "") -> Any:
    """`parse_json` of a file, named by its path; a file that cannot be read is one line too, a
    `JSONError` like one that is not JSON (so a reader of a cache rebuilds it either way)."""
    try:
        document = Path(path).read_bytes()
    except OSError as e:
        raise JSONError(describe_os_error(e, path) + (f"; {fix}" if fix else ""), malformed=True) from None
    return parse_json(document, str(path), shape, fix=fix)


def check_value(
    value: Any, where: str, shape: Shape = object, *, depth: int = MAX_DEPTH, fix: str = "", hint: str = ""
) -> None:
    """`parse_json`'s checks of a value already parsed, or handed in by a program (the API's
    constraints): its nesting, its strings and its shape."""
    try:
        _walk(value, depth)
        _check_shape(value, shape, ())
    except _RefusalError as e:
        raise _error(e, where, fix, hint) from None


def _error(e: _RefusalError, where: str, fix: str, hint: str = "") -> JSONError:
    fix = fix or e.hint or hint
    return JSONError(f"{where}: {e}" + (f"; {fix}" if fix else ""), e.malformed)


def _text(document: str | bytes) -> str:
    if isinstance(document, str):
        return document
    document = document.removeprefix(codecs.BOM_UTF8)
    try:
        return document.decode("utf-8")
    except UnicodeDecodeError as e:
        line = document[: e.start].count(b"\n") + 1
        at = f"byte 0x{document[e.start]:02x} at {e.start} on line {line}: {e.reason}"
        raise _RefusalError(f"not valid JSON: it is not UTF-8 ({at})", hint="save it as UTF-8") from None


def _loads(text: str, depth: int, digits: int, nan: bool) -> Any:
    """json.loads with NaN, Infinity, integers over `digits` and repeated fields refused while
    parsing; nesting too deep for the parser's recursion is refused as deeper than `depth` (it is:
    the stack allows hundreds), and `_walk` checks what is below."""

    def integer(literal: str) -> int:  # refused before int() spends time on a long one
        if (n := len(literal.lstrip("-"))) > digits:
            raise _RefusalError(f"an integer of {n} digits, over {digits}", False, "write a smaller number")
        return int(literal)

    def not_a_number(name: str) -> float:
        raise _RefusalError(f"{name} is not a JSON number", hint="write a number or null")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:  # parsers differ on which one wins
        data = dict(pairs)
        if len(data) < len(pairs):
            twice = next(key for key, n in Counter(key for key, _ in pairs).items() if n > 1)
            raise _RefusalError(f"duplicate field {_short(twice)!r}", False, "give each field once")
        return data

    try:
        constant = float if nan else not_a_number
        return json.loads(text, parse_int=integer, parse_constant=constant, object_pairs_hook=unique)
    except json.JSONDecodeError as e:
        at = f"line {e.lineno}, column {e.colno}" if "\n" in text.strip() else f"column {e.colno}"
        raise _RefusalError(f"not valid JSON ({e.msg} at {at})") from None
    except RecursionError:
        raise _RefusalError(f"nests arrays and objects more than {depth} deep") from None


def _walk(value: Any, depth: int) -> None:
    """Nesting no deeper than `depth`, and no lone surrogate in any field name or string (not
    Unicode text: UTF-8 cannot encode it); the first found in document order is named. A stack,
    not recursion, so any depth is safe."""
    stack = [(value, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            _unpaired(value, path)
        elif isinstance(value, dict | list):
            if len(path) >= depth:
                raise _RefusalError(f"nests arrays and objects more than {depth} deep")
            if isinstance(value, dict):
                for key in value:
                    _unpaired(key, path, key)
            items = list(value.items() if isinstance(value, dict) else enumerate(value))
            stack.extend((item, (*path, key)) for key, item in reversed(items))


def _unpaired(text: str, path: tuple, field: str | None = None) -> None:
    if found := SURROGATE.search(text):
        what = "" if field is None else f"field {_short(field)!r}: "
        raise _RefusalError(
            f"{_at(path)}{what}a lone surrogate (U+{ord(found.group()):04X}) at character "
            f"{found.start()}, not text",
            False,
            "write whole characters (a surrogate pair, not half of one)",
        )


def _check_shape(value: Any, shape: Shape, path: tuple) -> None:
    """`value` is of `shape`, checked along the shape (so recursion is as deep as the shape)."""
    if isinstance(shape, list):
        _kind(value, (list,), path)
        for i, item in enumerate(value):
            _check_shape(item, shape[0], (*path, i))
    elif isinstance(shape, dict):
        _kind(value, (dict,), path)
        if list(shape) == [str]:
            for key, item in value.items():
                _check_shape(item, shape[str], (*path, key))
            return
        for key, inner in shape.items():
            if key not in value:
                raise _RefusalError(f"{_at(path)}no field {key!r} ({_describe(inner)})")
            _check_shape(value[key], inner, (*path, key))
    else:
        _kind(value, shape if isinstance(shape, tuple) else (shape,), path)


def _kind(value: Any, kinds: tuple, path: tuple) -> None:
    """`value` is of one of `kinds`: true and false are no integer, and a number that overflowed
    a float (1e999 reads as infinity) is no number."""
    if object in kinds:
        return
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        got = NAMES.get(type(value), type(value).__name__)
        raise _RefusalError(f"{_at(path)}must be {_describe(kinds)}, not {got}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _RefusalError(f"{_at(path)}a number too large for a float", False, "write a smaller one")


def _describe(shape: Shape) -> str:
    if isinstance(shape, list):
        return "an array"
    if isinstance(shape, dict):
        return NAMES[dict]
    kinds = shape if isinstance(shape, tuple) else (shape,)
    if object in kinds:
        return "any value"
    return " or ".join(NAMES[k] for k in kinds if not (k is int and float in kinds))


def _at(path: tuple) -> str:
    """`path` as a prefix of a message: `variants[0].BLEU: `, or nothing at the top."""
    name = ""
    for part in path:
        if isinstance(part, int):
            name += f"[{part}]"
        elif part.isidentifier():
            name += f".{part}" if name else part
        else:
            name += f"[{_short(part)!r}]"
    return f"{name}: " if name else ""


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "\u2026"
