"""Properties of the parsers users feed (issue 42), checked on inputs hypothesis makes up: a
config (YAML text and `--set` values) is a Config or an NMTError, never another exception; a text
file is its lines or an NMTError naming the file and the line; cleaning keeps no empty side and
normalising twice changes nothing. The server's inputs have tests of their own (tests/serve/).

Kept under ~30 s in all: examples per property are capped, and no deadline (a loaded CI machine
must not fail a slow example)."""

import dataclasses
import io
import string
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from nmt.config import Config, DataConfig, apply_override, load_config
from nmt.data.cleaning import clean_pairs, normalize
from nmt.errors import NMTError
from nmt.fileio import iter_lines, line_chunks, read_lines

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FILES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def config_keys() -> list[str]:
    """Every `section.key` (and `section.sub.key`) a config has."""

    def walk(cls: type, prefix: str) -> list[str]:
        keys = []
        for f in dataclasses.fields(cls):
            tp = typing.get_type_hints(cls)[f.name]
            keys += walk(tp, f"{prefix}{f.name}.") if dataclasses.is_dataclass(tp) else [prefix + f.name]
        return keys

    return walk(Config, "")


KEYS = config_keys()
SECTIONS = sorted({key.split(".")[0] for key in KEYS})

# -- configs --------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["NFC", "luong", "dot", "bahdanau", "cpu", "adam", "text", "hf", "none", "1e-4"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
known_key = st.sampled_from(KEYS)
file_names = st.one_of(  # for base: and -c: built-in names, odd characters, names too long for a path
    st.sampled_from(["toy-luong.yaml", "_toy", "multi30k-en-de", ".", "..", "/", "/dev/null"]),
    st.text(max_size=30),
    st.text(string.ascii_letters, min_size=250, max_size=400),
)


@st.composite
def config_mappings(draw) -> dict:
    """Mappings shaped like a config (its real sections and keys, a few strays) with values of
    any type: far more of them get past the YAML and into each key's checks than random text."""
    raw: dict = {}
    for key in draw(st.lists(known_key | st.text(max_size=12), max_size=8)):
        node, *path = key.split(".")
        target = raw.setdefault(node, {}) if path else raw
        if not isinstance(target, dict):
            continue
        for part in path[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                break
        else:
            target[path[-1] if path else node] = draw(values)
    if draw(st.booleans()):
        raw["data"] = {"src_lang": "de", "tgt_lang": "en", **(raw.get("data") or {})}
    if draw(st.booleans()):
        raw["base"] = draw(file_names | values)
    return raw


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("properties")


def loads_or_refuses(path: Path, overrides: list[str] | None = None) -> None:
    """The property: a Config, or an NMTError; any other exception fails the test."""
    try:
        assert isinstance(load_config(path, overrides), Config)
    except NMTError as e:
        assert str(e).strip() and "\n" not in str(e).strip(), f"not one line: {e!r}"


@FAST
@given(text=st.text(max_size=300))
def test_any_text_as_a_config_is_a_config_or_one_error_line(folder, text):
    path = folder / "text.yaml"
    path.write_text(text, encoding="utf-8")
    loads_or_refuses(path)


@FAST
@given(data=st.binary(max_size=200))
def test_any_bytes_as_a_config_are_a_config_or_one_error_line(folder, data):
    path = folder / "bytes.yaml"
    path.write_bytes(data)
    loads_or_refuses(path)


@FAST
@given(raw=st.one_of(config_mappings(), values))
def test_any_yaml_structure_as_a_config_is_a_config_or_one_error_line(folder, raw):
    path = folder / "structure.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    loads_or_refuses(path)


@FAST
@given(name=file_names)
def test_any_config_name_is_a_config_or_one_error_line(name):
    try:
        assert isinstance(load_config(name), Config)
    except NMTError as e:
        assert "\n" not in str(e), f"not one line: {e!r}"


set_values = st.one_of(
    st.text(max_size=30),
    values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()),
)


@FAST
@given(
    items=st.lists(
        st.tuples(known_key | st.text(string.ascii_lowercase + "._", max_size=20), set_values).map("=".join)
        | st.text(max_size=30),
        max_size=4,
    )
)
def test_any_set_values_give_a_config_or_one_error_line(folder, items):
    path = folder / "base.yaml"
    if not path.exists():
        path.write_text("data: {src_lang: de, tgt_lang: en}\n")
    loads_or_refuses(path, items)


@FAST
@given(key=known_key, value=set_values)
def test_a_set_value_is_taken_or_refused_naming_the_option(key, value):
    raw: dict = {}
    try:
        apply_override(raw, f"{key}={value}")
    except NMTError as e:
        assert str(e).startswith("--set") and key in str(e) and "\n" not in str(e), str(e)
    else:
        node = raw
        for part in key.split(".")[:-1]:
            node = node[part]
        assert key.split(".")[-1] in node


# -- text files -----------------------------------------------------------------------------

PIECES = [b"a", b"\n", b"\r\n", b"\xef\xbb\xbf", b"\xc3\xa9", b"\xff", b"\xe2\x82"]  # BOM, 2 bytes, bad, cut
texts = st.one_of(
    st.binary(max_size=300),
    st.lists(st.text(max_size=12), max_size=12).map(lambda lines: "\n".join(lines).encode("utf-8")),
    st.lists(
        st.sampled_from([b"a", b"\n", b"\r\n", b"\xef\xbb\xbf", b"\xc3\xa9", b"\xff", b"\xe2\x82"]),
        max_size=40,
    ).map(b"".join),
)


def expected_lines(data: bytes, errors: str) -> list[str]:
    """What a text file of `data` holds, by the definition: UTF-8, a leading byte-order mark
    dropped, split at newlines (no empty last line for a final newline), carriage returns
    before a newline dropped."""
    text = data.decode("utf-8", errors).removeprefix("\ufeff")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def bad_line(data: bytes) -> int:
    """The number of the line of the first byte that is not UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return data[: e.start].count(b"\n") + 1
    raise AssertionError("the data is UTF-8")


@FILES
@given(data=texts, errors=st.sampled_from(["strict", "replace"]))
def test_a_text_file_is_its_lines_or_an_error_naming_the_file_and_the_line(folder, data, errors):
    path = folder / "lines.txt"
    path.write_bytes(data)
    try:
        lines = read_lines(path, errors)
    except NMTError as e:
        assert errors == "strict", f"errors=replace raised {e}"
        assert str(e).startswith(f"{path}: line {bad_line(data)} is not valid UTF-8"), str(e)
        with pytest.raises(NMTError, match=f"line {bad_line(data)} "):
            list(iter_lines(path, errors))
        return
    assert lines == expected_lines(data, errors)
    assert list(iter_lines(path, errors)) == lines


@FILES
@given(data=texts, size=st.integers(min_value=1, max_value=5), errors=st.sampled_from(["strict", "replace"]))
def test_reading_a_chunk_at_a_time_gives_the_same_lines_and_line_numbers(data, size, errors):
    try:
        chunks = list(line_chunks(io.BytesIO(data), "f.txt", size, errors))
    except NMTError as e:
        assert errors == "strict" and str(e).startswith(f"f.txt: line {bad_line(data)} "), str(e)
        return
    assert [line for _, lines in chunks for line in lines] == expected_lines(data, errors)
    firsts = [first for first, _ in chunks]
    assert firsts == [1 + size * i for i in range(len(chunks))]  # each chunk's first line number


# -- cleaning -------------------------------------------------------------------------------

# Unicode text with the awkward parts common: whitespace of every kind, combining marks,
# compatibility characters NFKC rewrites.
AWKWARD = [" ", "\t", "\u00a0", "\u3000", "\u2028", "\x1c", "\u0301", "\u00b4", "\ufb01", "\u2460"]
awkward = st.text(
    st.one_of(
        st.characters(),
        st.sampled_from(
            [" ", "\t", "\u00a0", "\u3000", "\u2028", "\x1c", "\u0301", "\u00b4", "\ufb01", "\u2460"]
        ),
    ),
    max_size=20,
)
forms = st.sampled_from(typing.get_args(typing.get_type_hints(DataConfig)["normalize"]))


@FAST
@given(pairs=st.lists(st.tuples(awkward, awkward), max_size=10), form=forms)
def test_cleaning_keeps_no_pair_with_an_empty_side_and_counts_every_drop(pairs, form):
    kept, dropped = clean_pairs(pairs, DataConfig(src_lang="a", tgt_lang="b", normalize=form))
    assert all(src and tgt for src, tgt in kept)
    assert len(kept) + sum(dropped.values()) == len(pairs)
    assert all(src == normalize(src, form) and tgt == normalize(tgt, form) for src, tgt in kept)


@FAST
@given(text=awkward, form=forms)
def test_normalising_twice_changes_nothing(text, form):
    once = normalize(text, form)
    assert normalize(once, form) == once
    assume(once)
    assert once == once.strip() and "  " not in once
