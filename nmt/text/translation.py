"""Text in, text out, whatever decodes: tokenise, sort by length, decode, restore the input
order. An engine (`nmt.decode.translator.Translator` with torch, `nmt.runtime` with onnxruntime)
supplies `_decode_stream` or `_decode`, so both treat lines, limits and batches the same way.

Input is read in windows of `SORT_WINDOW` lines, each sorted by length, and results leave in
input order through a reorder buffer as soon as their turn comes, so memory stays flat in the
size of the input.

No torch here, so the torch-free runtime can build on it.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.config import DecodeConfig, decode_settings
from nmt.data.cleaning import normalize
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.text.constraints import Avoiding, Constraints
from nmt.text.markup import Markup
from nmt.text.ranking import Hypothesis, Source, is_greedy
from nmt.text.shortlist import Shortlist
from nmt.vocab import BOS, EOS, PAD, UNK
from nmt.words import SPACE, merge_attention

# Lines sorted by length together: plenty for full batches, and a small reorder buffer (2,000
# lines held 2 MiB more of Python objects for no gain in speed; docs/notes/performance-history.md, 10.4).
SORT_WINDOW = 1_000


@dataclass
class WordAttention:
    """Attention of the best hypothesis between words (pieces merged, `nmt.words`): one row per
    target word, one column per source word; "</s>" is a word of its own on both sides."""

    source: list[str]
    target: list[str]
    weights: list[list[float]]


@dataclass
class Translation:
    src_pieces: list[str]  # with the final "</s>"
    tgt_pieces: list[str]  # with the final "</s>" when the hypothesis ended in EOS
    hypotheses: list[Hypothesis]  # n-best, best first; empty for an empty input line
    texts: list[str]  # the detokenised text of each hypothesis
    truncated: bool = False  # the source was longer than the model's limit and was cut to it

    @property
    def text(self) -> str:
        """The best translation."""
        return self.texts[0]

    @property
    def score(self) -> float:
        """The best hypothesis's ranking score (length-normalised log-probability); 0 for an
        empty input line."""
        return self.hypotheses[0].score if self.hypotheses else 0.0

    @property
    def scores(self) -> list[float]:
        """The score of each n-best hypothesis, best first, beside `texts`."""
        return [h.score for h in self.hypotheses] or [0.0]

    @property
    def tokens(self) -> list[str]:
        """The best hypothesis as the model wrote it: SentencePiece pieces, "</s>" included."""
        return self.tgt_pieces

    @property
    def attention(self) -> WordAttention:
        """Word-level attention of the best hypothesis (empty for an empty input line)."""
        if not self.hypotheses:
            return WordAttention([], [], [])
        if self.hypotheses[0].attention is None:
            raise NMTError("this translation kept no attention: translate with attention=True")
        weights, source, target = merge_attention(
            self.hypotheses[0].attention, self.src_pieces, self.tgt_pieces
        )
        return WordAttention(source, target, weights.tolist())


class TextTranslator:
    """Decodes under the settings of `cfg`; subclasses decode one batch of id lists (`_decode`).

    Sources longer than `src_limit` subwords (the training length limit) are cut to it, and their
    `Translation.truncated` says so, so the caller can warn.
    """

    def __init__(
        self, tok: TokenizerPair, cfg: DecodeConfig, src_limit: int = 10**9, normalize_form: str = "none"
    ):
        self.tok, self.cfg = tok, cfg
        self.src_limit, self.normalize_form = src_limit, normalize_form
        self.shortlist: Shortlist | None = None  # the target pieces each sentence may write

    def configured(self, **settings) -> TextTranslator:
        """The same model with other decode settings (`beam=5`, `alpha=0.6`, ...), checked."""
        other = copy.copy(self)
        other.cfg = decode_settings(self.cfg, settings, "Translator.configured")
        return other

    def shortlisted(self, path: Path) -> TextTranslator:
        """The same model decoding with the lexical shortlist in `path` (`nmt.text.shortlist`),
        refused in one line when it was built for another vocabulary."""
        other = copy.copy(self)
        other.shortlist = Shortlist.load(path, self.tok)
        return other

    def keeps_beam(self, nbest: int) -> bool:
        """Whether a search for `nbest` hypotheses keeps a beam (neither greedy nor sampling), as
        lexical constraints need."""
        return not (is_greedy(self.cfg, nbest) or self.cfg.sample)

    def max_len(self, src_len: int) -> int:
        """The output cap (EOS included) for a source of `src_len` ids."""
        cfg = self.cfg
        return max(1, min(cfg.max_len, int(cfg.max_len_ratio * src_len) + cfg.max_len_add))

    def fits(self, sentences: int, longest: int) -> bool:
        """Whether `sentences` sources, the longest `longest` ids, may be decoded in one batch."""
        if self.cfg.batch_type == "sentences":
            return sentences <= self.cfg.batch_size
        return sentences * longest <= self.cfg.batch_size

    def translate(
        self,
        sentences: str | list[str],
        nbest: int = 1,
        attention: bool = True,
        prefixes: str | list[str] | None = None,
        constraints: Constraints | dict | list[Constraints | dict] | None = None,
        markup: bool = False,
        **settings: object,
    ) -> list[Translation]:
        """Translations of `sentences` in their order (a single string is one sentence), each
        with `nbest` hypotheses; `settings` (`beam=5`, `max_len=50`, ...) apply to this call.
        `attention=False` skips keeping the attention weights (faster on long inputs).
        `prefixes`: a target prefix for each sentence ("" for none) that its translation starts
        with, the search going on from there. `constraints`: for each sentence, phrases its
        translation must contain and must not (`{"constraints": [...], "avoid": [...]}` or a
        `Constraints`; beam search). `markup`: the sentences hold inline tags (`<b>...</b>`,
        `<br/>`, `{0}`), taken out before translating and put back into every text after
        (`nmt.text.markup`)."""
        translator = self.configured(**settings) if settings else self
        lines = [sentences] if isinstance(sentences, str) else list(sentences)
        starts = [prefixes] if isinstance(prefixes, str) else prefixes
        guides = [constraints] if isinstance(constraints, (dict, Constraints)) else constraints
        for name, given in (("prefixes", starts), ("constraints", guides)):
            if given is not None and len(given) != len(lines):
                raise NMTError(f"{name}: {len(given)} for {len(lines)} sentences; give one for each")
        return list(
            translator.iter_translate(
                lines, nbest, attention=attention, prefixes=starts, constraints=guides, markup=markup
            )
        )

    def iter_translate(
        self,
        lines: Iterable[str],
        nbest: int = 1,
        progress: Callable[[int], None] | None = None,
        attention: bool = True,
        prefixes: Iterable[str] | None = None,
        constraints: Iterable[Constraints | dict] | None = None,
        markup: bool = False,
    ) -> Iterator[Translation]:
        """Translations in input order, each as soon as its turn comes; `lines` are read a
        window at a time, so an input of any length (a file read as it goes) costs the memory of
        one window. A result waiting for its turn is kept as ids and hypotheses (None for an
        empty line) and made a `Translation` when it leaves: up to a window of them wait.
        `prefixes` and `constraints`, read beside `lines`: the target prefix of each ("" for
        none) and its lexical constraints (see `translate`); `markup`: lines with inline tags
        (see `translate`)."""
        if markup:
            yield from self._carrying_markup(lines, nbest, progress, prefixes, constraints)
            return
        done: dict[int, tuple[list[int], bool, list[Hypothesis]] | None] = {}
        sources: dict[int, tuple[list[int], bool]] = {}  # waiting: ids and whether they were cut
        steering: dict[int, tuple] = {}  # waiting: the target prefix, phrases to include and avoid
        remaining = aligned(lines, prefixes, constraints)
        beam = self.keeps_beam(nbest)

        def windows() -> Iterator[Source]:
            start = 0
            while window := list(itertools.islice(remaining, SORT_WINDOW)):
                ids, truncated = self.encode_sources([line for line, _, _ in window])
                begun = self.encode_prefixes([prefix for _, prefix, _ in window])
                order = []
                for offset, ((line, _, guide), row) in enumerate(zip(window, ids, strict=True)):
                    if line.strip():
                        where = f"line {start + offset + 1}"
                        sources[start + offset] = (row, offset in truncated)
                        steering[start + offset] = self.steering(begun[offset], guide, row, where, beam)
                        order.append(start + offset)
                    else:  # empty in, empty out: nothing to hallucinate a translation for
                        done[start + offset] = None
                order.sort(key=lambda i: len(sources[i][0]))
                for i in order:
                    yield Source(i, sources[i][0], self.max_len(len(sources[i][0])), *steering.pop(i))
                start += len(window)

        def leave(entry: tuple[list[int], bool, list[Hypothesis]] | None) -> Translation:
            return Translation([], [], [], [""]) if entry is None else self.translation(*entry)

        next_out = 0
        unconstrained = constraints is None
        for i, hyps in self._decode_stream(windows(), nbest, attention, unconstrained):
            done[i] = (*sources.pop(i), hyps)
            if progress:
                progress(1)
            while next_out in done:
                yield leave(done.pop(next_out))
                next_out += 1
        while next_out in done:  # trailing empty lines
            yield leave(done.pop(next_out))
            next_out += 1

    def _carrying_markup(
        self,
        lines: Iterable[str],
        nbest: int,
        progress: Callable[[int], None] | None,
        prefixes: Iterable[str] | None,
        constraints: Iterable[Constraints | dict] | None,
    ) -> Iterator[Translation]:
        """`iter_translate` of the lines without their tags, the tags put back into every text
        by the attention of its hypothesis (so attention is kept)."""
        waiting: collections.deque[Markup] = collections.deque()

        def plain() -> Iterator[str]:
            for number, line in enumerate(lines, 1):
                waiting.append(Markup.parse(line, f"line {number}"))
                yield waiting[-1].plain

        for t in self.iter_translate(plain(), nbest, progress, True, prefixes, constraints):
            yield self.carried(waiting.popleft(), t)

    def carried(self, markup: Markup, t: Translation) -> Translation:
        """`t`, the translation of `markup.plain` (with attention), with the tags put back into
        each hypothesis's text by its own attention."""
        if not t.hypotheses:  # an empty line, or one of tags only: its tags stand alone
            return dataclasses.replace(t, texts=[markup.carry("", None, [], [])])
        pieces = [t.tgt_pieces] + [self.tok.tgt.id_to_piece(h.tokens) for h in t.hypotheses[1:]]
        texts = [
            markup.carry(text, h.attention, t.src_pieces, tgt)
            for text, h, tgt in zip(t.texts, t.hypotheses, pieces, strict=True)
        ]
        return dataclasses.replace(t, texts=texts)

    def translation(self, ids: list[int], truncated: bool, hyps: list[Hypothesis]) -> Translation:
        """The text-level result for source `ids` and its n-best hypotheses."""
        return Translation(
            src_pieces=self.tok.src.id_to_piece(ids),
            tgt_pieces=self.tok.tgt.id_to_piece(hyps[0].tokens),
            hypotheses=hyps,
            texts=[self.tok.tgt.decode(h.tokens) for h in hyps],
            truncated=truncated,
        )

    def encode_prefixes(self, prefixes: list[str]) -> list[list[int]]:
        """Target prefixes as ids (normalised like references, no EOS); [] for an empty one."""
        if not any(prefixes):
            return [[] for _ in prefixes]
        return self.tok.tgt.encode_batch([normalize(p, self.normalize_form) for p in prefixes])

    def checked_prefix(self, prefix: list[int], src_len: int, where: str) -> list[int]:
        """`prefix`, refused when it leaves no room under the output cap of its source."""
        if len(prefix) >= self.max_len(src_len):
            raise NMTError(
                f"{where}: the prefix has {len(prefix)} pieces and the output cap for its "
                f"source is {self.max_len(src_len)}, EOS included; shorten the prefix or raise "
                "decode.max_len, max_len_ratio or max_len_add"
            )
        return prefix

    def steering(
        self,
        prefix: list[int],
        guide: Constraints | dict | None,
        ids: list[int],
        where: str,
        beam: bool,
    ) -> tuple[list[int], list[list[int]], list[list[int]], Avoiding | None, Any]:
        """What steers the search of the sentence of source `ids` (`Source`'s prefix, include,
        avoid, avoiding and vocabulary): its encoded target prefix, checked to leave room under
        the output cap, its lexical constraints (`encode_constraints`; refused unless the search
        keeps a `beam`, while a sentence without any decodes with any search) and, with a
        shortlist, the target pieces it may write (the prefix's and the phrases' included)."""
        prefix = self.checked_prefix(prefix, len(ids), where)
        include, avoid, avoiding = self.encode_constraints(guide, prefix, len(ids), where)
        if (include or avoid) and not beam:
            raise NMTError(f"{where}: lexical constraints need beam search; set a beam of 2 or more")
        if self.shortlist is None:
            return prefix, include, avoid, avoiding, None
        needed = itertools.chain(prefix, *include)
        return prefix, include, avoid, avoiding, self.shortlist.allowed(ids, needed)

    def encode_constraints(
        self, guide: Constraints | dict | None, prefix: list[int], src_len: int, where: str
    ) -> tuple[list[list[int]], list[list[int]], Avoiding | None]:
        """A sentence's phrases to include and to avoid as target ids (those to avoid with their
        spellings inside a word and every piece holding a word to avoid), and the phrases to
        avoid as text (None when none). Refused in one line when a phrase is empty or only
        unknown pieces, or when those to include cannot all fit under the output cap beside the
        prefix."""
        if guide is None:
            return [], [], None
        guide = Constraints.parse(guide, where)
        encoded, texts = [], {}
        for key, phrases in (("constraints", guide.include), ("avoid", guide.avoid)):
            texts[key] = [normalize(p, self.normalize_form) for p in phrases]
            ids = self.tok.tgt.encode_batch(texts[key]) if phrases else []
            for number, (text, pieces) in enumerate(zip(texts[key], ids, strict=True), 1):
                if not pieces:
                    raise NMTError(f"{where}: {key} {number} is empty; give each phrase some text")
                if all(p == UNK or self.marked_pieces[p] == SPACE for p in pieces):
                    raise NMTError(f"{where}: {key} {number} ({text!r}) is only unknown pieces to this model")
            encoded.append(ids)
        needed = len(prefix) + sum(map(len, encoded[0]))
        if encoded[0] and needed >= self.max_len(src_len):
            raise NMTError(
                f"{where}: the constraints (and prefix) need {needed} pieces and the output cap for "
                f"its source is {self.max_len(src_len)}, EOS included; give fewer or raise "
                "decode.max_len, max_len_ratio or max_len_add"
            )
        if not texts["avoid"]:
            return encoded[0], [], None
        words = [text for text in texts["avoid"] if len(text.split()) == 1]
        holding = [[i] for word in words for i, piece in enumerate(self.marked_pieces) if word in piece]
        inside = [ids for ids in map(self.inside_a_word, encoded[1]) if ids]
        avoiding = Avoiding(texts["avoid"], self.marked_pieces, self.tok.tgt.decode)
        return encoded[0], encoded[1] + inside + holding, avoiding

    @functools.cached_property
    def marked_pieces(self) -> list[str]:
        """Every target piece's text by id, the word-start mark kept (special pieces: "")."""
        special = (PAD, UNK, BOS, EOS)
        return ["" if i in special else piece for i, piece in enumerate(self.tok.tgt.pieces)]

    def inside_a_word(self, ids: list[int]) -> list[int] | None:
        """A phrase's pieces as they would be written inside a word (without the word-start
        mark), so that a phrase to avoid is banned there too; None when it has no such spelling."""
        first = self.marked_pieces[ids[0]]
        if not first.startswith(SPACE):
            return None
        if first == SPACE:
            return ids[1:] or None
        piece = self.tok.tgt.sp.piece_to_id(first[1:])
        return [piece, *ids[1:]] if piece != UNK else None

    def encode_sources(self, lines: list[str]) -> tuple[list[list[int]], set[int]]:
        """Normalised, tokenised source ids ending in EOS, cut to `src_limit` pieces, and the
        indices of the lines that were cut."""
        ids, truncated = [], set()
        normalized = [normalize(line, self.normalize_form) for line in lines]
        for i, pieces in enumerate(self.tok.src.encode_batch(normalized)):
            if len(pieces) > self.src_limit:
                truncated.add(i)
                pieces = pieces[: self.src_limit]
            ids.append(pieces + [EOS])
        return ids, truncated

    def batches(self, order: Iterable[int], length: Callable[[int], int]) -> Iterator[list[int]]:
        """Consecutive keys of `order` (sources of `length(key)` ids) in batches that `fits`."""
        batch: list[int] = []
        longest = 0
        for key in order:
            longer = max(longest, length(key))
            if batch and not self.fits(len(batch) + 1, longer):
                yield batch
                batch, longer = [], length(key)
            batch.append(key)
            longest = longer
        if batch:
            yield batch

    def _decode_stream(
        self, sources: Iterator[Source], nbest: int, attention: bool, unconstrained: bool = False
    ) -> Iterator[tuple[Any, list[Hypothesis]]]:
        """(key, n-best hypotheses) for every source, in any order. `unconstrained`: no source
        has constraints, so an engine may take a path without them.
        This default decodes consecutive sources in batches through `_decode`; an engine with
        continuous batching replaces it."""
        waiting: dict[int, Source] = {}

        def keys() -> Iterator[int]:
            for source in sources:
                if source.prefix or source.steered or source.vocabulary is not None:
                    raise NMTError(
                        "this engine does not take target prefixes, constraints or a shortlist; "
                        "use --engine torch"
                    )
                waiting[source.key] = source
                yield source.key

        for chunk in self.batches(keys(), lambda key: len(waiting[key].ids)):
            rows = [waiting.pop(key).ids for key in chunk]
            yield from zip(chunk, self._decode(rows, nbest), strict=True)

    def _decode(self, rows: list[list[int]], nbest: int) -> list[list[Hypothesis]]:
        """The `nbest` best hypotheses of each source id list (ending in EOS), best first."""
        raise NotImplementedError


def aligned(
    lines: Iterable[str], prefixes: Iterable[str] | None, constraints: Iterable[Any] | None
) -> Iterator[tuple[str, str, Any]]:
    """(line, prefix, constraints) triples ("" and None where none are given), refused in one
    line when a stream beside the lines runs out before them or after."""
    given = {name: s for name, s in (("prefixes", prefixes), ("constraints", constraints)) if s is not None}
    ends = object()
    for number, (line, *beside) in enumerate(
        itertools.zip_longest(lines, *given.values(), fillvalue=ends), 1
    ):
        for name, value in zip(given, beside, strict=True):
            if line is ends or value is ends:
                more = f"{name} than input lines" if line is ends else f"input lines than {name}"
                raise NMTError(
                    f"{name}: more {more} (at line {number}); give one a line (an empty one for none)"
                )
        found = dict(zip(given, beside, strict=True))
        yield line, found.get("prefixes", ""), found.get("constraints")
