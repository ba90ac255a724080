"""What a comparison is scored on: the config's split, the same split with k consecutive lines
joined into one (a length stress test made of real text), and extra parallel files (an
out-of-domain test), grouped for BLEU by source length.

Joining is how length can be tested on a corpus of short sentences: the joined lines are text of
the kind every model saw one sentence at a time, only longer, so a model that loses its way on long
inputs (or stops after the first sentence) shows it there.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nmt.config import Config
from nmt.data.joining import joined
from nmt.errors import NMTError

STRESS = "stress"  # the length group of the split and its joined lines


@dataclass(frozen=True)
class EvalSet:
    name: str  # also a file name of the translations: letters, digits, '.', '_' and '-'
    kind: Literal["split", "joined", "extra"]
    origin: str  # where the lines come from, for the report
    sources: list[str]
    refs: list[str]

    @property
    def digest(self) -> str:
        """Identifies the lines, so cached translations of other lines are never reused."""
        return hashlib.sha1("\n".join(self.sources).encode()).hexdigest()[:16]


def parse_join(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        ks = tuple(int(k) for k in text.split(","))
    except ValueError:
        ks = ()
    if not ks or any(k < 2 for k in ks) or len(set(ks)) != len(ks):
        raise NMTError(f"--join {text!r}: expected distinct line counts of 2 or more, such as 2,3,4")
    return ks


def parse_extra(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`NAME=PREFIX` -> (NAME, PREFIX): the files PREFIX.<src_lang> and PREFIX.<tgt_lang>."""
    extra = []
    for item in items:
        name, sep, prefix = (part.strip() for part in item.partition("="))
        if not sep or not re.fullmatch(r"[A-Za-z0-9._-]+", name) or not prefix:
            raise NMTError(
                f"--extra {item!r}: expected NAME=PREFIX such as iwslt=data/iwslt14/valid "
                "(for valid.de and valid.en), NAME of letters, digits, '.', '_' and '-'"
            )
        extra.append((name, prefix))
    return tuple(extra)


def extra_paths(cfg: Config, name: str, prefix: str) -> tuple[Path, Path]:
    """The source and reference files of an extra set, checked before any run trains."""
    src, ref = Path(f"{prefix}.{cfg.data.src_lang}"), Path(f"{prefix}.{cfg.data.tgt_lang}")
    for path in (src, ref):
        if not path.is_file():
            raise NMTError(
                f"--extra {name}={prefix}: {path} not found; PREFIX is the path before "
                f".{cfg.data.src_lang} and .{cfg.data.tgt_lang}"
            )
    return src, ref


def evaluation_sets(
    cfg: Config, split: str, join: tuple[int, ...], extra: tuple[tuple[str, str], ...]
) -> list[EvalSet]:
    """The split, its joined versions (`joined-K`) and the extra file pairs, in that order; read
    and checked before any run trains."""
    from nmt.data.sources import load_split, read_parallel

    pairs = load_split(cfg.data, split)
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    if not sources:
        raise NMTError(f"the {split} split is empty: nothing to score")
    too_long = [k for k in join if k > len(sources)]
    if too_long:
        raise NMTError(f"--join {too_long[0]}: the {split} split has only {len(sources)} lines")
    sets = [EvalSet(split, "split", f"the config's {split} split", sources, refs)]
    sets += [
        EvalSet(
            f"joined-{k}",
            "joined",
            f"{k} consecutive {split} lines joined",
            joined(sources, k),
            joined(refs, k),
        )
        for k in join
    ]
    for name, prefix in extra:
        pairs = read_parallel(*extra_paths(cfg, name, prefix))
        if not pairs:
            raise NMTError(f"--extra {name}={prefix}: the files are empty")
        sets.append(EvalSet(name, "extra", prefix, [s for s, _ in pairs], [t for _, t in pairs]))
    names = [s.name for s in sets]
    if len(set(names)) != len(names) or STRESS in names:
        raise NMTError(f"--extra: the names {', '.join(names)} must differ, and none may be {STRESS!r}")
    return sets


def check_line(split: EvalSet, line: int | None) -> None:
    """--heatmap's line must be one of the split's."""
    if line is not None and not 1 <= line <= len(split.sources):
        raise NMTError(f"--heatmap {line}: the {split.name} split has lines 1 to {len(split.sources)}")


def length_groups(sets: list[EvalSet]) -> dict[str, list[EvalSet]]:
    """Which sets are bucketed together by source length: the split alone (its real buckets),
    the split with its joined lines (the stress test), and each extra set alone."""
    split, joins = sets[0], [s for s in sets if s.kind == "joined"]
    groups = {split.name: [split]}
    if joins:
        groups[STRESS] = [split, *joins]
    groups |= {s.name: [s] for s in sets if s.kind == "extra"}
    return groups
