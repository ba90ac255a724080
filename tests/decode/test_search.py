"""Search invariants: beam 1 = greedy, batch independence, honest scores, exact small searches."""

import itertools
from dataclasses import dataclass

import pytest
import torch

from nmt.config import config_from_dict
from nmt.data.tokenizer import BOS, EOS, PAD
from nmt.decode.search import beam_search, greedy_search, length_penalty
from nmt.model.seq2seq import Seq2Seq

V = 20
STYLES = {
    "luong": {"style": "luong"},
    "luong-if": {"style": "luong", "input_feeding": True},
    "bahdanau": {"style": "bahdanau", "bridge": "backward", "output": "maxout"},
}


def make_model(decoder: dict, seed: int = 0, dtype=torch.float32) -> Seq2Seq:
    raw = {
        "data": {"src_lang": "a", "tgt_lang": "b"},
        "model": {
            "embedding": 16,
            "encoder": {"hidden": 16},
            "decoder": {"hidden": 32, **decoder},
            "attention": {"type": "bahdanau"},
        },
    }
    torch.manual_seed(seed)
    model = Seq2Seq(config_from_dict(raw).model, V, V).to(dtype).eval()
    with torch.no_grad():  # make EOS likely enough that some hypotheses end early
        model.decoder.output_layer.bias[EOS] += 2.5
        model.decoder.output_layer.bias[[PAD, BOS]] = -1e4
    return model


def sources(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 2, 7, 1])
    src = torch.randint(4, V, (4, 7), generator=g)
    src[:, -1] = EOS
    src[torch.arange(7)[None, :] >= lengths[:, None]] = PAD
    for i, n in enumerate(lengths):
        src[i, n - 1] = EOS
    return src, lengths, [12, 6, 12, 4]


@torch.no_grad()
def teacher_forced_log_prob(model, src, src_len, tokens) -> float:
    tgt_in = torch.tensor([[BOS, *tokens[:-1]]])
    logits, _ = model(src, src_len, tgt_in)
    logp = torch.log_softmax(logits.double(), -1)[0]
    return float(logp[torch.arange(len(tokens)), torch.tensor(tokens)].sum())


@pytest.mark.parametrize("style", STYLES)
def test_beam_one_equals_greedy(style):
    model = make_model(STYLES[style])
    src, src_len, max_lens = sources()
    greedy = greedy_search(model, src, src_len, max_lens)
    beam = beam_search(model, src, src_len, max_lens, beam=1)
    assert [h.tokens for h in greedy] == [b[0].tokens for b in beam]
    for g, (b,) in zip(greedy, beam, strict=True):
        assert g.log_prob == pytest.approx(b.log_prob, abs=1e-5)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("beam", [1, 4])
def test_translation_does_not_depend_on_the_batch(style, beam):
    model = make_model(STYLES[style], dtype=torch.float64)
    src, src_len, max_lens = sources()
    batched = beam_search(model, src, src_len, max_lens, beam=beam, alpha=0.6)
    for i in range(len(max_lens)):
        n = int(src_len[i])
        alone = beam_search(model, src[i : i + 1, :n], src_len[i : i + 1], max_lens[i : i + 1], beam, 0.6)
        assert alone[0][0].tokens == batched[i][0].tokens
        assert alone[0][0].score == pytest.approx(batched[i][0].score, abs=1e-9)
        torch.testing.assert_close(alone[0][0].attention, batched[i][0].attention[:, :n])


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_scores_are_the_models_log_probabilities(style, alpha):
    model = make_model(STYLES[style], dtype=torch.float64)
    src, src_len, max_lens = sources()
    results = beam_search(model, src, src_len, max_lens, beam=3, alpha=alpha, nbest=3)
    ended = capped = 0
    for i, hyps in enumerate(results):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        n = int(src_len[i])
        for h in hyps:
            ended += h.tokens[-1] == EOS
            capped += len(h.tokens) == max_lens[i]
            assert h.tokens[-1] == EOS or len(h.tokens) == max_lens[i]
            assert EOS not in h.tokens[:-1]
            assert h.attention.shape == (len(h.tokens), src.size(1))
            expected = teacher_forced_log_prob(model, src[i : i + 1, :n], src_len[i : i + 1], h.tokens)
            assert h.log_prob == pytest.approx(expected, abs=1e-6)
            assert h.score == pytest.approx(expected / length_penalty(len(h.tokens), alpha), abs=1e-6)
    assert ended > 0  # the test covers hypotheses that stopped on EOS


# -- exact search on a tiny fake model: beam search with a wide beam must find the optimum ------
@dataclass
class FakeState:
    h: torch.Tensor

    def select(self, index):
        return FakeState(self.h[index])


class FakeMemory:
    def select(self, index):
        return self


class FakeModel:
    """Next-token log-probs depend on the whole prefix (through a hash); tokens: EOS, 4, 5."""

    def __init__(self, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(997, 6, generator=g) * 2
        self.table[:, [PAD, 1, BOS]] = float("-inf")
        self.decoder = self

    def encode(self, src, src_len):
        return FakeMemory(), FakeState(src.sum(1) % 997)

    def step(self, y, state, mem, t):
        h = (state.h * 31 + y) % 997
        return self.table[h], FakeState(h), torch.zeros(len(y), 1)

    def log_prob(self, start: int, tokens: list[int]) -> float:
        h, y, total = start, BOS, 0.0
        for token in tokens:
            h = (h * 31 + y) % 997
            total += float(torch.log_softmax(self.table[h], -1)[token])
            y = token
        return total


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("alpha", [0.0, 0.8, 2.0])
def test_a_wide_beam_finds_the_exact_optimum(seed, alpha):
    model, max_len = FakeModel(seed), 5
    src = torch.tensor([[seed + 7]])
    candidates = [[*body, EOS] for n in range(max_len) for body in itertools.product([4, 5], repeat=n)]
    candidates += [list(body) for body in itertools.product([4, 5], repeat=max_len)]  # capped
    start = int(src.sum()) % 997
    best = max(candidates, key=lambda c: model.log_prob(start, c) / length_penalty(len(c), alpha))
    (found,) = beam_search(model, src, torch.tensor([1]), [max_len], beam=32, alpha=alpha)[0]
    assert found.tokens == best
