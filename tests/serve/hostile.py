"""Hypothesis strategies for request bodies a hostile or careless client sends to `POST /translate`:
JSON-ish values, requests with odd field values, deep nesting, huge numbers, odd strings, raw
bytes and truncated JSON; and well-formed requests that must be translated.

Shared by the property test of `parse_translate` and the fuzz test of a real server.
"""

import json

from hypothesis import strategies as st

from nmt.serve.requests import FIELDS  # every field a request may hold

MAX_SENTENCES, MAX_CHARS = 8, 200  # the limits the servers and the properties test with

# Any text, and text of the characters that break things: NUL and other controls, line breaks,
# lone surrogates, invisible and right-to-left marks, a byte order mark, noncharacters, emoji.
ODD_CHARACTERS = "\x00\x01\t\n\r\x0b\x1f\x7f\x85\xa0\u200b\u2028\u202e\ufeff\ufffd\uffff\U0001f600\U0010ffff"
odd_strings = st.one_of(
    st.text(max_size=30),
    st.text(st.sampled_from(ODD_CHARACTERS) | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
    st.sampled_from(["", " ", "\t \u3000", "x" * 5000, "a" * 201, "5.6.1990"]),
)
# Up to 4000 digits: Python writes no integer over 4300 (raw_json has longer literals).
huge_integers = st.integers(19, 4000).map(lambda digits: 10**digits - 1)
numbers = st.one_of(
    st.integers(-3, 20),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)


def json_values(leaves: st.SearchStrategy) -> st.SearchStrategy:
    """Nested lists and objects of `leaves`."""
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=5) | st.dictionaries(odd_strings | st.sampled_from(FIELDS), inner)
        ),
        max_leaves=20,
    )


any_json = json_values(st.none() | numbers | huge_integers | odd_strings)
plain_json = json_values(st.none() | numbers | odd_strings)  # no huge integer to refuse it all


# beside "text" a list of phrases, beside "texts" a list of them per text
PHRASES = st.lists(odd_strings, max_size=3) | st.lists(st.lists(odd_strings, max_size=3), max_size=12)
RIGHT_KIND = {
    "text": odd_strings,
    "texts": st.lists(odd_strings, max_size=12) | st.just([""] * 500),
    "prefix": odd_strings,
    "prefixes": st.lists(odd_strings, max_size=12),
    "constraints": st.lists(odd_strings, max_size=3)
    | st.lists(st.lists(odd_strings, max_size=3), max_size=12),
    "avoid": st.lists(odd_strings, max_size=3) | st.lists(st.lists(odd_strings, max_size=3), max_size=12),
    "model": st.sampled_from(["run", "", "other", "\ud800"]),
    "beam": st.integers(-2, 5),
    "nbest": st.integers(-2, 5),
    "max_len": st.integers(-2, 20),
    "attention": st.booleans(),
    "markup": st.booleans(),
    "sample": st.booleans(),
    "temperature": st.floats(-1, 200),
    "top_k": st.integers(-2, 2000),
    "top_p": st.floats(-0.5, 1.5),
    "seed": st.integers(-2, 2**64),
}


@st.composite
def request_like(draw) -> dict:
    """An object with the known fields, mostly one of text and texts, their values of the right
    kind (often odd) 3 times in 4, and sometimes an unknown field."""
    sentences = draw(st.sampled_from([["text"]] * 4 + [["texts"]] * 4 + [["text", "texts"], []]))
    others = draw(st.lists(st.sampled_from(FIELDS[2:]), unique=True, max_size=5))
    data = {}
    for name in sentences + others:
        wrong = draw(st.sampled_from(range(4))) == 3  # not 0, which hypothesis draws often
        data[name] = draw(numbers | plain_json if wrong else RIGHT_KIND[name])
    if draw(st.sampled_from(range(10))) == 7:
        data[draw(odd_strings)] = draw(plain_json)
    return data


def encoded(value, draw) -> bytes:
    """`value` as JSON bytes, written as clients write it: ASCII escapes or raw UTF-8 (lone
    surrogates then become invalid UTF-8), NaN and Infinity as Python writes them."""
    if draw(st.booleans()):
        return json.dumps(value).encode()
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def deep(draw) -> bytes:
    """Arrays and objects nested up to thousands deep, as the value of a field or alone."""
    depth = draw(st.integers(1, 6000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a": ', "}"), ('{"texts": [', "]}")]))
    inner = opener * depth + '"x"' + closer * draw(st.integers(0, depth))
    return (draw(st.sampled_from(["", '{"text": "a", "beam": '])) + inner).encode()


@st.composite
def raw_json(draw) -> bytes:
    """JSON text that json.dumps never writes: duplicated keys, huge integer literals, NaN."""
    key = draw(st.sampled_from(FIELDS))
    nines = st.integers(1, 5000).map(lambda n: "9" * n)
    literal = draw(st.sampled_from(["NaN", "-Infinity", "1e999", "-0", "2.0"]) | nines)
    return draw(
        st.sampled_from(
            [
                f'{{"text": "a", "{key}": {literal}}}',
                f'{{"text": "a", "text": "b", "{key}": 1}}',
                f"[{literal}]",
                literal,
            ]
        )
    ).encode()


@st.composite
def truncated(draw) -> bytes:
    """A well-formed request cut short anywhere."""
    body = draw(valid_requests())
    return body[: draw(st.integers(0, max(0, len(body) - 1)))]


@st.composite
def valid_requests(draw) -> bytes:
    """A request within the limits that must be translated (200): printable text, small
    settings so that decoding stays quick."""
    text = st.text(st.characters(categories=["L", "N", "P", "S", "Zs"]), max_size=MAX_CHARS)
    many = st.lists(text, max_size=MAX_SENTENCES)
    data: dict = {"text": draw(text)} if draw(st.booleans()) else {"texts": draw(many)}
    for name, values in [
        ("beam", st.integers(1, 3)),
        ("nbest", st.integers(1, 3)),
        ("max_len", st.integers(1, 12)),
    ]:
        if draw(st.booleans()):
            data[name] = draw(values)
    if draw(st.booleans()):
        data["attention"] = draw(st.booleans())
    if draw(st.booleans()):
        data["sample"] = True
        for name, values in [
            ("temperature", st.floats(0.1, 5)),
            ("top_k", st.integers(0, 50)),
            ("top_p", st.floats(0.01, 1)),
            ("seed", st.integers(0, 2**63 - 1)),
        ]:
            if draw(st.booleans()):
                data[name] = draw(values)
    return encoded(data, draw)


@st.composite
def hostile_bodies(draw) -> bytes:
    """Any of the above, or random bytes."""
    kind = draw(st.sampled_from(["json", "request", "deep", "raw", "truncated", "bytes", "valid"]))
    if kind == "json":
        return encoded(draw(any_json), draw)
    if kind == "request":
        return encoded(draw(request_like()), draw)
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    return draw(
        {"deep": deep(), "raw": raw_json(), "truncated": truncated(), "valid": valid_requests()}[kind]
    )
