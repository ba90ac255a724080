"""The server's pure parts: how a request body is checked, and how models are named."""

import json

import pytest

from nmt.serve.batcher import Settings
from nmt.serve.requests import Limits, RequestError, parse_translate
from nmt.serve.server import model_names
from nmt.text.constraints import Constraints

DEFAULT_BEAMS = {"first": 4, "second": 1}
LIMITS = Limits(max_sentences=3, max_chars=10)


def parse(body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_translate(raw, LIMITS, DEFAULT_BEAMS)


def test_defaults_come_from_the_first_model():
    req = parse({"text": "hallo"})
    plain = Settings("first", 4, 1, None, plain=True)
    assert req.sentences == ["hallo"] and req.settings == plain and not req.attention
    req = parse(
        {"texts": ["a", "b"], "model": "second", "beam": 2, "nbest": 2, "max_len": 9, "attention": True}
    )
    assert req.settings == Settings("second", 2, 2, 9) and req.attention
    req = parse(
        {"text": "a", "sample": True, "nbest": 3, "temperature": 2, "top_k": 0, "top_p": 0.9, "seed": 7}
    )
    assert req.settings == Settings("first", 4, 3, None, True, 2.0, 0, 0.9, 7, plain=True)
    assert parse({"text": "a", "sample": False}).settings == Settings("first", 4, 1, None, False, plain=True)


def test_a_request_is_plain_without_attention_markup_or_constraints():
    """Plain requests share pools of their own, which keep no attention and which a GPU decodes
    over fixed rows; a target prefix or an empty constraint leaves a request plain."""
    assert parse({"text": "a", "prefix": "b", "constraints": []}).settings.plain
    assert not parse({"text": "a", "attention": True}).settings.plain
    assert not parse({"text": "a <b>c</b>", "markup": True}).settings.plain
    assert not parse({"text": "a", "constraints": ["b"]}).settings.plain
    assert not parse({"text": "a", "avoid": ["b"]}).settings.plain
    assert parse({"text": "a", "prefix": "b"}).prefixes == ["b"] and parse({"text": "a"}).prefixes is None
    assert parse({"texts": ["a", "b"], "prefixes": ["", "c"]}).prefixes == ["", "c"]
    assert parse({"text": "a", "constraints": ["b"]}).constraints == [Constraints(["b"], [])]
    req = parse({"texts": ["a", "b"], "avoid": [["c"], []], "constraints": [[], ["d", "e"]]})
    assert req.constraints == [Constraints([], ["c"]), Constraints(["d", "e"], [])]
    assert parse({"text": "a"}).constraints is None


def test_sentences_without_phrases_take_any_search():
    # As `nmt translate` decodes a line without constraints greedily or sampling: only a sentence
    # with phrases to include or avoid needs a beam.
    # Empty lists steer nothing: no constraints at all (and on a GPU the fast, plain search).
    req = parse({"text": "a", "constraints": [], "beam": 1})
    assert req.settings.beam == 1 and req.constraints is None
    req = parse({"texts": ["a", "b"], "constraints": [[], []], "avoid": [[], []], "sample": True})
    assert req.settings.sample and req.constraints is None
    req = parse({"texts": ["a", "b"], "constraints": [[], []], "nbest": 1, "model": "second"})
    assert req.constraints is None
    req = parse({"texts": ["a", "b"], "constraints": [["x"], []], "beam": 2})
    assert req.constraints == [Constraints(["x"], []), Constraints([], [])]


@pytest.mark.parametrize(
    "body,status,fragment",
    [
        (b"{", 400, "not valid JSON"),
        (b"\xff", 400, "not valid JSON"),
        ([1, 2], 400, "must be a JSON object"),
        ({}, 422, 'exactly one of "text"'),
        ({"text": "a", "texts": ["b"]}, 422, 'exactly one of "text"'),
        ({"txt": "a"}, 422, "unknown field 'txt'"),
        ({"text": 3}, 422, "text: must be a string"),
        ({"texts": "a"}, 422, "texts: must be a list"),
        ({"texts": ["a", None]}, 422, "texts[1]: must be a string"),
        ({"texts": ["a"] * 4}, 413, "4 sentences, at most 3"),
        ({"texts": ["a", "x" * 11]}, 413, "texts[1]: 11 characters, at most 10"),
        ({"text": "a\nb"}, 422, "line break"),
        ({"text": "a", "beam": "5"}, 422, "beam: must be an integer"),
        ({"text": "a", "beam": True}, 422, "beam: must be an integer"),
        ({"text": "a", "beam": 0}, 422, "beam: must be between 1 and 16"),
        ({"text": "a", "nbest": 17}, 422, "nbest: must be between 1 and 16"),
        ({"text": "a", "max_len": 1.5}, 422, "max_len: must be an integer"),
        ({"text": "a", "attention": "yes"}, 422, "attention: must be true or false"),
        ({"text": "a", "model": 1}, 422, "model: must be a string"),
        ({"text": "a", "sample": 1}, 422, "sample: must be true or false"),
        ({"text": "a", "prefix": 3}, 422, "prefix: must be a string"),
        ({"texts": ["a"], "prefix": "b"}, 422, 'prefix: goes with "text"'),
        ({"text": "a", "prefixes": ["b"]}, 422, 'prefixes: go with "texts"'),
        (
            {"text": "a", "prefix": "b", "prefixes": ["c"]},
            422,
            'one of "prefix" (beside "text") or "prefixes"',
        ),
        ({"texts": ["a"], "prefix": "b", "prefixes": ["b"]}, 422, '"prefixes" (beside "texts"), not both'),
        ({"texts": ["a", "b"], "prefixes": ["c"]}, 422, "prefixes: must be a list of 2 strings"),
        ({"texts": ["a", "b"], "prefixes": ["c", None]}, 422, "prefixes[1]: must be a string"),
        ({"text": "a", "prefix": "b\nc"}, 422, "prefix: one sentence per string"),
        ({"text": "a", "prefix": "x" * 11}, 413, "prefix: 11 characters, at most 10"),
        ({"text": "a", "constraints": "b"}, 422, "constraints: must be a list of strings"),
        ({"text": "a", "avoid": [3]}, 422, "avoid: must be a list of strings"),
        ({"texts": ["a", "b"], "constraints": [["c"]]}, 422, "constraints: must be a list of 2 lists"),
        ({"texts": ["a"], "avoid": [["c", None]]}, 422, "avoid[0]: must be a list of strings"),
        ({"text": "a", "constraints": ["x" * 11]}, 413, "constraints[0]: 11 characters, at most 10"),
        ({"text": "a", "constraints": ["b"], "beam": 1}, 422, "lexical constraints need beam search"),
        ({"text": "a", "avoid": ["b"], "sample": True}, 422, "text: lexical constraints need beam search"),
        (
            {"texts": ["a", "b", "c"], "constraints": [[], [], ["d"]], "beam": 1},
            422,
            "texts[2]: lexical constraints need beam search; ask for a beam of 2 or more",
        ),
        ({"texts": ["a", "b"], "avoid": [[], ["c"]], "sample": True}, 422, "texts[1]: lexical constraints"),
        ({"text": "a", "top_k": 5}, 422, 'top_k: applies only when sampling; add "sample": true'),
        ({"text": "a", "sample": False, "seed": 5}, 422, "seed: applies only when sampling"),
        *[
            (
                {"text": "a", "sample": True, "temperature": t},
                422,
                f"temperature: must be at least 0.001 and at most 100, got {t}",
            )
            for t in (0, 1e-45, 5e-324, 0.0009, 100.5, 1e308)
        ],
        ({"text": "a", "sample": True, "temperature": "hot"}, 422, "temperature: must be a number"),
        ({"text": "a", "sample": True, "top_p": 1.01}, 422, "top_p: must be above 0 and at most 1, got 1.01"),
        ({"text": "a", "sample": True, "top_k": -1}, 422, "top_k: must be between 0 and 1000, got -1"),
        ({"text": "a", "sample": True, "seed": 2.5}, 422, "seed: must be an integer"),
        ({"text": "a", "sample": True, "seed": 2**64}, 422, "seed: must be between 0 and"),
        ({"text": "a", "model": "third"}, 422, "no model named 'third' (served: first, second)"),
        # Each of these answered 500 before (issue 42): RecursionError, ValueError, TypeError.
        (b"[" * 5000 + b"]" * 5000, 400, "nests arrays and objects more than 8 deep"),
        (b'{"text": "a", "beam": ' + b"[" * 900 + b"]" * 900 + b"}", 400, "more than 8 deep"),
        (b'{"text": "a", "beam": ' + b"9" * 5000 + b"}", 422, "an integer of 5000 digits"),
        (b"-" + b"9" * 4301, 422, "an integer of 4301 digits"),
        ({"text": "\ud800"}, 422, "text: a lone surrogate (U+D800) at character 0"),
        ({"texts": ["a", "b \udfff"]}, 422, "texts[1]: a lone surrogate (U+DFFF) at character 2"),
        # Refused now, taken before: not JSON, not text, or ambiguous.
        (b'{"text": "a", "beam": NaN}', 400, "NaN is not a JSON number"),
        (b'{"text": "a", "max_len": -Infinity}', 400, "-Infinity is not a JSON number"),
        ({"text": "a\x00b"}, 422, "text: the control character (U+0000) at character 1"),
        ({"texts": ["\x1b[31m"]}, 422, "texts[0]: the control character (U+001B) at character 0"),
        (b'{"text": "a", "text": "b"}', 422, "duplicate field 'text'"),
        ('{"text": "a"}'.encode("utf-16"), 400, "not UTF-8 (byte 0xff at 0"),
        (b'{"text": "\xed\xa0\x80"}', 400, "not UTF-8 (byte 0xed at 10"),
    ],
)
def test_each_bad_request_names_its_problem(body, status, fragment):
    with pytest.raises(RequestError) as caught:
        parse(body)
    assert caught.value.status == status and fragment in str(caught.value)


@pytest.mark.parametrize(
    "body,sentences",
    [
        (b'\xef\xbb\xbf{"text": "a"}', ["a"]),  # a UTF-8 byte order mark, which RFC 8259 lets a parser ignore
        ({"texts": ["", " ", "\t\u3000"]}, ["", " ", "\t\u3000"]),  # empty and blank: answered ""
        ({"text": "a\tb\u2028c"}, ["a\tb\u2028c"]),  # tab and Unicode separators: whitespace
        ({"text": "x" * 10}, ["x" * 10]),  # one long token
    ],
)
def test_odd_but_harmless_text_is_taken(body, sentences):
    assert parse(body).sentences == sentences


def test_the_largest_request_within_the_limits_fits_the_body_limit():
    # json.dumps writes an emoji as a 12-byte surrogate pair escape: 1 character of the limit.
    limits = Limits()
    body = json.dumps({"texts": ["\U0001f600" * limits.max_chars] * limits.max_sentences}).encode()
    assert len(body) <= limits.max_body_bytes
    assert len(parse_translate(body, limits, DEFAULT_BEAMS).sentences) == limits.max_sentences


def test_models_are_named_after_their_run_directory_or_explicitly():
    names = model_names(["runs/toy", "runs/toy/checkpoints/best.pt", "en=runs/x/model.pt", "ckpt.pt"])
    assert names == {
        "toy": "runs/toy",
        "toy-2": "runs/toy/checkpoints/best.pt",
        "en": "runs/x/model.pt",
        "ckpt": "ckpt.pt",
    }
