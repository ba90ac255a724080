"""SentencePiece pieces -> words, for attention a person can read.

A piece that starts with "▁" (U+2581, SentencePiece's word boundary) opens a word; any other
piece continues the word before it. A source word receives the total weight of its pieces (each
row still sums to 1); a target word's row is the mean of its pieces' rows (it is one decision
spread over several steps). Special pieces such as "</s>" stay words of their own.
"""

from __future__ import annotations

from collections.abc import Sequence

BOUNDARY = "\u2581"
SPECIAL = {"</s>", "<s>", "<unk>", "<pad>"}


def word_spans(pieces: Sequence[str]) -> list[tuple[str, list[int]]]:
    """(word, indices of its pieces) in order; the word is its pieces joined, boundary removed."""
    spans: list[tuple[str, list[int]]] = []
    for i, piece in enumerate(pieces):
        starts = piece.startswith(BOUNDARY) or piece in SPECIAL or not spans or spans[-1][0] in SPECIAL
        if starts:
            spans.append((piece.removeprefix(BOUNDARY) if piece not in SPECIAL else piece, [i]))
        else:
            word, members = spans[-1]
            spans[-1] = (word + piece, [*members, i])
    return spans


def merge_pieces(
    weights: Sequence[Sequence[float]], src_pieces: Sequence[str], tgt_pieces: Sequence[str]
) -> tuple[list[str], list[str], list[list[float]]]:
    """Piece-level attention (one row per target piece, one column per source piece) ->
    (source words, target words, word-level weights)."""
    if len(weights) != len(tgt_pieces) or any(len(row) != len(src_pieces) for row in weights):
        raise ValueError(
            f"attention of {len(weights)} rows does not match {len(tgt_pieces)} target and "
            f"{len(src_pieces)} source pieces"
        )
    src_words, tgt_words = word_spans(src_pieces), word_spans(tgt_pieces)
    merged = []
    for _, rows in tgt_words:
        mean = [sum(weights[r][c] for r in rows) / len(rows) for c in range(len(src_pieces))]
        merged.append([sum(mean[c] for c in cols) for _, cols in src_words])
    return [w for w, _ in src_words], [w for w, _ in tgt_words], merged
