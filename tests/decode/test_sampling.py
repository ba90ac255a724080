"""Sampling: draws in the proportions asked for, never outside top-k / top-p, top-k 1 is greedy,
a seed gives the same samples at any batch size, scores are the model's log-probabilities."""

import math

import pytest
import torch

from nmt.config import TEMPERATURES, DecodeConfig
from nmt.decode.sampling import sample, sample_tokens
from nmt.text.ranking import NEG_INF, Source
from tests.decode.test_search import STYLES, greedy_search, make_model, many_sources, teacher_forced_log_prob

PROBS = torch.tensor([0.05, 0.4, 0.0, 0.25, 0.2, 0.1])  # token 2 forbidden (restrict's -inf)
GRID = 20_000


def frequencies(cfg: DecodeConfig, probs: torch.Tensor = PROBS) -> torch.Tensor:
    """How often each token is drawn over an even grid of uniforms: its exact probability under
    the sampler's distribution, to 1 / GRID."""
    logp = probs.log().expand(GRID, -1).clone()
    uniforms = (torch.arange(GRID, dtype=torch.float64) + 0.5) / GRID
    tokens = sample_tokens(logp, uniforms, cfg)
    return torch.bincount(tokens, minlength=len(probs)).double() / GRID


def test_draws_follow_the_models_distribution_and_never_a_forbidden_token():
    torch.testing.assert_close(frequencies(DecodeConfig(sample=True)), PROBS.double(), atol=1e-3, rtol=0)


@pytest.mark.parametrize("temperature", [TEMPERATURES[0], 0.5, 2.0, TEMPERATURES[1]])
def test_a_temperature_divides_the_logits(temperature):
    expected = torch.softmax(PROBS.double().log() / temperature, -1)
    drawn = frequencies(DecodeConfig(sample=True, temperature=temperature))
    torch.testing.assert_close(drawn, expected, atol=1e-3, rtol=0)
    assert drawn[2] == 0


def test_top_k_draws_only_from_the_k_most_probable_renormalised():
    drawn = frequencies(DecodeConfig(sample=True, top_k=2))
    torch.testing.assert_close(
        drawn, torch.tensor([0, 0.4, 0, 0.25, 0, 0]).double() / 0.65, atol=1e-3, rtol=0
    )


@pytest.mark.parametrize(("top_p", "kept"), [(0.5, [1, 3]), (0.65, [1, 3]), (0.66, [1, 3, 4]), (0.01, [1])])
def test_top_p_draws_from_the_fewest_tokens_holding_p(top_p, kept):
    drawn = frequencies(DecodeConfig(sample=True, top_p=top_p))
    assert drawn.nonzero().flatten().tolist() == kept
    expected = torch.zeros(len(PROBS), dtype=torch.float64)
    expected[kept] = PROBS[kept].double() / PROBS[kept].sum()
    torch.testing.assert_close(drawn, expected, atol=1e-3, rtol=0)


def test_a_uniform_at_the_top_of_the_range_still_draws_an_allowed_token():
    logp = PROBS.log()[None].expand(3, -1).clone()
    uniforms = torch.tensor([1 - 1e-17, 0.999999999, 0.0], dtype=torch.float64)
    for cfg in (DecodeConfig(sample=True), DecodeConfig(sample=True, top_k=3, top_p=0.6)):
        assert all(PROBS[t] > 0 for t in sample_tokens(logp, uniforms, cfg).tolist())
    row = torch.full((1, 6), NEG_INF)
    row[0, 4] = 0.0  # one allowed token
    assert sample_tokens(row, torch.tensor([0.99]), DecodeConfig(sample=True)).tolist() == [4]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_extremes_the_config_accepts_draw_allowed_tokens(dtype):
    """A temperature of 1e-45 (every logit / T at -inf: a softmax of NaN) and a top_p of 1e-300
    (0 in float32: every token cut) crashed; the checks accept [0.001, 100] and (0, 1], and at
    the sharp end, in any precision, the draws are the best token; at the flat end never a
    forbidden one (how flat: test_a_temperature_divides_the_logits)."""
    logp = (torch.randn(64, 500, generator=torch.Generator().manual_seed(3)) * 30).log_softmax(-1)
    logp[:, ::7] = NEG_INF  # forbidden by restrict
    logp = logp.to(dtype)
    best = logp.float().argmax(-1)
    uniforms = torch.rand(64, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    sharpest = [
        DecodeConfig(sample=True, temperature=TEMPERATURES[0]),
        DecodeConfig(sample=True, top_p=1e-300),
        DecodeConfig(sample=True, top_p=5e-324),
        DecodeConfig(sample=True, temperature=TEMPERATURES[0], top_p=5e-324, top_k=3),
    ]
    for cfg in sharpest:
        assert torch.equal(sample_tokens(logp, uniforms, cfg), best), cfg
    flattest = DecodeConfig(sample=True, temperature=TEMPERATURES[1], top_k=1000)  # k over the vocabulary
    assert (sample_tokens(logp, uniforms, flattest) % 7 != 0).all()


def draw(model, src, src_len, max_lens, cfg, n=1, batch=64):
    items = [Source(i, src[i, : int(src_len[i])].tolist(), m) for i, m in enumerate(max_lens)]
    fits = lambda sentences, longest: sentences <= batch  # noqa: E731
    results = dict(sample(model, items, cfg, fits, torch.device("cpu"), n))
    return [results[i] for i in range(len(items))]


@pytest.mark.parametrize("style", STYLES)
def test_top_k_one_is_greedy_search(style):
    model = make_model(STYLES[style])
    src, src_len, max_lens = many_sources()
    greedy = greedy_search(model, src, src_len, max_lens, DecodeConfig())
    drawn = draw(model, src, src_len, max_lens, DecodeConfig(sample=True, top_k=1, seed=5))
    assert [h.tokens for h in greedy] == [h.tokens for (h,) in drawn]
    assert [h.log_prob for h in greedy] == pytest.approx([h.log_prob for (h,) in drawn], abs=1e-5)


def test_a_seed_gives_the_same_samples_at_any_batch_size_and_another_seed_others():
    model = make_model(STYLES["luong-if"], dtype=torch.float64)
    src, src_len, max_lens = many_sources(count=12)
    cfg = DecodeConfig(sample=True, temperature=1.5, seed=7)
    tokens = lambda results: [[h.tokens for h in hyps] for hyps in results]  # noqa: E731
    wide = tokens(draw(model, src, src_len, max_lens, cfg, n=3))
    assert wide == tokens(draw(model, src, src_len, max_lens, cfg, n=3, batch=4))  # rows join mid-way
    assert wide == tokens(draw(model, src, src_len, max_lens, cfg, n=3, batch=1))
    other = tokens(
        draw(model, src, src_len, max_lens, DecodeConfig(sample=True, temperature=1.5, seed=8), n=3)
    )
    assert other != wide
    assert any(len({tuple(t) for t in samples}) > 1 for samples in wide)  # the samples of a sentence differ


def test_n_samples_are_ranked_by_the_models_own_scores():
    model = make_model(STYLES["bahdanau"], dtype=torch.float64)
    src, src_len, max_lens = many_sources(count=5)
    cfg = DecodeConfig(sample=True, temperature=2.0, length_penalty="avg", alpha=1.0)
    for i, hyps in enumerate(draw(model, src, src_len, max_lens, cfg, n=4)):
        assert len(hyps) == 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        n = int(src_len[i])
        for h in hyps:  # the model's log-probability at temperature 1, whatever the draws' was
            expected = teacher_forced_log_prob(model, src[i : i + 1, :n], src_len[i : i + 1], h.tokens)
            assert h.log_prob == pytest.approx(expected, abs=1e-6)
            assert h.score == pytest.approx(expected / len(h.tokens), abs=1e-6)
            assert not math.isinf(h.log_prob)
