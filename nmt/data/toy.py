"""The built-in toy task: dates written in many human forms -> ISO `YYYY-MM-DD`.

It needs no download, trains in minutes on a CPU, and teaches attention something real: the
model must find the year, month and day wherever each form puts them (English or German month
names, day-first or month-first orders, numeric forms whose separator tells the order), so a
good model's attention heatmap shows a visible, non-monotonic alignment.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from pathlib import Path

from nmt.fileio import atomic_write_text

SRC_LANG, TGT_LANG = "human", "iso"
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


# Each form is unambiguous: "/" is month-first (US), "." is day-first (German).
FORMS: list[Callable[[dt.date], str]] = [
    lambda d: f"{EN_MONTH[d.month - 1]} {d.day}, {d.year}",
    lambda d: f"{d.day} {EN_MONTH[d.month - 1]} {d.year}",
    lambda d: f"{EN_MONTH[d.month - 1][:3]} {d.day} {d.year}",
    lambda d: f"the {_ordinal(d.day)} of {EN_MONTH[d.month - 1]} {d.year}",
    lambda d: f"{EN_DAY[d.weekday()]}, {EN_MONTH[d.month - 1]} {_ordinal(d.day)}, {d.year}",
    lambda d: f"{d.month}/{d.day}/{d.year}",
    lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}",
    lambda d: f"{d.day}. {DE_MONTH[d.month - 1]} {d.year}",
    lambda d: f"{DE_DAY[d.weekday()]}, {d.day}. {DE_MONTH[d.month - 1]} {d.year}",
    lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",
    lambda d: f"{d.day}.{d.month}.{d.year}",
    lambda d: f"{d.year}/{d.month:02d}/{d.day:02d}",
]


def random_date(rng: random.Random) -> dt.date:
    start = dt.date(1950, 1, 1).toordinal()
    end = dt.date(2049, 12, 31).toordinal()
    return dt.date.fromordinal(rng.randint(start, end))


def make_pairs(n: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs = []
    for _ in range(n):
        date = random_date(rng)
        pairs.append((rng.choice(FORMS)(date), date.isoformat()))
    return pairs


def write_toy_corpus(out_dir: Path, seed: int = 1, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Write `{split}.human` / `{split}.iso` under `out_dir`; the same seed gives the same files.

    Splits are drawn from one generator in a fixed order, and valid/test pairs whose source also
    occurs in train are redrawn, so the held-out splits measure generalisation, not recall.
    """
    rng = random.Random(seed)
    sizes = sizes or SPLITS
    seen: set[str] = set()
    written = {}
    for split, n in sizes.items():
        pairs: list[tuple[str, str]] = []
        while len(pairs) < n:
            for src, tgt in make_pairs(n - len(pairs), rng):
                if split == "train" or src not in seen:
                    pairs.append((src, tgt))
        seen.update(src for src, _ in pairs)
        for lang, side in ((SRC_LANG, 0), (TGT_LANG, 1)):
            text = "".join(pair[side] + "\n" for pair in pairs)
            atomic_write_text(Path(out_dir) / f"{split}.{lang}", text)
        written[split] = n
    return written
