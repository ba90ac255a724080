"""Properties of `parse_translate` over generated bodies (hypothesis): whatever a client sends, it
returns a request within the limits or raises `RequestError` with a 4xx status and a message the
server can send, and never anything else."""

import json
import unicodedata

from hypothesis import HealthCheck, given, settings

from nmt.config import TEMPERATURES
from nmt.serve.requests import Limits, RequestError, TranslateRequest, parse_translate
from tests.serve.hostile import MAX_CHARS, MAX_SENTENCES, hostile_bodies, valid_requests

DEFAULT_BEAMS = {"run": 5, "other": 1}
LIMITS = Limits(max_sentences=MAX_SENTENCES, max_chars=MAX_CHARS)
PROPERTY = settings(
    max_examples=1500, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def assert_within_limits(req: TranslateRequest, limits: Limits) -> None:
    """What the model may be given: a few sentences of short, one-line Unicode text, and
    settings in range."""
    assert len(req.sentences) <= limits.max_sentences
    for s in req.sentences:
        assert isinstance(s, str) and len(s) <= limits.max_chars
        s.encode("utf-8")  # no lone surrogate
        assert not any(unicodedata.category(c) == "Cc" and c != "\t" for c in s), repr(s)
    model, beam, nbest, max_len = (
        req.settings.model,
        req.settings.beam,
        req.settings.nbest,
        req.settings.max_len,
    )
    assert model in DEFAULT_BEAMS
    assert type(beam) is int and 1 <= beam <= limits.max_beam
    assert type(nbest) is int and 1 <= nbest <= limits.max_nbest
    assert max_len is None or (type(max_len) is int and 1 <= max_len <= limits.max_len)
    assert type(req.attention) is bool
    sampling = req.settings
    assert sampling.sample in (None, True, False)
    assert sampling.temperature is None or TEMPERATURES[0] <= sampling.temperature <= TEMPERATURES[1]
    assert sampling.top_k is None or (type(sampling.top_k) is int and 0 <= sampling.top_k <= limits.max_top_k)
    assert sampling.top_p is None or 0 < sampling.top_p <= 1
    assert sampling.seed is None or (type(sampling.seed) is int and 0 <= sampling.seed < 2**63)
    if req.prefixes is not None:
        assert len(req.prefixes) == len(req.sentences)
        for p in req.prefixes:
            assert isinstance(p, str) and len(p) <= limits.max_chars
            assert not any(unicodedata.category(c) == "Cc" and c != "\t" for c in p), repr(p)
    if req.constraints is not None:
        assert len(req.constraints) == len(req.sentences) and max(beam, nbest) >= 2 and not sampling.sample
        for guide in req.constraints:
            for p in [*guide.include, *guide.avoid]:
                assert isinstance(p, str) and len(p) <= limits.max_chars
                assert not any(unicodedata.category(c) == "Cc" and c != "\t" for c in p), repr(p)
    if sampling.sample is not True:
        assert (sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed) == (None,) * 4


@PROPERTY
@given(hostile_bodies())
def test_any_body_gives_a_request_within_the_limits_or_a_4xx(body):
    try:
        req = parse_translate(body, LIMITS, DEFAULT_BEAMS)
    except RequestError as e:
        assert 400 <= e.status < 500 and str(e)
        json.dumps({"error": str(e)}, ensure_ascii=False).encode("utf-8")  # as Starlette sends it
    else:
        assert_within_limits(req, LIMITS)


@settings(max_examples=300, deadline=None, database=None)
@given(valid_requests())
def test_every_well_formed_request_is_taken_and_fits_the_body_limit(body):
    assert_within_limits(parse_translate(body, LIMITS, DEFAULT_BEAMS), LIMITS)
    assert len(body) <= LIMITS.max_body_bytes


def test_empty_phrase_lists_are_no_constraints_and_take_any_search():
    """Found by the property above: `"constraints": []` beside a text asked to be sampled."""
    body = b'{"text": "", "constraints": [], "markup": false, "sample": true}'
    req = parse_translate(body, LIMITS, DEFAULT_BEAMS)
    assert req.constraints is None and req.settings.sample
    assert_within_limits(req, LIMITS)
