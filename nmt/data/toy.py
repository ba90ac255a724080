"""The built-in toy task: dates written in many human forms -> ISO `YYYY-MM-DD`.

It needs no download, trains in minutes on a CPU, and teaches attention something real: the
model must find the year, month and day wherever each form puts them (English or German month
names, day-first or month-first orders, numeric forms whose separator tells the order), so a
good model's attention heatmap shows a visible, non-monotonic alignment.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Callable
from pathlib import Path

from nmt.fileio import atomic_write_text
from nmt.words import text_words

SRC_LANG, TGT_LANG, ALIGN = "human", "iso", "align"
SPLITS = {"train": 20000, "valid": 500, "test": 500}

EN_MONTHS = "January February March April May June July August September October November December"
DE_MONTHS = "Januar Februar März April Mai Juni Juli August September Oktober November Dezember"
EN_DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday"
DE_DAYS = "Montag Dienstag Mittwoch Donnerstag Freitag Samstag Sonntag"
EN_MONTH, DE_MONTH = EN_MONTHS.split(), DE_MONTHS.split()
EN_DAY, DE_DAY = EN_DAYS.split(), DE_DAYS.split()


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# Each form is unambiguous: "/" is month-first (US), "." is day-first (German). A form is a
# template whose fields are parts of the date; `segments` turns it into (text, role) pieces, the
# role ("year", "month", "day" or "") being what gold alignments link the ISO output's words to.
Segments = list[tuple[str, str]]
FORMS = [
    "{Month} {day}, {year}",
    "{day} {Month} {year}",
    "{Mon} {day} {year}",
    "the {dayth} of {Month} {year}",
    "{Weekday}, {Month} {dayth}, {year}",
    "{month}/{day}/{year}",
    "{mm}/{dd}/{year}",
    "{day}. {Monat} {year}",
    "{Wochentag}, {day}. {Monat} {year}",
    "{dd}.{mm}.{year}",
    "{day}.{month}.{year}",
    "{year}/{mm}/{dd}",
]
FIELDS: dict[str, tuple[str, Callable[[dt.date], str]]] = {  # field -> (role, its text)
    "year": ("year", lambda d: str(d.year)),
    "month": ("month", lambda d: str(d.month)),
    "mm": ("month", lambda d: f"{d.month:02d}"),
    "Month": ("month", lambda d: EN_MONTH[d.month - 1]),
    "Mon": ("month", lambda d: EN_MONTH[d.month - 1][:3]),
    "Monat": ("month", lambda d: DE_MONTH[d.month - 1]),
    "day": ("day", lambda d: str(d.day)),
    "dd": ("day", lambda d: f"{d.day:02d}"),
    "dayth": ("day", lambda d: _ordinal(d.day)),
    "Weekday": ("", lambda d: EN_DAY[d.weekday()]),
    "Wochentag": ("", lambda d: DE_DAY[d.weekday()]),
}


def segments(form: str, date: dt.date) -> Segments:
    """`form` written for `date`: literal text and fields, each a segment of its own."""
    out: Segments = []
    for literal, field, _, _ in string.Formatter().parse(form):
        if literal:
            out.append((literal, ""))
        if field:
            role, text = FIELDS[field]
            out.append((text(date), role))
    return out


# The ISO output's words (nmt.words splits "1989-03-12" into 1989 - 03 - 12): the role each is
# surely linked to, and the roles a separator is possibly linked to (either neighbour).
ISO_SURE = {0: "year", 2: "month", 4: "day"}
ISO_POSSIBLE = {1: ("year", "month"), 3: ("month", "day")}


def gold_alignment(segments: Segments) -> str:
    """Pharaoh links from the source's words to the ISO date's words (see ISO_SURE)."""
    roles: dict[str, list[int]] = {"year": [], "month": [], "day": []}
    index = 0
    for text, role in segments:  # every segment boundary is a word boundary (nmt.words)
        n = len(text_words(text))
        if role:
            roles[role] += range(index, index + n)
        index += n
    links = [(i, j, "-") for j, role in ISO_SURE.items() for i in roles[role]]
    links += [(i, j, "?") for j, pair in ISO_POSSIBLE.items() for role in pair for i in roles[role]]
    return " ".join(f"{i}{sep}{j}" for i, j, sep in sorted(links))


def random_date(rng: random.Random) -> dt.date:
    start = dt.date(1950, 1, 1).toordinal()
    end = dt.date(2049, 12, 31).toordinal()
    return dt.date.fromordinal(rng.randint(start, end))


def make_pairs(n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """(human date, ISO date, gold alignment) triples."""
    triples = []
    for _ in range(n):
        date = random_date(rng)
        parts = segments(rng.choice(FORMS), date)
        triples.append(("".join(text for text, _ in parts), date.isoformat(), gold_alignment(parts)))
    return triples


def write_toy_corpus(out_dir: Path, seed: int = 1, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Write `{split}.human` / `{split}.iso` under `out_dir`, and the gold word alignments
    `{split}.align` (Pharaoh; see `gold_alignment`); the same seed gives the same files.

    Splits are drawn from one generator in a fixed order, and valid/test pairs whose source also
    occurs in train are redrawn, so the held-out splits measure generalisation, not recall.
    """
    rng = random.Random(seed)
    sizes = sizes or SPLITS
    seen: set[str] = set()
    written = {}
    for split, n in sizes.items():
        pairs: list[tuple[str, str, str]] = []
        while len(pairs) < n:
            for triple in make_pairs(n - len(pairs), rng):
                if split == "train" or triple[0] not in seen:
                    pairs.append(triple)
        seen.update(src for src, _, _ in pairs)
        for lang, side in ((SRC_LANG, 0), (TGT_LANG, 1), (ALIGN, 2)):
            text = "".join(pair[side] + "\n" for pair in pairs)
            atomic_write_text(Path(out_dir) / f"{split}.{lang}", text)
        written[split] = n
    return written
