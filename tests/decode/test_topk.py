"""The blocked top-k equals torch's: same values, same indices where values differ, on the widths
and row counts decoding meets (a tail no block covers, -inf rows of forced tokens, ties), and a
search through it decodes exactly as through `torch.topk`."""

import pytest
import torch

from nmt.config import DecodeConfig, config_from_dict
from nmt.decode import search as search_module
from nmt.decode.topk import BLOCK, best, top_k
from nmt.model.seq2seq import Seq2Seq
from nmt.text.ranking import Source
from nmt.vocab import EOS


@pytest.mark.parametrize("width", [8000, 8000 + BLOCK // 2, 3 * BLOCK + 1, 50])
@pytest.mark.parametrize("k", [1, 2, 10])
@pytest.mark.parametrize("rows", [1, 64, 320])
def test_top_k_equals_torch_topk(width, k, rows):
    scores = torch.randn(rows, width, generator=torch.Generator().manual_seed(width + k + rows))
    values, index = top_k(scores, k)
    expected_values, expected_index = scores.topk(k, dim=-1)
    assert torch.equal(values, expected_values)
    assert torch.equal(index, expected_index)


def test_the_largest_entries_in_one_block_or_the_tail_are_all_found():
    scores = torch.randn(3, 8000 + 17)
    scores[0, 64:74] = torch.arange(100.0, 110.0)  # all ten in one block
    scores[1, -10:] = torch.arange(100.0, 110.0)  # all ten in the tail no block covers
    scores[2, :8000:800] = torch.arange(100.0, 110.0)  # one in each of ten blocks
    values, index = top_k(scores, 10)
    assert torch.equal(values, scores.topk(10, dim=-1).values)
    assert torch.equal(index, scores.topk(10, dim=-1).indices)


def test_rows_forced_to_one_token_and_ties_give_torchs_values():
    scores = torch.full((2, 8000), float("-inf"))
    scores[0, 4321] = -0.5  # a forced row: one finite entry
    scores[1] = torch.randn(8000).round()  # many ties
    values, index = top_k(scores, 10)
    assert torch.equal(values, scores.topk(10, dim=-1).values)
    assert index[0, 0] == 4321
    assert torch.equal(scores.gather(1, index), values)  # each index holds its value
    assert all(len(set(row.tolist())) == 10 for row in index)  # ten distinct entries a row


def test_best_is_max():
    scores = torch.randn(64, 8000)
    value, index = best(scores)
    expected = scores.max(-1)
    assert torch.equal(value, expected.values) and torch.equal(index, expected.indices)


def wide_model(vocab: int) -> Seq2Seq:
    raw = {
        "data": {"src_lang": "a", "tgt_lang": "b"},
        "model": {"embedding": 16, "encoder": {"hidden": 16}, "decoder": {"hidden": 32}},
    }
    torch.manual_seed(0)
    model = Seq2Seq(config_from_dict(raw).model, vocab, vocab).eval()
    with torch.no_grad():
        model.decoder.output_layer.bias[EOS] += 3.0
    return model


@pytest.mark.parametrize("beam", [1, 4])
def test_a_search_through_blocked_top_k_decodes_as_through_torch_topk(monkeypatch, beam):
    vocab = 40 * BLOCK  # wide enough that the blocked path runs for 2K = 8 per beam
    model = wide_model(vocab)
    g = torch.Generator().manual_seed(1)
    lengths = [9, 3, 14, 6]
    ids = [torch.randint(4, vocab, (n,), generator=g).tolist() for n in lengths]
    items = [Source(i, pieces, 15) for i, pieces in enumerate(ids)]
    cfg = DecodeConfig(beam=beam, alpha=0.0)

    def run():
        results = search_module.search(model, items, cfg, lambda n, longest: n <= 2, torch.device("cpu"), 1)
        return {key: [(h.tokens, h.score) for h in hyps] for key, hyps in results}

    blocked = run()
    monkeypatch.setattr(search_module, "top_k", lambda scores, k: scores.topk(k, dim=-1))
    monkeypatch.setattr(search_module, "best", lambda scores: scores.max(-1))
    assert blocked == run()
