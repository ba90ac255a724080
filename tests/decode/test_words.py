"""Pieces -> words for attention: the merge rule and the weights' arithmetic."""

import pytest

from nmt.decode.words import merge_pieces, word_spans


def test_word_spans_join_pieces_until_the_next_boundary():
    pieces = ["▁Sonn", "tag", ",", "▁12", ".", "▁", "1989", "</s>"]
    assert word_spans(pieces) == [("Sonntag,", [0, 1, 2]), ("12.", [3, 4]), ("1989", [5, 6]), ("</s>", [7])]


def test_a_first_piece_without_boundary_still_opens_a_word():
    assert word_spans(["ab", "▁c"]) == [("ab", [0]), ("c", [1])]


def test_source_weights_add_up_and_target_rows_average():
    src = ["▁a", "b", "▁c", "</s>"]  # words: ab, c, </s>
    tgt = ["▁x", "y", "</s>"]  # words: xy, </s>
    weights = [
        [0.1, 0.2, 0.3, 0.4],
        [0.5, 0.1, 0.2, 0.2],
        [0.0, 0.0, 0.0, 1.0],
    ]
    source, target, merged = merge_pieces(weights, src, tgt)
    assert source == ["ab", "c", "</s>"] and target == ["xy", "</s>"]
    assert merged[0] == pytest.approx([(0.3 + 0.6) / 2, (0.3 + 0.2) / 2, (0.4 + 0.2) / 2])
    assert merged[1] == pytest.approx([0.0, 0.0, 1.0])
    assert all(sum(row) == pytest.approx(1.0) for row in merged)


def test_one_piece_per_word_is_unchanged():
    weights = [[0.7, 0.3], [0.2, 0.8]]
    assert merge_pieces(weights, ["▁a", "</s>"], ["▁b", "</s>"])[2] == weights


def test_a_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="does not match"):
        merge_pieces([[1.0]], ["▁a", "</s>"], ["▁b"])
