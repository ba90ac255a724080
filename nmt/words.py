"""SentencePiece pieces -> words, for everything that shows or exports attention.

Users read words, not subword pieces, so heatmaps, the JSONL export, alignments and the explorer
all go through `WordMap`. A word is a run of letters/digits or a single other non-space character
(`\\w+|[^\\w\\s]`): "1989-03-12" is the five words `1989 - 03 - 12` and "dog." is `dog .`, the
usual tokenisation of word-alignment work, so that the toy task's year, month and day are words
of their own. Special pieces (`</s>`, `<unk>`) are words of their own.

Merging (`merge_attention`): a source word's weight is the SUM of its pieces' weights (attention
mass is kept), and a target word's row is the MEAN of its pieces' rows (a word is one decision,
whatever its number of pieces). A piece that straddles a word boundary (a piece `-0` in
`1989-03-12`) is shared between the words by the fraction of its characters in each; a lone `▁`
belongs to the word it starts. When every piece lies inside one word, these are plain sums and
means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

SPACE = "\u2581"  # SentencePiece's word-start mark
SPECIAL = frozenset({"</s>", "<s>", "<unk>", "<pad>"})
WORD = re.compile(r"\w+|[^\w\s]")


def text_words(text: str) -> list[str]:
    """The words of a plain text, as `WordMap` counts them (for gold alignment indices)."""
    return WORD.findall(text)


def piece_label(piece: str) -> str:
    """How a piece is shown when pieces are asked for: a lone `▁` as a visible space `␣`."""
    return "\u2423" if piece == SPACE else piece


@dataclass
class WordMap:
    """The words of a piece sequence and `share` (pieces x words): the fraction of each piece
    that belongs to each word (each row sums to 1)."""

    words: list[str]
    share: np.ndarray
    special: list[bool]  # the word is a special piece (`</s>`), not text

    @classmethod
    def of(cls, pieces: list[str]) -> WordMap:
        words: list[str] = []
        special: list[bool] = []
        links: list[tuple[int, int]] = []  # (piece, word) once per character of the piece
        run: list[int] = []  # the normal pieces since the last special one
        for p, piece in enumerate([*pieces, None]):
            if piece is None or piece in SPECIAL:
                links += _run_links(run, pieces, words, special)
                run = []
                if piece is not None:
                    links.append((p, len(words)))
                    words.append(piece)
                    special.append(True)
            else:
                run.append(p)
        share = np.zeros((len(pieces), len(words)))
        for p, w in links:
            share[p, w] += 1.0
        share /= np.maximum(share.sum(1, keepdims=True), 1e-12)
        return cls(words, share, special)

    @property
    def text_indices(self) -> list[int]:
        """The indices of the real words (not `</s>`), which alignments number from 0."""
        return [i for i, s in enumerate(self.special) if not s]

    def sum_pieces(self, values) -> np.ndarray:
        """Per-word sums of per-piece values (attention columns, log-probabilities): (..., P) -> (..., W)."""
        return np.asarray(values, dtype=float) @ self.share

    def mean_pieces(self, rows) -> np.ndarray:
        """Per-word means of per-piece rows: (P, ...) -> (W, ...)."""
        weights = self.share / np.maximum(self.share.sum(0, keepdims=True), 1e-12)
        return weights.T @ np.asarray(rows, dtype=float)


def _run_links(
    run: list[int], pieces: list[str], words: list[str], special: list[bool]
) -> list[tuple[int, int]]:
    """Append the words of a run of normal pieces to `words`; (piece, word) per character.

    A space belongs to the word after it (a lone `▁` starts that word), or to the last word when
    none follows; a run of spaces only is dropped, as the decoder adds nothing with it."""
    owner = [p for p in run for _ in pieces[p]]
    text = "".join(pieces[p] for p in run).replace(SPACE, " ")
    first = len(words)
    word_at = [-1] * len(text)
    for m in WORD.finditer(text):
        word_at[m.start() : m.end()] = [len(words)] * (m.end() - m.start())
        words.append(m.group())
        special.append(False)
    if len(words) == first:
        return []
    following = len(words) - 1
    for i in range(len(text) - 1, -1, -1):
        if word_at[i] >= 0:
            following = word_at[i]
        else:
            word_at[i] = following
    return list(zip(owner, word_at, strict=True))


def merged_words(
    weights, src_pieces: list[str], tgt_pieces: list[str]
) -> tuple[np.ndarray, WordMap, WordMap]:
    """(T pieces, S pieces) weights -> (target words, source words) weights and both word maps:
    source words sum their pieces' columns, target words average their pieces' rows."""
    weights = np.asarray(weights, dtype=float)[: len(tgt_pieces), : len(src_pieces)]
    src, tgt = WordMap.of(src_pieces), WordMap.of(tgt_pieces)
    return tgt.mean_pieces(src.sum_pieces(weights)), src, tgt


def merge_attention(
    weights, src_pieces: list[str], tgt_pieces: list[str]
) -> tuple[np.ndarray, list[str], list[str]]:
    """`merged_words` with both word lists."""
    merged, src, tgt = merged_words(weights, src_pieces, tgt_pieces)
    return merged, src.words, tgt.words


def word_matrix(weights, src_pieces: list[str], tgt_pieces: list[str]) -> np.ndarray:
    """Attention over words, without the `</s>` row and column: (target words, source words)."""
    merged, src, tgt = merged_words(weights, src_pieces, tgt_pieces)
    return merged[np.ix_(tgt.text_indices, src.text_indices)]


def attention_view(
    weights, src_pieces: list[str], tgt_pieces: list[str], pieces: bool = False
) -> tuple[np.ndarray, list[str], list[str]]:
    """What to show: merged words (default) or the raw pieces with readable labels."""
    if pieces:
        matrix = np.asarray(weights, dtype=float)[: len(tgt_pieces), : len(src_pieces)]
        return matrix, [piece_label(p) for p in src_pieces], [piece_label(p) for p in tgt_pieces]
    return merge_attention(weights, src_pieces, tgt_pieces)
