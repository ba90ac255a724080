"""Stateful attention (a plugin's state carried by the decoder, `DecoderState.attention`): every
search finds what the model finds alone, whatever the batch, the pool's joins and leaves, the
beams' reordering and the rows (pooled or fixed), and the state is zero at padding."""

import pytest
import torch

from nmt.config import DecodeConfig
from nmt.model.decoder import DecoderState, fit
from tests.decode.test_rows import both, mixed_sources
from tests.decode.test_search import (
    FLOAT32_SUMS,
    STYLES,
    beam_search,
    greedy_search,
    make_model,
    many_sources,
    sources,
    teacher_forced_log_prob,
)
from tests.plugins import load_examples

ATTENTIONS = load_examples()


def stateful_model(style: str, attention: str, dtype=torch.float64):
    return make_model(STYLES[style], dtype=dtype, attention=attention)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("style", STYLES)
def test_stepping_equals_teacher_forcing_and_the_state_is_zero_at_padding(style, attention):
    model = stateful_model(style, attention)
    assert model.decoder.attention.stateful and not model.decoder.parallel
    src, src_len, _ = sources()
    tgt_in = torch.randint(4, 20, (len(src), 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, weights = model(src, src_len, tgt_in)
        mem, state = model.encode(src, src_len)
        for t in range(tgt_in.size(1)):
            step, state, w = model.step(tgt_in[:, t], state, mem, torch.full((len(src),), t))
            torch.testing.assert_close(step, logits[:, t])
            torch.testing.assert_close(w, weights[:, t])
            padding = ~mem.mask
            assert (state.attention[padding] == 0).all()
            assert state.attention.abs().sum() > 0


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("beam", [1, 4])
def test_translation_does_not_depend_on_the_batch(attention, beam):
    model = stateful_model("luong-if", attention)
    src, src_len, max_lens = sources()
    cfg = DecodeConfig(beam=beam, alpha=0.6)
    batched = beam_search(model, src, src_len, max_lens, cfg)
    for i in range(len(max_lens)):
        n = int(src_len[i])
        alone = beam_search(model, src[i : i + 1, :n], src_len[i : i + 1], max_lens[i : i + 1], cfg)
        assert alone[0][0].tokens == batched[i][0].tokens
        assert alone[0][0].score == pytest.approx(batched[i][0].score, rel=FLOAT32_SUMS)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("style", ["luong", "bahdanau"])
@pytest.mark.parametrize("beam", [1, 3])
def test_sentences_joining_and_leaving_a_pool_decode_as_alone(attention, style, beam):
    # room for 2 sentences: the others join at other positions with longer sources, so the
    # pool re-pads its memory and the states with it; finished ones leave and rows move
    model = stateful_model(style, attention)
    src, src_len, max_lens = many_sources(count=9)
    cfg = DecodeConfig(beam=beam, alpha=0.6)
    pooled = beam_search(model, src, src_len, max_lens, cfg, nbest=beam, batch=2)
    alone = beam_search(model, src, src_len, max_lens, cfg, nbest=beam, batch=1)
    for p, a in zip(pooled, alone, strict=True):
        assert [h.tokens for h in p] == [h.tokens for h in a]
        assert [h.score for h in p] == pytest.approx([h.score for h in a], rel=FLOAT32_SUMS)
        torch.testing.assert_close(p[0].attention, a[0].attention)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_beams_score_and_attend_as_teacher_forcing(attention):
    # beams reorder the state with their back-pointers: each hypothesis's log-probability is
    # the one the model gives its tokens alone
    model = stateful_model("bahdanau", attention)
    src, src_len, max_lens = many_sources()
    cfg = DecodeConfig(beam=3, length_penalty="gnmt", alpha=0.6)
    for i, hyps in enumerate(beam_search(model, src, src_len, max_lens, cfg, nbest=3, batch=3)):
        n = int(src_len[i])
        for h in hyps:
            forced = teacher_forced_log_prob(model, src[i : i + 1, :n], src_len[i : i + 1], h.tokens)
            assert h.log_prob == pytest.approx(forced, abs=1e-6)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_greedy_is_beam_one(attention):
    model = stateful_model("luong", attention)
    src, src_len, max_lens = sources()
    greedy = greedy_search(model, src, src_len, max_lens, DecodeConfig())
    beam = beam_search(model, src, src_len, max_lens, DecodeConfig(beam=1))
    assert [h.tokens for h in greedy] == [b[0].tokens for b in beam]


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("beam", [1, 3])
def test_fixed_rows_carry_the_state_across_buckets_as_the_pool_does(attention, beam):
    model = stateful_model("luong-if", attention)
    pooled, fixed = both(model, mixed_sources(30, 30, seed=2), DecodeConfig(beam=beam), batch=4, nbest=beam)
    for key, hyps in pooled.items():
        assert [h.tokens for h in fixed[key]] == [h.tokens for h in hyps]
        assert [h.score for h in fixed[key]] == pytest.approx([h.score for h in hyps], rel=FLOAT32_SUMS)


def test_a_state_fits_any_source_length_without_losing_a_position():
    state = torch.arange(6.0).view(2, 3)
    assert fit(state, 3) is state
    torch.testing.assert_close(fit(state, 5), torch.tensor([[0, 1, 2, 0, 0], [3, 4, 5, 0, 0.0]]))
    torch.testing.assert_close(fit(fit(state, 5), 3), state)
    h = torch.zeros(1, 2, 4)
    one, two = DecoderState(h, h, None, state), DecoderState(h, h, None, torch.ones(2, 5, 2)[..., 0])
    joined = one.join(two)
    assert joined.attention.shape == (4, 5) and (joined.attention[:2, 3:] == 0).all()
    assert joined.select(torch.tensor([3, 0])).attention.shape == (2, 5)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_every_parameter_learns(attention):
    model = stateful_model("luong", attention, dtype=torch.float32).train()
    src, src_len, _ = sources()
    tgt_in = torch.randint(4, 20, (len(src), 5), generator=torch.Generator().manual_seed(1))
    logits, _ = model(src, src_len, tgt_in)
    logits.logsumexp(-1).sum().backward()
    for name, param in model.decoder.attention.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
