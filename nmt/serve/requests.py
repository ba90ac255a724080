"""The HTTP contract of `POST /translate`: a request body checked field by field, and
translations as JSON. Every problem is a `RequestError` with a 4xx status and one message that
names the field, so no input reaches the model unchecked: the body must be UTF-8 JSON, nested
no deeper than a request can be, without NaN, huge integers or duplicated fields, and each
sentence one line of Unicode text (no lone surrogates, no control characters but tab)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from nmt.config import SAMPLING, TEMPERATURES  # the fields of "sample": true alone; temperature's range
from nmt.decode.translator import Translation
from nmt.errors import NMTError
from nmt.jsonvalues import MAX_DIGITS, JSONError, parse_json
from nmt.serve.batcher import Settings
from nmt.text.constraints import KEYS, Constraints
from nmt.text.markup import Markup


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; `GET /info` publishes these."""

    max_sentences: int = 64  # per request
    max_chars: int = 1000  # per sentence
    max_beam: int = 16
    max_nbest: int = 16
    max_top_k: int = 1000  # a sampling request's top_k (0: every token)
    max_len: int = 512  # the largest `max_len` a request may set
    timeout_s: float = 30.0  # a body arriving longer is answered 408, an answer waiting longer 504

    @property
    def max_body_bytes(self) -> int:
        """A generous bound on a body within the limits, read before parsing: 12 bytes a
        character is an emoji as json.dumps writes it (a surrogate pair of escapes)."""
        return self.max_sentences * (self.max_chars * 12 + 8) + 4096

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RequestError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TranslateRequest:
    sentences: list[str]
    settings: Settings
    attention: bool
    prefixes: list[str] | None = None  # a target prefix per sentence ("" for none)
    constraints: list[Constraints] | None = None  # phrases to include and avoid, per sentence
    markups: list[Markup] | None = None  # each sentence's inline tags, taken out of `sentences`


FIELDS = (
    "text",
    "texts",
    "prefix",
    "prefixes",
    "constraints",
    "avoid",
    "markup",
    "model",
    "beam",
    "nbest",
    "max_len",
    "attention",
    "sample",
    *SAMPLING,
)
MAX_SEED = 2**63 - 1
MAX_DEPTH = 8  # arrays and objects inside one another; a request needs 2 ({"texts": [...]})
# What a sentence may not hold: control characters other than tab (line breaks have their own
# message); lone surrogates never get this far (`_json_object` refuses them anywhere).
NOT_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def parse_translate(body: bytes, limits: Limits, default_beams: dict[str, int]) -> TranslateRequest:
    """The checked request; `default_beams` maps each model served to its configured beam, and
    the first model is the default."""
    data = _json_object(body)
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise RequestError(422, f"unknown field {unknown[0]!r} (known: {', '.join(FIELDS)})")
    sentences = _sentences(data, limits)
    prefixes = _prefixes(data, limits, len(sentences))
    constraints = _constraints(data, limits, len(sentences))
    markups = _markups(data, sentences)

    model = data.get("model", next(iter(default_beams)))
    if not isinstance(model, str):
        raise RequestError(422, "model: must be a string")
    if model not in default_beams:
        raise RequestError(422, f"model: no model named {model!r} (served: {', '.join(default_beams)})")
    beam = _integer(data, "beam", limits.max_beam, default_beams[model])
    nbest = _integer(data, "nbest", limits.max_nbest, 1)
    max_len = _integer(data, "max_len", limits.max_len, None)
    attention, sample = _boolean(data, "attention", False), _boolean(data, "sample", None)
    if not sample and (given := [key for key in SAMPLING if key in data]):
        raise RequestError(422, f'{given[0]}: applies only when sampling; add "sample": true')
    sampling = {
        "temperature": _number(data, "temperature", TEMPERATURES[1], TEMPERATURES[0]),  # as the CLI's
        "top_k": _integer(data, "top_k", limits.max_top_k, None, least=0),
        "top_p": _number(data, "top_p", 1.0),
        "seed": _integer(data, "seed", MAX_SEED, None, least=0),
    }
    steered = [i for i, c in enumerate(constraints or []) if c.include or c.avoid]
    if steered and (sample or max(beam, nbest) < 2):  # a sentence without phrases takes any search
        where = "text" if "text" in data else f"texts[{steered[0]}]"
        raise RequestError(422, f"{where}: lexical constraints need beam search; ask for a beam of 2 or more")
    plain = not (attention or markups or steered)
    settings = Settings(model, beam, nbest, max_len, sample, **sampling, plain=plain)
    if markups:
        sentences = [m.plain for m in markups]
    return TranslateRequest(sentences, settings, attention, prefixes, constraints, markups)


def _json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, read by `nmt.jsonvalues`: not JSON, nested too deep or not an
    object is a 400; JSON holding a value no request has (a huge integer, a repeated field, a
    lone surrogate) a 422."""
    try:
        return parse_json(body, "the request body", dict, depth=MAX_DEPTH, digits=MAX_DIGITS)
    except JSONError as e:
        raise RequestError(400 if e.malformed else 422, str(e)) from None


def _sentences(data: dict[str, Any], limits: Limits) -> list[str]:
    """The sentences of `text` or `texts`, each checked (`_check_sentence`)."""
    if ("text" in data) == ("texts" in data):
        raise RequestError(422, 'give exactly one of "text" (a string) or "texts" (a list of strings)')
    if "text" in data:
        if not isinstance(data["text"], str):
            raise RequestError(422, "text: must be a string")
        _check_sentence("text", data["text"], limits)
        return [data["text"]]
    sentences = data["texts"]
    if not isinstance(sentences, list):
        raise RequestError(422, "texts: must be a list of strings")
    if len(sentences) > limits.max_sentences:
        raise RequestError(
            413, f"texts: {len(sentences)} sentences, at most {limits.max_sentences} per request"
        )
    return _strings("texts", sentences, limits)


def _prefixes(data: dict[str, Any], limits: Limits, sentences: int) -> list[str] | None:
    """The target prefixes: `prefix` (a string) beside `text`, or `prefixes` (a list of strings,
    one per sentence) beside `texts`, each checked like a sentence; None when there are none."""
    if "prefix" in data and "prefixes" in data:
        raise RequestError(
            422, 'give one of "prefix" (beside "text") or "prefixes" (beside "texts"), not both'
        )
    if "prefix" in data:
        if "text" not in data:
            raise RequestError(422, 'prefix: goes with "text"; beside "texts" give "prefixes", one per text')
        if not isinstance(data["prefix"], str):
            raise RequestError(422, "prefix: must be a string")
        _check_sentence("prefix", data["prefix"], limits)
        return [data["prefix"]]
    if "prefixes" not in data:
        return None
    prefixes = data["prefixes"]
    if "texts" not in data:
        raise RequestError(422, 'prefixes: go with "texts"; beside "text" give "prefix"')
    if not isinstance(prefixes, list) or len(prefixes) != sentences:
        raise RequestError(
            422, f"prefixes: must be a list of {sentences} strings, one per text ('' for none)"
        )
    return _strings("prefixes", prefixes, limits)


def _constraints(data: dict[str, Any], limits: Limits, sentences: int) -> list[Constraints] | None:
    """The lexical constraints: beside `text`, `constraints` and `avoid` are lists of phrases;
    beside `texts`, lists of such lists, one per text. None when there are none."""
    given = [key for key in KEYS if key in data]
    if not given:
        return None
    lists = {}
    for key in given:
        value = data[key]
        per_text = [value] if "text" in data else value  # beside "text", one list; its check follows
        if not isinstance(per_text, list) or len(per_text) != sentences:
            raise RequestError(422, f"{key}: must be a list of {sentences} lists of phrases, one per text")
        for i, phrases in enumerate(per_text):
            where = key if "text" in data else f"{key}[{i}]"
            if not isinstance(phrases, list) or not all(isinstance(p, str) for p in phrases):
                raise RequestError(422, f"{where}: must be a list of strings")
            _strings(where, phrases, limits)
        lists[key] = per_text
    empty = [[]] * sentences
    guides = [
        Constraints(*pair)
        for pair in zip(lists.get("constraints", empty), lists.get("avoid", empty), strict=True)
    ]
    return guides if any(g.include or g.avoid for g in guides) else None  # empty lists steer nothing


def _markups(data: dict[str, Any], sentences: list[str]) -> list[Markup] | None:
    """With `"markup": true`, each sentence's inline tags (`nmt.text.markup`), checked to be
    balanced; None without."""
    if not _boolean(data, "markup", False):
        return None
    try:
        return [Markup.parse(s, "text" if "text" in data else f"texts[{i}]") for i, s in enumerate(sentences)]
    except NMTError as e:
        raise RequestError(422, str(e)) from None


def _strings(where: str, items: list, limits: Limits) -> list[str]:
    """`items`, each a string checked like a sentence (`_check_sentence`), named `where[i]`."""
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise RequestError(422, f"{where}[{i}]: must be a string, got {type(s).__name__}")
        _check_sentence(f"{where}[{i}]", s, limits)
    return items


def _check_sentence(where: str, s: str, limits: Limits) -> None:
    """One sentence: at most `max_chars` characters of one line of Unicode text."""
    if len(s) > limits.max_chars:
        raise RequestError(413, f"{where}: {len(s)} characters, at most {limits.max_chars} per sentence")
    if "\n" in s or "\r" in s:
        raise RequestError(422, f"{where}: one sentence per string (it contains a line break)")
    if found := NOT_CONTROL.search(s):
        at = f"(U+{ord(found.group()):04X}) at character {found.start()}"
        raise RequestError(422, f"{where}: the control character {at}, not text")


def _integer(data: dict[str, Any], key: str, most: int, default: int | None, least: int = 1) -> int | None:
    if key not in data:
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(422, f"{key}: must be an integer")
    if not least <= value <= most:
        raise RequestError(422, f"{key}: must be between {least} and {most}, got {value}")
    return value


def _number(data: dict[str, Any], key: str, most: float, least: float | None = None) -> float | None:
    """A number in [least, most], or in (0, most] without `least`; None when the field is absent
    (the model's own setting)."""
    if key not in data:
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(422, f"{key}: must be a number")
    low, above = (value > 0, "above 0") if least is None else (value >= least, f"at least {least:g}")
    if not (low and value <= most):  # NaN never reaches here: the parser refuses it
        raise RequestError(422, f"{key}: must be {above} and at most {most:g}, got {value}")
    return float(value)


def _boolean(data: dict[str, Any], key: str, default: bool | None) -> bool | None:
    if key not in data:
        return default
    value = data[key]
    if not isinstance(value, bool):
        raise RequestError(422, f"{key}: must be true or false")
    return value


def translation_json(t: Translation, nbest: int, attention: bool) -> dict[str, Any]:
    """One translation as JSON: the best text and score, the n-best list when asked for, and the
    word-level attention of the best hypothesis when asked for."""
    out: dict[str, Any] = {"text": t.text, "score": t.score, "truncated": t.truncated}
    if t.hypotheses and t.hypotheses[0].unmet:
        out["unmet_constraints"] = t.hypotheses[0].unmet  # not all fit under the length cap
    if nbest > 1:
        out["nbest"] = [{"text": text, "score": score} for text, score in zip(t.texts, t.scores, strict=True)]
    if attention:
        words = t.attention
        out["attention"] = {
            "source": words.source,
            "target": words.target,
            "weights": [[round(w, 4) for w in row] for row in words.weights],
        }
    return out
