"""The HTTP contract of `POST /translate`: a request body checked field by field, and
translations as JSON. Every problem is a `RequestError` with the status and one message that
names the field, so no input reaches the model unchecked."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from nmt.decode.translator import Translation
from nmt.serve.batcher import Settings


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; `GET /info` publishes these."""

    max_sentences: int = 64  # per request
    max_chars: int = 1000  # per sentence
    max_beam: int = 16
    max_nbest: int = 16
    max_len: int = 512  # the largest `max_len` a request may set
    timeout_s: float = 30.0  # a request waiting longer is answered 504

    @property
    def max_body_bytes(self) -> int:
        """A generous bound on a body within the limits (UTF-8, JSON escapes), read before parsing."""
        return self.max_sentences * (self.max_chars * 6 + 8) + 4096

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


FIELDS = ("text", "texts", "model", "beam", "nbest", "max_len", "attention")


def parse_translate(body: bytes, limits: Limits, default_beams: dict[str, int]) -> TranslateRequest:
    """The checked request; `default_beams` maps each model served to its configured beam, and
    the first model is the default."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(400, f"the request body is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise RequestError(400, 'the request body must be a JSON object, e.g. {"text": "..."}')
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise RequestError(422, f"unknown field {unknown[0]!r} (known: {', '.join(FIELDS)})")
    sentences = _sentences(data, limits)

    model = data.get("model", next(iter(default_beams)))
    if not isinstance(model, str):
        raise RequestError(422, "model: must be a string")
    if model not in default_beams:
        raise RequestError(422, f"model: no model named {model!r} (served: {', '.join(default_beams)})")
    beam = _integer(data, "beam", limits.max_beam, default_beams[model])
    nbest = _integer(data, "nbest", limits.max_nbest, 1)
    max_len = _integer(data, "max_len", limits.max_len, None)
    attention = data.get("attention", False)
    if not isinstance(attention, bool):
        raise RequestError(422, "attention: must be true or false")
    return TranslateRequest(sentences, Settings(model, beam, nbest, max_len), attention)


def _sentences(data: dict[str, Any], limits: Limits) -> list[str]:
    if ("text" in data) == ("texts" in data):
        raise RequestError(422, 'give exactly one of "text" (a string) or "texts" (a list of strings)')
    if "text" in data:
        if not isinstance(data["text"], str):
            raise RequestError(422, "text: must be a string")
        sentences, name = [data["text"]], "text"
    else:
        if not isinstance(data["texts"], list):
            raise RequestError(422, "texts: must be a list of strings")
        sentences, name = data["texts"], "texts"
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise RequestError(422, f"texts[{i}]: must be a string, got {type(s).__name__}")
    if len(sentences) > limits.max_sentences:
        raise RequestError(
            413, f"texts: {len(sentences)} sentences, at most {limits.max_sentences} per request"
        )
    for i, s in enumerate(sentences):
        if len(s) > limits.max_chars:
            where = name if name == "text" else f"texts[{i}]"
            raise RequestError(413, f"{where}: {len(s)} characters, at most {limits.max_chars} per sentence")
        if "\n" in s or "\r" in s:
            where = name if name == "text" else f"texts[{i}]"
            raise RequestError(422, f"{where}: one sentence per string (it contains a line break)")
    return sentences


def _integer(data: dict[str, Any], key: str, most: int, default: int | None) -> int | None:
    if key not in data:
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(422, f"{key}: must be an integer")
    if not 1 <= value <= most:
        raise RequestError(422, f"{key}: must be between 1 and {most}, got {value}")
    return value


def translation_json(t: Translation, nbest: int, attention: bool) -> dict[str, Any]:
    """One translation as JSON: the best text and score, the n-best list when asked for, and the
    word-level attention of the best hypothesis when asked for."""
    out: dict[str, Any] = {"text": t.text, "score": t.score, "truncated": t.truncated}
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
