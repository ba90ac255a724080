"""The one reader of JSON from users (`nmt.jsonvalues`, issue 53): each refusal is one line naming
where and what, through every front end (the reader, `--constraints` lines, `--input-format jsonl`
lines, the server's request body, `nmt compare --report-only`'s results.json), and hostile
documents hypothesis makes up give a value or that one line, never another exception."""

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from nmt.cli import app
from nmt.compare.decoding import cached_facts
from nmt.compare.results import read_results
from nmt.errors import NMTError
from nmt.fileio import file_identity
from nmt.jsonvalues import NUMBER, JSONError, check_value, parse_json, read_json
from nmt.serve.requests import Limits, RequestError, parse_translate
from nmt.text.constraints import Constraints
from tests.conftest import one_line_error, refuse_reading
from tests.serve.hostile import any_json, deep, hostile_bodies, odd_strings, raw_json

runner = CliRunner()
DEEP = "[" * 5000 + "]" * 5000
HUGE = "9" * 5001
# each listed case of issue 53, as a line of --constraints and of --input-format jsonl
HOSTILE = {
    "deep": (f'{{"constraints": {DEEP}}}', "nests arrays and objects more than 32 deep"),
    "huge integer": (f'{{"constraints": [{HUGE}]}}', "an integer of 5001 digits"),
    "lone surrogate": (
        '{"constraints": ["\\ud800"]}',
        "constraints[0]: a lone surrogate (U+D800) at character 0",
    ),
}


# -- the reader ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "document,malformed,message",
    [
        (b"\xff{}", True, "f.json: not valid JSON: it is not UTF-8 (byte 0xff at 0 on line 1"),
        (
            b'{"a":\n 1,,}',
            True,
            "f.json: not valid JSON (Expecting property name enclosed in double quotes at line 2",
        ),
        ('{"a": ', True, "f.json: not valid JSON (Expecting value at column 7)"),
        ('{"a": NaN}', True, "f.json: NaN is not a JSON number; write a number or null"),
        ("[-Infinity]", True, "f.json: -Infinity is not a JSON number"),
        ("Infinity", True, "f.json: Infinity is not a JSON number"),
        (DEEP, True, "f.json: nests arrays and objects more than 32 deep"),  # json.loads recursing too far
        ("[" * 33 + "]" * 33, True, "f.json: nests arrays and objects more than 32 deep"),  # below that
        ('{"a": ' * 33 + "1" + "}" * 33, True, "f.json: nests arrays and objects more than 32 deep"),
        (HUGE, False, "f.json: an integer of 5001 digits, over 20; write a smaller number"),
        ("[-" + "9" * 21 + "]", False, "f.json: an integer of 21 digits, over 20"),
        ('{"a": 1, "b": 2, "a": 3}', False, "f.json: duplicate field 'a'; give each field once"),
        (
            '{"a": [{"b c": "x\\udfff"}]}',
            False,
            "f.json: a[0]['b c']: a lone surrogate (U+DFFF) at character 1",
        ),
        ('{"x": {"\\ud800": 1}}', False, "f.json: x: field '\\ud800': a lone surrogate (U+D800)"),
        ('"\\ud83d"', False, "f.json: a lone surrogate (U+D83D) at character 0, not text"),
    ],
)
def test_each_refusal_is_one_line_naming_where_and_what(document, malformed, message):
    with pytest.raises(JSONError) as caught:
        parse_json(document, "f.json")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert caught.value.malformed == malformed


@pytest.mark.parametrize(
    "value,shape,message",
    [
        ([1], dict, "must be a JSON object, not an array"),
        ({"a": 1}, {"a": int, "b": str}, "no field 'b' (a string)"),
        ({}, {"a": object}, "no field 'a' (any value)"),
        ({"a": True}, {"a": int}, "a: must be an integer, not true or false"),
        ({"a": "1"}, {"a": NUMBER}, "a: must be a number, not a string"),
        ({"a": 1e999}, {"a": NUMBER}, "a: a number too large for a float"),
        ({"a": [["x", 2]]}, {"a": [[str]]}, "a[0][1]: must be a string, not an integer"),
        ({"a": {"k": None}}, {"a": {str: (int, str)}}, "a.k: must be an integer or a string, not null"),
    ],
)
def test_a_value_of_another_shape_is_one_line_naming_its_path(value, shape, message):
    with pytest.raises(JSONError) as caught:
        check_value(value, "f.json", shape, fix="fix it")
    assert str(caught.value) == f"f.json: {message}; fix it"  # the caller's fix, not the hint
    assert caught.value.malformed == ("too large" not in message)  # an overflow is JSON, refused


def test_what_is_json_and_of_the_shape_is_returned():
    assert parse_json(b'\xef\xbb\xbf{"a": [1, 2.5, "\\ud83d\\ude00", null, true]}', "f", dict) == {
        "a": [1, 2.5, "\U0001f600", None, True]
    }
    assert parse_json("[" * 32 + "]" * 32, "f") == parse_json("[" * 32 + "]" * 32, "f", list)
    assert parse_json("-" + "9" * 20, "f") == -(10**20 - 1)
    assert parse_json('{"loss": NaN}', "f", nan=True)["loss"] != 0  # NaN, as a diverged run logs it
    assert parse_json('{"a": 1e999}', "f", {"a": object}) == {"a": float("inf")}


def test_a_file_that_cannot_be_read_is_one_line(tmp_path):
    # a JSONError like a document that is not JSON: a cache's reader rebuilds the cache either way
    with pytest.raises(JSONError, match="No such file or directory; run it again") as caught:
        read_json(tmp_path / "missing.json", fix="run it again")
    assert caught.value.malformed
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(JSONError, match=r"folder.json: Is a directory \(give a file name, not a folder\)$"):
        read_json(tmp_path / "folder.json")
    (tmp_path / "x.json").write_text("[1]")
    with pytest.raises(JSONError, match=r"x.json: must be a JSON object, not an array$"):
        read_json(tmp_path / "x.json")


def test_cached_facts_that_cannot_be_read_are_a_fresh_start(tmp_path, monkeypatch):
    checkpoint, facts = tmp_path / "best.pt", tmp_path / "facts.json"
    checkpoint.write_bytes(b"weights")
    fresh = {"checkpoint": file_identity(checkpoint), "sets": {}}
    facts.write_text(json.dumps({**fresh, "sets": {"test": {"seconds": 1}}}))
    assert cached_facts(facts, checkpoint)["sets"] == {"test": {"seconds": 1}}
    refuse_reading(monkeypatch, facts)
    assert cached_facts(facts, checkpoint) == fresh  # rebuilt, not refused
    facts.write_bytes(b"\xff{")
    monkeypatch.undo()
    assert cached_facts(facts, checkpoint) == fresh


def test_a_line_that_is_not_json_says_how_to_write_one():
    include = 'write one JSON object per line: {"constraints": [...], "avoid": [...]}'
    with pytest.raises(JSONError) as caught:
        Constraints.from_json('{"constraints": [', "c.jsonl:1")
    assert str(caught.value) == f"c.jsonl:1: not valid JSON (Expecting value at column 18); {include}"
    text = 'write one JSON object per line: {"text": "...", "constraints": [...], "avoid": [...]}'
    with pytest.raises(JSONError) as caught:
        Constraints.from_input('{"text": "a", "constraints": ' + DEEP + "}", "jsonl", "in.jsonl:2")
    assert str(caught.value) == f"in.jsonl:2: nests arrays and objects more than 32 deep; {text}"
    with pytest.raises(JSONError, match=r"an integer of 5001 digits, over 20; write a smaller number$"):
        Constraints.from_input(f'{{"text": "a", "constraints": [{HUGE}]}}', "jsonl", "in.jsonl:2")
    with pytest.raises(JSONError, match=r"f: must be a JSON object, not an array; say what$"):
        parse_json("[]", "f", dict, hint="say what")
    with pytest.raises(JSONError, match=r"f: must be a JSON object, not an array; make it again$"):
        parse_json("[]", "f", dict, fix="make it again", hint="say what")  # a fix replaces every hint


def test_phrases_the_api_hands_in_are_checked_too():
    with pytest.raises(JSONError, match=r"^line 3: avoid\[1\]: a lone surrogate \(U\+DC00\) at character 2"):
        Constraints.parse({"avoid": ["ok", "ab\udc00"]}, "line 3")
    assert Constraints.parse({"constraints": ["\U0001f600"]}, "x") == Constraints(["\U0001f600"], [])


def test_the_server_answers_as_before():
    limits, beams = Limits(), {"run": 5}
    for body, status, fragment in [
        (DEEP.encode(), 400, "the request body: nests arrays and objects more than 8 deep"),
        (b'{"text": ' + HUGE.encode() + b"}", 422, "an integer of 5001 digits"),
        (b'{"text": "\\ud800"}', 422, "text: a lone surrogate (U+D800) at character 0"),
        (b"[1]", 400, "the request body: must be a JSON object, not an array"),
    ]:
        with pytest.raises(RequestError) as caught:
            parse_translate(body, limits, beams)
        assert caught.value.status == status and fragment in str(caught.value)


# -- the command line ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model(toy_dir, tmp_path_factory):
    from tests.test_end_to_end import train_toy

    return train_toy(toy_dir, tmp_path_factory.mktemp("jsonvalues") / "run", "train.max_steps=1")


@pytest.mark.parametrize("case", HOSTILE)
@pytest.mark.parametrize("form", ["--constraints", "--input-format jsonl"])
def test_hostile_constraints_and_json_lines_are_one_line_and_write_nothing(model, tmp_path, case, form):
    line, message = HOSTILE[case]
    source, guides, out = tmp_path / "in.txt", tmp_path / "guides.jsonl", tmp_path / "out.txt"
    if form == "--constraints":
        source.write_text("1.1.1990\n", encoding="utf-8")
        guides.write_text(line + "\n", encoding="utf-8")
        extra, named = ["--constraints", str(guides)], guides
    else:
        source.write_text('{"text": "1.1.1990", ' + line[1:] + "\n", encoding="utf-8")
        extra, named = ["--input-format", "jsonl"], source
    args = ["translate", "-m", str(model), "-i", str(source), "-o", str(out), "--beam", "3", "-q", *extra]
    result = runner.invoke(app, args)
    one_line_error(result, f"{named}:1: {message}")
    assert "Traceback" not in result.output and not out.exists()


def results() -> dict:
    """A results.json as nmt compare writes it: two variants, one seed, one set, a heatmap."""
    spread = {"mean": 20.0, "sd": None, "min": 20.0, "max": 20.0}
    scores = {"BLEU": spread, "chrF": spread, "length_ratio": spread}
    facts = {"steps": 10, "train_seconds": 12.5, "train_tokens_per_s": 900, "train_peak_mib": None}
    variants = [
        {
            "name": name,
            "parameters": 1000,
            "BLEU": spread,
            "chrF": spread,
            "scores": {"test": scores},
            "lengths": {"test": [{"bleu": 20.0, "ci": 1.5}, {"bleu": None, "ci": None}]},
            **facts,
            "decode_sentences_per_s": 50.0,
        }
        for name in ("a", "b")
    ]
    run = {"seed": 1, "BLEU": 20.0, "chrF": 40.0, **facts, "best_valid_bleu": None, "threads": 1}
    return json.loads(
        json.dumps(
            {  # no dict shared (deepcopy keeps sharing): a test edits one place
                "format": 3,
                "command": "nmt compare -c toy-luong.yaml -o out",
                "config": "toy-luong.yaml",
                "common_overrides": [],
                "seeds": [1],
                "split": "test",
                "sentences": 2,
                "checkpoint": "best",
                "sets": [{"name": "test", "origin": "the test split", "sentences": 2, "source_words": 3.0}],
                "lengths": {"test": {"sets": ["test"], "labels": ["1-10", "11+"], "sentences": [2, 0]}},
                "variants": variants,
                "comparisons": [
                    {
                        "variant": "b",
                        "baseline": "a",
                        "bleu_difference": 0.0,
                        "seed_ranges_apart": None,
                        "p_values": {"1": 0.5},
                        "verdict": "neither",
                    }
                ],
                "bootstrap": {"resamples": 10, "seed": 1, "significance_level": 0.05},
                "heatmaps": [
                    {
                        "variant": "a",
                        "line": 1,
                        "source": "x y",
                        "reference": "z",
                        "matrix": [[0.5, 0.5], [0.0, 1.0]],
                        "source_words": ["x", "y"],
                        "target_words": ["z", "</s>"],
                    }
                ],
                "runs": [
                    {"variant": name, **run, "curve": [{"seconds": 5.0, "step": 5, "valid_bleu": 1.0}]}
                    for name in ("a", "b")
                ],
                "baseline": "a",
            }
        )
    )


def report_only(out):
    return runner.invoke(app, ["compare", "-o", str(out), "--report-only"])


def test_a_results_file_as_compare_writes_it_is_reported(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(results()))
    result = report_only(tmp_path)
    assert result.exit_code == 0, result.output
    assert "| b | 1,000 | 20.00 |" in (tmp_path / "report.md").read_text()


def edited(path: str, value):
    """results() with the value at `path` (keys and indices joined by /) replaced."""
    data = results()
    *parents, last = [int(p) if p.isdigit() else p for p in path.split("/")]
    node = data
    for part in parents:
        node = node[part]
    node[last] = value
    return data


@pytest.mark.parametrize(
    "text,message",
    [
        ('{"format": 3, "variants": [', "results.json: not valid JSON (Expecting value at column 28)"),
        ("[3]", "results.json: must be a JSON object, not an array"),
        (
            json.dumps(edited("variants/1/BLEU/mean", "20")),
            "variants[1].BLEU.mean: must be a number, not a string",
        ),
        (json.dumps(edited("runs/0/curve", {})), "runs[0].curve: must be an array, not a JSON object"),
        (json.dumps(edited("heatmaps/0/matrix/1", [1.0])), "heatmaps[0].matrix: not 2 rows of 2 weights"),
        (json.dumps(edited("runs/1/variant", "c")), "runs[1].variant: no variant named 'c'"),
        (json.dumps(edited("lengths/test/sentences", [2])), "lengths['test']: 2 labels but 1 counts"),
        (json.dumps(edited("variants/0/scores", {})), "variants[0].scores: none for the set 'test'"),
        (json.dumps(edited("seeds", [])), "seeds: none listed"),
        (
            json.dumps(edited("runs/0/train_seconds", 1e999)).replace("Infinity", "1e999"),  # read as inf
            "runs[0].train_seconds: a number too large for a float",
        ),
    ],
)
def test_a_results_file_that_is_not_as_compare_writes_it_is_one_line(tmp_path, text, message):
    (tmp_path / "results.json").write_text(text)
    line = one_line_error(report_only(tmp_path), str(tmp_path / "results.json"), message)
    assert line.endswith("; run nmt compare again to rebuild it")
    assert not (tmp_path / "report.md").exists()


# -- every front end, on hostile documents (hypothesis) ------------------------------------------

HOSTILE_PROPERTY = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def as_text(document: bytes) -> str:
    """`document` as a line reader hands it on: UTF-8, and where it is not, raw lone surrogates
    (what the API could be given) rather than nothing."""
    return document.decode("utf-8", "surrogateescape")


@st.composite
def guide_like(draw) -> bytes:
    """Objects shaped like a constraints or JSON input line, their values often of the wrong type."""
    value = st.lists(odd_strings, max_size=3) | any_json
    data = {key: draw(value) for key in draw(st.lists(st.sampled_from(["text", "constraints", "avoid"])))}
    if draw(st.booleans()):
        data["text"] = draw(odd_strings)
    return json.dumps(data, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")


@st.composite
def results_like(draw) -> bytes:
    """results() with one value anywhere replaced by a hostile one."""
    data, paths = results(), []
    stack = [(data, ())]
    while stack:
        node, path = stack.pop()
        paths.append(path)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend((item, (*path, key)) for key, item in items)
    *parents, last = draw(st.sampled_from([p for p in paths if p]))
    node = data
    for part in parents:
        node = node[part]
    node[last] = draw(any_json | st.sampled_from([[], {}, "", -1, 0, None, True]))
    return json.dumps(data, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")


documents = st.one_of(
    hostile_bodies(),
    deep(),
    raw_json(),
    guide_like(),
    results_like(),
    st.binary(max_size=200),
)


def one_line(error: Exception) -> None:
    message = str(error)
    assert message.strip() and "\n" not in message, repr(message)
    assert_text(message)  # printable: no lone surrogate of the input copied into it


def assert_text(value) -> None:
    """`value` is Unicode text: a string UTF-8 can encode (SentencePiece and every output do)."""
    assert isinstance(value, str)
    value.encode("utf-8")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile")


def strings(value) -> Iterator[str]:
    """Every string a front end returned: field names, values, texts and phrases."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Constraints):
        yield from [*value.include, *value.avoid]
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


@HOSTILE_PROPERTY
@given(document=documents)
def test_every_front_end_gives_text_or_one_line(folder, document):
    """The reader, a constraints file's and a JSON input's lines, a request body, a results.json:
    each returns values whose every string is text (UTF-8 can encode it), or one line."""
    text = as_text(document)
    lines = list(enumerate(text.split("\n"), 1))
    (folder / "results.json").write_bytes(document)
    for parse in (
        lambda: parse_json(document, "f.json", dict),
        lambda: parse_json(text, "f.json:1"),
        lambda: [Constraints.from_json(line, f"c.jsonl:{n}") for n, line in lines],
        lambda: [Constraints.from_input(line, "jsonl", f"in.jsonl:{n}") for n, line in lines],
        lambda: read_results(folder),
    ):
        try:
            for value in strings(parse()):
                assert_text(value)
        except NMTError as e:
            one_line(e)
    try:
        request = parse_translate(document, Limits(), {"run": 5})
    except RequestError as e:
        assert 400 <= e.status < 500
        one_line(e)
    else:
        for value in strings([request.sentences, request.prefixes, request.constraints]):
            assert_text(value)
