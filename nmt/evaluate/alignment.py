"""Word alignments from attention, in Pharaoh format, and their quality against gold links.

Pharaoh: one line per sentence of `i-j` links, i a source word and j a target word, both 0-based
word indices as `nmt.words` counts them (`</s>` is not a word here). Gold files may also hold
possible links `i?j`; sure links count as possible too (S is a subset of P).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.errors import NMTError
from nmt.pharaoh import Link, parse_inside
from nmt.registry import Registry
from nmt.words import text_words, word_matrix


class AlignmentMethod(Registry, ABC):
    """Turns a (target words x source words) attention matrix into links."""

    def __init__(self, threshold: float = 0.3):
        self.threshold = threshold

    @abstractmethod
    def links(self, matrix: np.ndarray) -> set[Link]: ...


class Argmax(AlignmentMethod, name="argmax"):
    """Each target word to its most attended source word: one link per target word, the usual
    reading of soft attention as an alignment; high recall on one-to-one tasks."""

    def links(self, matrix: np.ndarray) -> set[Link]:
        if matrix.size == 0:
            return set()
        return {(int(i), j) for j, i in enumerate(matrix.argmax(1))}


class Threshold(AlignmentMethod, name="threshold"):
    """Every (source, target) word pair whose weight reaches `threshold`: a target word may link
    to several source words (a date's day written in two places) or to none (attention spread
    thin), trading recall for precision as the threshold rises."""

    def links(self, matrix: np.ndarray) -> set[Link]:
        return {(int(i), int(j)) for j, i in zip(*np.nonzero(matrix >= self.threshold), strict=True)}


def method(name: str, threshold: float = 0.3) -> AlignmentMethod:
    if name not in AlignmentMethod.registry:
        raise NMTError(
            f"unknown alignment method {name!r}; choose one of {', '.join(AlignmentMethod.registry)}"
        )
    return AlignmentMethod.build(name, threshold)


def align(weights, src_pieces: list[str], tgt_pieces: list[str], how: AlignmentMethod) -> set[Link]:
    return how.links(word_matrix(weights, src_pieces, tgt_pieces))


def read_gold(gold: Path | None, lines: list[str], sources: list[str], targets: list[str] | None) -> list:
    """The (sure, possible) links of each line of the gold file `gold`, every link checked to
    fall inside its sentence (words of the source, and of the target when it is given)."""
    gold_links = []
    for n, line in enumerate(lines, 1):
        n_tgt = len(text_words(targets[n - 1])) if targets else None
        gold_links.append(parse_inside(line, f"{gold}:{n}", len(text_words(sources[n - 1])), n_tgt))
    return gold_links


@dataclass
class AlignmentScore:
    aer: float
    precision: float
    recall: float
    links: int  # |A|
    sure: int  # |S|

    def line(self) -> str:
        return (
            f"AER {self.aer:.4f}  precision {self.precision:.4f}  recall {self.recall:.4f}  "
            f"({self.links} links, {self.sure} sure gold links)"
        )


def alignment_error_rate(
    predicted: list[set[Link]], gold: list[tuple[set[Link], set[Link]]]
) -> AlignmentScore:
    """Och & Ney's AER over a corpus: 1 - (|A∩S| + |A∩P|) / (|A| + |S|), with precision
    |A∩P| / |A| and recall |A∩S| / |S| (each 1.0 when its denominator is 0)."""
    a = a_s = a_p = s = 0
    for links, (sure, possible) in zip(predicted, gold, strict=True):
        possible = possible | sure
        a, s = a + len(links), s + len(sure)
        a_s, a_p = a_s + len(links & sure), a_p + len(links & possible)
    aer = 1.0 - (a_s + a_p) / (a + s) if a + s else 0.0
    return AlignmentScore(aer, a_p / a if a else 1.0, a_s / s if s else 1.0, a, s)
