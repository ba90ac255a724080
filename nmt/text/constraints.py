"""Lexical constraints: phrases a translation must contain (`include`) or must not (`avoid`), as
target ids, and the bookkeeping of dynamic beam allocation (Post & Vilar 2018) that a beam
search runs with them.

A hypothesis carries its `Progress` through the constraints: which are met, and how far into
one it is. Each step its candidates are the beam's best tokens plus the next token of every
constraint it could advance, and the beam's K places are shared out among "banks" of
hypotheses that have met the same number of constraint tokens, so hypotheses that have placed
a constraint are not pushed out by ones that have not yet paid for it. EOS is allowed only once
every constraint is met. No torch here: the searches hand in plain lists.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from nmt.errors import NMTError
from nmt.jsonvalues import check_value, parse_json
from nmt.words import SPACE

KEYS = ("constraints", "avoid")  # a JSON line's keys: the phrases to include, and to avoid
# how to write a line of --constraints, and of --input-format jsonl: the fix of one that is not
# JSON or nests too deep (a refusal with a fix of its own, a huge integer say, keeps that)
FIX_CONSTRAINTS = 'write one JSON object per line: {"constraints": [...], "avoid": [...]}'
FIX_INPUT = 'write one JSON object per line: {"text": "...", "constraints": [...], "avoid": [...]}'


@dataclass
class Constraints:
    """One sentence's lexical constraints as text: phrases its translation must contain, and
    phrases it must not."""

    include: list[str] = field(default_factory=list)
    avoid: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, value: object, where: str) -> Constraints:
        """From a dict `{"constraints": [...], "avoid": [...]}` (either may be left out), or a
        `Constraints`; anything else (a phrase with a lone surrogate too: not text, and
        SentencePiece cannot encode it) is refused in one line naming `where`."""
        if isinstance(value, Constraints):
            return value
        if not isinstance(value, dict) or set(value) - set(KEYS):
            raise NMTError(
                f'{where}: expected an object with "constraints" and/or "avoid" (lists of phrases)'
            )
        lists = [value.get(key, []) for key in KEYS]
        for key, phrases in zip(KEYS, lists, strict=True):
            if not isinstance(phrases, list) or not all(isinstance(p, str) for p in phrases):
                raise NMTError(f"{where}: {key} must be a list of strings")
        check_value(value, where)
        return cls(*lists)

    @classmethod
    def from_json(cls, line: str, where: str) -> Constraints:
        """A line of a constraints file (`nmt translate --constraints`); an empty line is none."""
        return cls.parse(parse_json(line, where, hint=FIX_CONSTRAINTS), where) if line.strip() else cls()

    @classmethod
    def from_input(cls, line: str, form: str, where: str) -> tuple[str, Constraints]:
        """A line of an input that carries its own constraints (`nmt translate --input-format`):
        `jsonl`, `{"text": ..., "constraints": [...], "avoid": [...]}`; `tsv`, the text, then a
        tab before each phrase to include (fairseq's convention). An empty line is empty text."""
        if form == "tsv" or not line.strip():
            text, *phrases = line.split("\t")
            return text, cls(phrases)
        value = parse_json(line, where, hint=FIX_INPUT)
        if not isinstance(value, dict) or not isinstance(value.get("text"), str):
            raise NMTError(
                f'{where}: expected an object with "text" (a string), and "constraints" and/or "avoid"'
            )
        text = value.pop("text")
        return text, cls.parse(value, where)


@dataclass(frozen=True)
class Progress:
    """How far a hypothesis is through the constraints `include`: the constraints met, and the
    one under way with the number of its tokens written (a constraint abandoned half-way counts
    for nothing)."""

    met: tuple[bool, ...]
    under_way: tuple[int, int] | None = None  # (constraint, tokens of it written)

    @classmethod
    def start(cls, include: list[list[int]]) -> Progress:
        return cls(tuple(False for _ in include))

    def advance(self, token: int, include: list[list[int]]) -> Progress:
        """The progress after `token`."""
        if self.under_way is not None:
            c, written = self.under_way
            if include[c][written] == token:
                return self._written(c, written + 1, include)
        for c, phrase in enumerate(include):
            if not self.met[c] and phrase[0] == token:
                return self._written(c, 1, include)
        return Progress(self.met) if self.under_way is not None else self

    def _written(self, c: int, written: int, include: list[list[int]]) -> Progress:
        if written < len(include[c]):
            return Progress(self.met, (c, written))
        return Progress(tuple(m or i == c for i, m in enumerate(self.met)))

    def tokens_met(self, include: list[list[int]]) -> int:
        """The constraint tokens placed so far: a hypothesis's bank."""
        done = sum(len(phrase) for phrase, met in zip(include, self.met, strict=True) if met)
        return done + (self.under_way[1] if self.under_way else 0)

    @property
    def unmet(self) -> int:
        return self.met.count(False)

    def wanted(self, include: list[list[int]]) -> list[int]:
        """The tokens that would advance a constraint: the next of the one under way, or the first
        of each one not met."""
        if self.under_way is not None:
            c, written = self.under_way
            return [include[c][written]]
        return [phrase[0] for phrase, met in zip(include, self.met, strict=True) if not met]


def banned(history: list[int], avoid: list[list[int]]) -> list[int]:
    """The tokens that would complete a phrase to avoid after `history`."""
    return [
        phrase[-1] for phrase in avoid if len(phrase) == 1 or history[-(len(phrase) - 1) :] == phrase[:-1]
    ]


class Avoiding:
    """A sentence's phrases to avoid as text, for what piece bans cannot see. The search bans the
    phrases' own spellings (`banned`) and every piece holding a word to avoid; `after` also bans,
    inside the word being written, the pieces that would complete a word to avoid ("anti" + "x"
    then any piece starting with "ed", for "antixed"); `violations` counts the phrases a finished
    hypothesis's text still holds (one spelt across words, say), which then ranks below those
    that hold none."""

    def __init__(self, phrases: list[str], pieces: list[str], decode: Callable[[list[int]], str]):
        self.phrases, self.pieces, self.decode = phrases, pieces, decode  # pieces: each id's text
        self.words = [p for p in phrases if len(p.split()) == 1]
        self.inner = sorted((text, i) for i, text in enumerate(pieces) if text and not text.startswith(SPACE))

    def after(self, history: list[int]) -> list[int]:
        """The pieces that would complete a word to avoid inside the word being written."""
        start = next(
            (t for t in reversed(range(len(history))) if self.pieces[history[t]].startswith(SPACE)), 0
        )
        tail = "".join(self.pieces[i] for i in history[start:]).lstrip(SPACE)
        return [
            i
            for word in self.words
            for k in range(1, len(word))
            if tail.endswith(word[:k])
            for i in self.starting(word[k:])
        ]

    def starting(self, text: str) -> list[int]:
        """The pieces inside a word whose text starts with `text`."""
        at = bisect.bisect_left(self.inner, (text, -1))
        ids = []
        while at < len(self.inner) and self.inner[at][0].startswith(text):
            ids.append(self.inner[at][1])
            at += 1
        return ids

    def violations(self, tokens: list[int]) -> int:
        """How many phrases to avoid the text of `tokens` holds."""
        text = self.decode(tokens)
        return sum(phrase in text for phrase in self.phrases)


@dataclass(order=True)
class Candidate:
    """One extension of a beam: ordered by score (higher first once sorted in reverse)."""

    score: float
    beam: int = field(compare=False)
    token: int = field(compare=False)
    progress: Progress = field(compare=False)


def allocate(candidates: list[Candidate], K: int, include: list[list[int]]) -> list[Candidate]:
    """The K candidates that become the next beams: the banks (by constraint tokens met) take
    turns, the furthest first, each giving its best candidate not yet taken, so every bank keeps
    a place while it has candidates; best first by bank, then by score."""
    banks: dict[int, list[Candidate]] = {}
    for candidate in sorted(candidates, reverse=True):
        banks.setdefault(candidate.progress.tokens_met(include), []).append(candidate)
    order = sorted(banks, reverse=True)
    chosen: list[Candidate] = []
    while len(chosen) < K and any(banks[b] for b in order):
        for b in order:
            if banks[b] and len(chosen) < K:
                chosen.append(banks[b].pop(0))
    return sorted(chosen, key=lambda c: (-c.progress.tokens_met(include), -c.score))
