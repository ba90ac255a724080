"""Text in, text out, whatever decodes: tokenise, sort by length, decode in batches, restore the
input order. An engine (`nmt.decode.translator.Translator` with torch, `nmt.runtime` with
onnxruntime) only supplies `_decode`, so both treat lines, limits and batches the same way.

No torch here, so the torch-free runtime can build on it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from nmt.config import DecodeConfig, decode_settings
from nmt.data.cleaning import normalize
from nmt.data.tokenizer import TokenizerPair
from nmt.decode.ranking import Hypothesis
from nmt.vocab import EOS
from nmt.words import merge_attention


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

    def configured(self, **settings) -> TextTranslator:
        """The same model with other decode settings (`beam=5`, `alpha=0.6`, ...), checked."""
        other = copy.copy(self)
        other.cfg = decode_settings(self.cfg, settings, "Translator.configured")
        return other

    def max_len(self, src_len: int) -> int:
        return max(1, min(self.cfg.max_len, int(self.cfg.max_len_ratio * src_len) + 10))

    def translate(self, sentences: str | list[str], nbest: int = 1, **settings: object) -> list[Translation]:
        """Translations of `sentences` in their order (a single string is one sentence), each
        with `nbest` hypotheses; `settings` (`beam=5`, `max_len=50`, ...) apply to this call."""
        translator = self.configured(**settings) if settings else self
        lines = [sentences] if isinstance(sentences, str) else list(sentences)
        return list(translator.iter_translate(lines, nbest))

    def iter_translate(
        self, lines: list[str], nbest: int = 1, progress: Callable[[int], None] | None = None
    ) -> Iterator[Translation]:
        """Translations in input order; batches are formed from length-sorted sentences."""
        ids, truncated = self.encode_sources(lines)
        # Empty in, empty out: a blank line is not a sentence to hallucinate a translation for.
        done = {i: Translation([], [], [], [""]) for i, line in enumerate(lines) if not line.strip()}
        order = sorted((i for i in range(len(ids)) if i not in done), key=lambda i: len(ids[i]))
        batches = iter(self._batches(order, ids))
        next_out = 0
        while True:
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1
            chunk = next(batches, None)
            if chunk is None:
                return
            for i, hyps in zip(chunk, self._decode([ids[i] for i in chunk], nbest), strict=True):
                texts = [self.tok.tgt.decode(h.tokens) for h in hyps]
                done[i] = Translation(
                    src_pieces=self.tok.src.id_to_piece(ids[i]),
                    tgt_pieces=self.tok.tgt.id_to_piece(hyps[0].tokens),
                    hypotheses=hyps,
                    texts=texts,
                    truncated=i in truncated,
                )
            if progress:
                progress(len(chunk))

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

    def _batches(self, order: list[int], ids: list[list[int]]) -> list[list[int]]:
        """Consecutive length-sorted sentences, up to batch_size sentences or padded tokens."""
        if self.cfg.batch_type == "sentences":
            return [order[i : i + self.cfg.batch_size] for i in range(0, len(order), self.cfg.batch_size)]
        batches: list[list[int]] = [[]]
        for i in order:  # sorted ascending, so the newest sentence is the longest
            if batches[-1] and (len(batches[-1]) + 1) * len(ids[i]) > self.cfg.batch_size:
                batches.append([])
            batches[-1].append(i)
        return [b for b in batches if b]

    def _decode(self, rows: list[list[int]], nbest: int) -> list[list[Hypothesis]]:
        """The `nbest` best hypotheses of each source id list (ending in EOS), best first."""
        raise NotImplementedError
