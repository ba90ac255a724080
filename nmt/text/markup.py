"""Inline markup carried across a translation: tags out of the source before, back into the output
after, where the model's attention says their words went.

Tags are XML-like pairs (`<b>...</b>`, with attributes), self-closing tags (`<br/>`) and
placeholders (`{0}`, `{name}`). `Markup.parse` checks that pairs are balanced and nested, takes
them out (the model never sees them) and notes which source words each pair holds and which
word each standalone tag stands before. `Markup.carry` puts them into a translation's text: a
pair goes around the target words aligned to its words (by the attention merged over words,
`nmt.words.merged_words`; the rule is `_Placement.targets`), clipped inside its parent pair
and kept clear of its siblings, so a well-formed source gives a well-formed output whatever the
alignment says; a standalone tag goes before the target word of the source word it stood before
(or at the end).
The text between the tags is exactly the translation of the plain sentence.
Parsing and carrying take time in proportion to the tags and words (n log n at worst), and
neither recurses: a line of thousands of tags takes a second, tags may nest thousands deep.
"""

from __future__ import annotations

import bisect
import difflib
import re
from dataclasses import dataclass, field

import numpy as np

from nmt.errors import NMTError
from nmt.words import WORD, merged_words

# attribute values in quotes may hold ">" (not "<": each try to match stops at the next "<", so
# matching is linear in the line); a quote that closes no value is a character like any other
# (`<b class=don't>`), and the group is atomic, so a quoted value once read is never read again
TAG = re.compile(r"""<(/?)([A-Za-z_][\w.:-]*)(\s(?>"[^<"]*"|'[^<']*'|[^<>])*?)?(/?)>|\{\w*\}""")


@dataclass
class Element:
    """A tag of the source: a pair (`close` set) holding source words `first`..`last` (none when
    `first > last`), or a standalone tag standing before source word `first`."""

    open: str  # the tag as written: "<b>", '<a href="x">', "{0}", "<br/>"
    close: str | None  # "</b>" for a pair, None for a standalone tag
    first: int = 0
    last: int = -1
    space_before: bool = True  # a standalone tag: written apart from the word before it
    space_after: bool = True  # and from the word after it
    children: list[Element] = field(default_factory=list)

    @property
    def spans_words(self) -> bool:
        return self.close is not None and self.first <= self.last


@dataclass
class Markup:
    """One line's markup: its text without tags (`plain`), and the tags as a tree."""

    plain: str
    elements: list[Element]

    @classmethod
    def parse(cls, line: str, where: str) -> Markup:
        """The tags of `line` taken out; refused in one line naming `where` when a pair is not
        balanced or not nested."""
        if not TAG.search(line):
            return cls(line, [])
        root = Element("", None)
        stack: list[tuple[Element, int]] = [(root, 0)]  # the open pairs, with their tags' characters
        parts: list[str] = []  # the plain text, a piece at a time (joined once, not copied at each tag)
        length = 0
        opened: list[tuple[Element, int]] = []  # each element, the offset in the plain text of its words
        closed: list[tuple[Element, int]] = []  # each pair, the offset where its words end
        position = 0
        for match in TAG.finditer(line):
            length += _joined(parts, line[position : match.start()])
            position = match.end()
            closing, name, _, self_closing = match.groups()
            tag = match.group()
            parent = stack[-1][0]
            if name is None or self_closing:
                before, after = line[match.start() - 1 : match.start()], line[match.end() : match.end() + 1]
                element = Element(
                    tag,
                    None,
                    space_before=not before or before.isspace(),
                    space_after=not after or after.isspace(),
                )
                opened.append((element, length))
                parent.children.append(element)
            elif not closing:
                element = Element(tag, f"</{name}>")
                opened.append((element, length))
                parent.children.append(element)
                stack.append((element, match.start()))
            elif len(stack) == 1:
                raise NMTError(
                    f"{where}: unbalanced markup: {tag} at character {match.start() + 1} has no opening tag"
                )
            elif parent.close != tag.replace(" ", ""):
                raise NMTError(
                    f"{where}: unbalanced markup: {tag} at character {match.start() + 1} closes "
                    f"{parent.open}, opened at character {stack[-1][1] + 1}; close tags in the "
                    "reverse order of their opening"
                )
            else:
                closed.append((parent, length))
                stack.pop()
        if len(stack) > 1:
            element, at = stack[-1]
            raise NMTError(
                f"{where}: unbalanced markup: {element.open} at character {at + 1} is never closed"
            )
        _joined(parts, line[position:])
        plain = "".join(parts).rstrip()  # it never starts with a space
        word_starts = [m.start() for m in WORD.finditer(plain)]
        for element, offset in opened:  # its first word: the first starting at or after its offset
            element.first = bisect.bisect_left(word_starts, offset)
        for element, offset in closed:  # its last word: the last starting before its end
            element.last = bisect.bisect_left(word_starts, offset) - 1
        return cls(plain, root.children)

    def carry(self, text: str, attention, src_pieces: list[str], tgt_pieces: list[str]) -> str:
        """`text` (the translation of `plain` whose `attention` over pieces is given) with the
        tags put back around and before the target words aligned to theirs."""
        if not self.elements:
            return text
        words = list(WORD.finditer(text))
        source_words = len(WORD.findall(self.plain))
        matrix = _links(attention, src_pieces, tgt_pieces, self.plain, text) if words else None
        spans = _Placement(matrix, source_words, len(words)).place(self.elements)
        starts = [m.start() for m in words] + [len(text)]
        ends = [m.end() for m in words]
        return _render(self.elements, spans, text, starts, ends)


def _joined(parts: list[str], text: str) -> int:
    """`text` appended to the plain text's `parts`, the space a removed tag leaves between two
    spaces dropped; the number of characters appended."""
    if not parts or parts[-1][-1].isspace():
        text = text.lstrip()
    if text:
        parts.append(text)
    return len(text)


def _links(attention, src_pieces: list[str], tgt_pieces: list[str], source: str, target: str) -> np.ndarray:
    """(target words of `target`, source words of `source`) attention, the model's words (pieces
    merged, `nmt.words`) matched to the texts' words: they differ where a piece is unknown."""
    merged, src, tgt = merged_words(attention, src_pieces, tgt_pieces)
    rows = _matched([tgt.words[i] for i in tgt.text_indices], WORD.findall(target))
    cols = _matched([src.words[i] for i in src.text_indices], WORD.findall(source))
    between_texts = merged[np.ix_(tgt.text_indices, src.text_indices)]  # `</s>` left out
    padded = np.pad(between_texts, ((0, 1), (0, 1)))  # index -1: zeros
    return padded[np.ix_(rows, cols)]


def _matched(model_words: list[str], text_words: list[str]) -> list[int]:
    """For each word of the text, the index of the same word among the model's (-1: none)."""
    if model_words == text_words[: len(model_words)]:  # all the text, or the part a long one was cut to
        return list(range(len(model_words))) + [-1] * (len(text_words) - len(model_words))
    index = [-1] * len(text_words)
    for block in difflib.SequenceMatcher(None, model_words, text_words, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            index[block.b + k] = block.a + k
    return index


class _Placement:
    """Target word spans for the elements, from a (target words, source words) matrix."""

    def __init__(self, matrix: np.ndarray | None, source_words: int, target_words: int):
        self.source_words, self.target_words = source_words, target_words
        self.empty = matrix is None or not matrix.size
        if self.empty:
            return
        self.totals = np.maximum(matrix.sum(1), 1e-12)
        # [i]: each target word's attention to the source words before i, so that a pair's share
        # is two rows' difference, not a sum over its words (nested pairs share words)
        self.before = np.pad(matrix.T.cumsum(0), ((1, 0), (0, 0)))
        best, attended = matrix.argmax(0), matrix.any(0)
        self.lowest = _Extremes(np.where(attended, best, target_words), np.minimum)
        self.highest = _Extremes(np.where(attended, best, -1), np.maximum)

    def targets(self, first: int, last: int) -> tuple[int, int] | None:
        """The first and last target words aligned to source words first..last: of those giving
        them the greater part of their attention, or else of each one's most attending target
        word; None when there are none. (Measured on test_2016 against eflomal's links: pairs
        placed exactly 63% of the time, against 57% taking the target words that attend most to
        one of them; docs/steering.md.)"""
        if self.empty:
            return None
        share = (self.before[last + 1] - self.before[first]) / self.totals
        found = np.flatnonzero(share >= 0.5)
        if found.size:
            return int(found[0]), int(found[-1])
        highest = self.highest(first, last)
        return (self.lowest(first, last), highest) if highest >= 0 else None

    def point(self, element: Element) -> int:
        """The target position (a word index; the number of words: the end) of a standalone tag."""
        after_a_word = element.first > 0 and (element.first >= self.source_words or not element.space_before)
        if after_a_word:  # "word{0} ...", or at the end: after the target of the word before
            found = self.targets(element.first - 1, element.first - 1)
            return found[1] + 1 if found else self.target_words
        found = self.targets(element.first, element.first)  # before the target of the word after
        return found[0] if found else self.target_words

    def place(self, elements: list[Element]) -> dict[int, tuple[int, int]]:
        """id(element) -> (first, last) target words of each pair with words, or (p, p - 1) for
        a tag standing before target word p, descendants included: each element's children
        placed inside its span (a stack of sibling lists, not recursion: tags nest deep)."""
        spans: dict[int, tuple[int, int]] = {}
        todo = [(elements, 0, self.target_words)]
        while todo:
            siblings, lo, hi = todo.pop()
            self._place_siblings(siblings, lo, hi, spans)
            for e in siblings:
                first, last = spans[id(e)]
                if e.children:
                    todo.append((e.children, first, max(first, last + 1)))
        return spans

    def _place_siblings(
        self, elements: list[Element], lo: int, hi: int, spans: dict[int, tuple[int, int]]
    ) -> None:
        """The spans of sibling `elements` inside [lo, hi): pairs clipped into it and kept clear
        of each other, earliest first; a standalone tag inside a sibling pair goes before it."""
        pairs, points = [], []
        for e in elements:
            found = self.targets(e.first, e.last) if e.spans_words else None
            first, last = (max(lo, found[0]), min(hi - 1, found[1])) if found else (lo, lo - 1)
            if first <= last:
                pairs.append((first, last, e))
            else:
                points.append((e, min(max(lo, self.point(e) if not e.spans_words else first), hi)))
        end, starts, lasts = lo, [], []  # the pairs' spans, apart and in order
        for first, last, e in sorted(pairs, key=lambda x: (x[0], x[0] - x[1])):
            first = max(first, end)
            if first <= last:
                spans[id(e)] = (first, last)
                starts.append(first)
                lasts.append(last)
            else:
                spans[id(e)] = (end, end - 1)
            end = max(end, last + 1)
        for e, p in points:
            k = bisect.bisect_left(starts, p) - 1  # the last pair starting before p
            spans[id(e)] = (starts[k], starts[k] - 1) if k >= 0 and p <= lasts[k] else (p, p - 1)


class _Extremes:
    """The least (or greatest, by `pick`) of values[first..last], for any range, in two looks:
    a table of the extreme of every run of 2**k values, built once (n log n)."""

    def __init__(self, values: np.ndarray, pick: np.ufunc):
        self.pick, self.levels = pick, [values]
        while 2 ** len(self.levels) <= len(values):
            half = 2 ** (len(self.levels) - 1)
            self.levels.append(pick(self.levels[-1][:-half], self.levels[-1][half:]))

    def __call__(self, first: int, last: int) -> int:
        k = (last - first + 1).bit_length() - 1
        return int(self.pick(self.levels[k][first], self.levels[k][last + 1 - 2**k]))


def _render(
    elements: list[Element], spans: dict[int, tuple[int, int]], text: str, starts: list[int], ends: list[int]
) -> str:
    """`text` with `elements` (placed by `spans`) written in; a stack of what is left to write
    (strings, and elements to write between two offsets), not recursion: tags nest deep."""
    out: list[str] = []
    todo: list[str | tuple[list[Element], int, int]] = [(elements, 0, len(text))]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            out.append(item)
        else:
            todo += reversed(_written(*item, spans, text, starts, ends))
    return "".join(out)


def _written(
    elements: list[Element],
    lo: int,
    hi: int,
    spans: dict[int, tuple[int, int]],
    text: str,
    starts: list[int],
    ends: list[int],
) -> list[str | tuple[list[Element], int, int]]:
    """text[lo:hi] with `elements` written in, each element's children left to write between
    two offsets: pairs around their words, standalone tags (and pairs without words) before the
    word they stand before."""

    def at(e: Element) -> tuple[int, int]:
        """Where an element is written, and 0 for a pair, -1 for a tag without words (first)."""
        first, last = spans[id(e)]
        if last >= first:
            return starts[first], 0
        if e.close is None and not e.space_before and first and ends[first - 1] >= lo:
            return ends[first - 1], -1  # "word<br/> ...": right after the target word
        return min(starts[first], hi), -1

    out: list[str | tuple[list[Element], int, int]] = []
    cursor = lo
    for e in sorted(elements, key=at):
        first, last = spans[id(e)]
        if last >= first:
            begin, end = starts[first], ends[last]
            inside = (e.children, begin, end) if e.children else text[begin:end]
            out += [text[cursor:begin], e.open, inside, e.close or ""]
            cursor = end
            continue
        where = at(e)[0]
        out.append(text[cursor:where])
        cursor = where
        before = after = ""
        spaced_before = where == 0 or text[where - 1].isspace()
        spaced_after = where == len(text) or text[where].isspace()
        if e.close is None and e.space_after and spaced_before and not spaced_after and where < hi:
            after = " "  # before a word that stands apart: apart from it
        elif e.close is None and e.space_before and spaced_after and not spaced_before:
            before = " "  # after a word that stands apart: apart from it
        out += [before + e.open, (e.children, where, where) if e.children else "", (e.close or "") + after]
    out.append(text[cursor:hi])
    return out
