"""Pieces -> words (nmt.words): the merging rules every attention view relies on."""

import numpy as np
import pytest

from nmt.words import SPACE, WordMap, attention_view, merge_attention, text_words

S = SPACE


def test_pieces_group_into_words_and_a_lone_space_mark_joins_the_word_it_starts():
    m = WordMap.of([f"{S}", "S", "onntag", ",", f"{S}12", ".", f"{S}März", "</s>"])
    assert m.words == ["Sonntag", ",", "12", ".", "März", "</s>"]
    assert m.special == [False] * 5 + [True]
    assert m.text_indices == [0, 1, 2, 3, 4]
    assert m.share.sum(1) == pytest.approx(np.ones(8))
    assert m.share[0].tolist() == [1, 0, 0, 0, 0, 0]  # the lone ▁ belongs to "Sonntag"


def test_an_iso_date_is_five_words_and_a_straddling_piece_is_shared_by_its_characters():
    m = WordMap.of([f"{S}19", "89", "-0", "3", "-", "12", "</s>"])
    assert m.words == ["1989", "-", "03", "-", "12", "</s>"]
    assert m.share[2].tolist() == [0, 0.5, 0.5, 0, 0, 0]
    assert text_words("1989-03-12") == m.words[:-1]


def test_source_words_sum_their_pieces_and_target_words_average_their_rows():
    weights = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.0, 0.0, 0.0, 1.0]])
    merged, src, tgt = merge_attention(weights, [f"{S}ab", "c", f"{S}d", "</s>"], [f"{S}x", "y", "</s>"])
    assert src == ["abc", "d", "</s>"] and tgt == ["xy", "</s>"]
    assert merged[0] == pytest.approx([(0.3 + 0.7) / 2, (0.3 + 0.2) / 2, (0.4 + 0.1) / 2])
    assert merged[1] == pytest.approx([0.0, 0.0, 1.0])
    assert merged.sum(1) == pytest.approx([1.0, 1.0])  # rows stay distributions


def test_the_pieces_view_never_shows_a_lone_space_mark():
    _, src, tgt = attention_view(np.eye(3), [S, "a", "</s>"], [f"{S}b", S, "</s>"], pieces=True)
    assert S not in src and S not in tgt and src[0] == "\u2423"
