"""Search invariants: beam 1 = greedy, batch independence (sentences joining a search under way
included), honest scores, an exact early stop, exact small searches."""

import itertools
import typing
from dataclasses import dataclass

import pytest
import torch

from nmt.allocator import FreePages
from nmt.config import AttentionType, DecodeConfig, config_from_dict
from nmt.decode.ensemble import Ensemble
from nmt.decode.search import search
from nmt.model.seq2seq import Seq2Seq
from nmt.text.ranking import Source, coverage_penalty, length_penalty
from nmt.vocab import BOS, EOS, PAD, UNK

V = 20
STYLES = {
    "luong": {"style": "luong"},
    "luong-if": {"style": "luong", "input_feeding": True},
    "bahdanau": {"style": "bahdanau", "bridge": "backward", "output": "maxout"},
}


def make_model(decoder: dict, seed: int = 0, dtype=torch.float32, attention: str = "bahdanau") -> Seq2Seq:
    raw = {
        "data": {"src_lang": "a", "tgt_lang": "b"},
        "model": {
            "embedding": 16,
            "encoder": {"hidden": 16},
            "decoder": {"hidden": 32, **decoder},
            "attention": {"type": attention, "window": 1},  # a window narrower than the sources
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


def decode(model, src, src_len, max_lens, cfg, nbest=1, batch=64, attention=True):
    """The n-best lists of the sentences of `src`, in order, at most `batch` sentences a step."""
    items = [Source(i, src[i, : int(src_len[i])].tolist(), m) for i, m in enumerate(max_lens)]
    fits = lambda sentences, longest: sentences <= batch  # noqa: E731
    results = dict(search(model, items, cfg, fits, torch.device("cpu"), nbest, attention))
    return [results[i] for i in range(len(items))]


def greedy_search(model, src, src_len, max_lens, cfg, batch=64):
    return [h for (h,) in decode(model, src, src_len, max_lens, cfg, batch=batch)]


def beam_search(model, src, src_len, max_lens, cfg, nbest=1, batch=64):
    return decode(model, src, src_len, max_lens, cfg, nbest, batch)


def many_sources(seed: int = 0, count: int = 9):
    """More sentences than the batch holds, of mixed lengths, so that some join mid-search."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (count,), generator=g)
    src = torch.randint(4, V, (count, 8), generator=g)
    src[torch.arange(8)[None, :] >= lengths[:, None]] = PAD
    src[torch.arange(count), lengths - 1] = EOS
    return src, lengths, [int(n) + 6 for n in lengths]


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
    greedy = greedy_search(model, src, src_len, max_lens, DecodeConfig())
    beam = beam_search(model, src, src_len, max_lens, DecodeConfig(beam=1))
    assert [h.tokens for h in greedy] == [b[0].tokens for b in beam]
    for g, (b,) in zip(greedy, beam, strict=True):
        assert g.log_prob == pytest.approx(b.log_prob, abs=1e-5)


FLOAT32_SUMS = 1e-6  # a score sums float32 log-probabilities, each within 6e-8 of its own


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("beam", [1, 4])
def test_translation_does_not_depend_on_the_batch(style, beam):
    model = make_model(STYLES[style], dtype=torch.float64)
    src, src_len, max_lens = sources()
    cfg = DecodeConfig(beam=beam, alpha=0.6)
    batched = beam_search(model, src, src_len, max_lens, cfg)
    for i in range(len(max_lens)):
        n = int(src_len[i])
        alone = beam_search(model, src[i : i + 1, :n], src_len[i : i + 1], max_lens[i : i + 1], cfg)
        assert alone[0][0].tokens == batched[i][0].tokens
        # float32 log-softmax (search.py): a float64 logit that differs in its last bit between
        # batch shapes (AVX2 kernels block products by shape) may round to a neighbouring float32
        assert alone[0][0].score == pytest.approx(batched[i][0].score, rel=FLOAT32_SUMS)
        torch.testing.assert_close(alone[0][0].attention, batched[i][0].attention[:, :n])


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("batch", [2, 16])
def test_sentences_joining_a_search_under_way_decode_as_alone(style, beam, batch):
    # Continuous batching: with room for 2 (or 16) sentences, the others join as others finish,
    # at other target positions and with longer sources (the pool's memory is re-padded).
    model = make_model(STYLES[style], dtype=torch.float64)
    if batch > 2:  # EOS less likely: sentences finish a few at a time, at most steps
        with torch.no_grad():
            model.decoder.output_layer.bias[EOS] -= 2.5
    src, src_len, max_lens = many_sources(count=9 if batch == 2 else 50)
    cfg = DecodeConfig(beam=beam, alpha=0.6)
    pooled = beam_search(model, src, src_len, max_lens, cfg, nbest=beam, batch=batch)
    alone = beam_search(model, src, src_len, max_lens, cfg, nbest=beam, batch=1)
    for p, a in zip(pooled, alone, strict=True):
        assert [h.tokens for h in p] == [h.tokens for h in a]
        assert [h.score for h in p] == pytest.approx([h.score for h in a], rel=FLOAT32_SUMS)
        torch.testing.assert_close(p[0].attention, a[0].attention)


class RecordingModel:
    """A StepModel that records the sentences of each encoder call and the rows of each step."""

    def __init__(self, model):
        self.model, self.groups, self.widths = model, [], []

    def encode(self, src, src_len):
        self.groups.append(len(src))
        return self.model.encode(src, src_len)

    def step(self, y, state, mem, positions, vocabulary=None):
        self.widths.append(len(y))
        return self.model.step(y, state, mem, positions)

    @property
    def rows(self) -> int:
        """Decoder row-steps so far."""
        return sum(self.widths)


def test_beam_steps_run_at_full_width_while_sentences_wait():
    # Beam search refills as soon as a sentence leaves: the width (so every tensor's size) stays
    # constant until the input runs out, then only shrinks. Greedy refills at an eighth.
    widths = {}
    for beam in (1, 3):
        model = make_model(STYLES["luong"])
        with torch.no_grad():  # EOS rare: sentences run to their length caps, which differ
            model.decoder.output_layer.bias[EOS] = -1e4
        recorder = RecordingModel(model)
        src, src_len, max_lens = many_sources(count=60)
        beam_search(recorder, src, src_len, max_lens, DecodeConfig(beam=beam), batch=16)
        assert recorder.groups == [60]  # the 16 joining first and those after them: one call
        widths[beam] = [width // beam for width in recorder.widths]
    tail = next(i for i, width in enumerate(widths[3]) if width < 16)
    assert tail > 0 and all(a >= b for a, b in itertools.pairwise(widths[3][tail:]))
    # greedy: refilled once 2 of the 16 have left, so its width dips and rises again
    assert 14 in widths[1] and any(a < b for a, b in itertools.pairwise(widths[1]))


def test_greedy_search_hands_free_pages_back_past_eight_steps_of_log_probabilities(monkeypatch):
    # Greedy's pool asks the allocator to release free pages after every step, past a limit
    # set by its widest step (nmt.allocator.FreePages; a no-op off tcmalloc); beam search's
    # pool keeps its width, and never does.
    limits = []
    monkeypatch.setattr(FreePages, "trim", lambda self, limit: limits.append(limit))
    model = make_model(STYLES["luong"])
    src, src_len, max_lens = many_sources(count=20)
    beam_search(model, src, src_len, max_lens, DecodeConfig(), batch=8)
    assert len(limits) > 1 and set(limits) == {8 * 8 * V * 4}  # 8 rows of V fp32 log-probabilities
    limits.clear()
    beam_search(model, src, src_len, max_lens, DecodeConfig(beam=3), batch=8)
    assert not limits


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("penalty", ["raw", "gnmt"])
def test_the_best_only_search_stops_early_and_finds_the_same_best(style, penalty):
    # nbest 1 stops a sentence once its best finished hypothesis beats every live bound; waiting
    # for K finished ones (what an n-best list of K needs) must not find a better one.
    model = RecordingModel(make_model(STYLES[style], dtype=torch.float64))
    src, src_len, max_lens = many_sources(seed=3)
    cfg = PENALTIES[penalty]
    best_only = beam_search(model, src, src_len, max_lens, cfg, nbest=1)
    early = model.rows
    full = beam_search(model, src, src_len, max_lens, cfg, nbest=cfg.beam)
    assert [b[0].tokens for b in best_only] == [f[0].tokens for f in full]
    assert [b[0].score for b in best_only] == [f[0].score for f in full]
    assert early < model.rows - early  # fewer decoder row-steps


def test_attention_is_kept_only_when_asked():
    model = make_model(STYLES["luong"])
    src, src_len, max_lens = sources()
    for cfg in (DecodeConfig(), DecodeConfig(beam=3)):
        bare = decode(model, src, src_len, max_lens, cfg, attention=False)
        kept = decode(model, src, src_len, max_lens, cfg)
        assert all(h.attention is None for hyps in bare for h in hyps)
        assert [h.tokens for hyps in bare for h in hyps] == [h.tokens for hyps in kept for h in hyps]
    covered = decode(model, src, src_len, max_lens, DecodeConfig(beam=3, coverage=0.2), attention=False)
    assert all(h.attention is not None for hyps in covered for h in hyps)  # the penalty needs it


@torch.no_grad()
def teacher_forced_attention(model, src, src_len, tokens):
    _, weights = model(src, src_len, torch.tensor([[BOS, *tokens[:-1]]]))
    return weights[0]


PENALTIES = {
    "raw": DecodeConfig(beam=3),
    "gnmt": DecodeConfig(beam=3, alpha=1.0),
    "avg": DecodeConfig(beam=3, alpha=1.0, length_penalty="avg"),
    "coverage": DecodeConfig(beam=3, alpha=0.6, coverage=0.4),
}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("penalty", PENALTIES)
def test_scores_are_the_models_log_probabilities(style, penalty):
    cfg = PENALTIES[penalty]
    model = make_model(STYLES[style], dtype=torch.float64)
    src, src_len, max_lens = sources()
    results = beam_search(model, src, src_len, max_lens, cfg, nbest=3)
    ended = 0
    for i, hyps in enumerate(results):
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        n = int(src_len[i])
        for h in hyps:
            ended += h.tokens[-1] == EOS
            assert h.tokens[-1] == EOS or len(h.tokens) == max_lens[i]
            assert EOS not in h.tokens[:-1]
            assert h.attention.shape == (len(h.tokens), n)
            one_src, one_len = src[i : i + 1, :n], src_len[i : i + 1]
            expected = teacher_forced_log_prob(model, one_src, one_len, h.tokens)
            assert h.log_prob == pytest.approx(expected, abs=1e-6)
            attention = teacher_forced_attention(model, one_src, one_len, h.tokens)
            torch.testing.assert_close(h.attention[:, :n], attention.float(), atol=1e-5, rtol=1e-5)
            normalised = expected / length_penalty(len(h.tokens), cfg) + coverage_penalty(attention, n, cfg)
            assert h.score == pytest.approx(normalised, abs=1e-5)
    assert ended > 0  # the test covers hypotheses that stopped on EOS


@pytest.mark.parametrize("penalty", ["raw", "gnmt"])
def test_hypotheses_traced_back_at_the_end_are_those_scored_when_they_ended(penalty):
    # Without attention a finished hypothesis is traced back only if it is among the n-best: the
    # same tokens, scores and order as when attention has every one traced as it ends.
    model = make_model(STYLES["luong"], dtype=torch.float64)
    src, src_len, max_lens = many_sources()
    cfg = PENALTIES[penalty]
    traced = decode(model, src, src_len, max_lens, cfg, nbest=3, batch=4, attention=True)
    deferred = decode(model, src, src_len, max_lens, cfg, nbest=3, batch=4, attention=False)
    for i, (now, later) in enumerate(zip(traced, deferred, strict=True)):
        assert [(h.tokens, h.score, h.log_prob) for h in later] == [
            (h.tokens, h.score, h.log_prob) for h in now
        ]
        one_src, one_len = src[i : i + 1, : int(src_len[i])], src_len[i : i + 1]
        for h in later:
            assert h.log_prob == pytest.approx(
                teacher_forced_log_prob(model, one_src, one_len, h.tokens), abs=1e-6
            )


@pytest.mark.parametrize("attention", sorted(typing.get_args(AttentionType)))
def test_beams_sharing_one_memory_score_like_teacher_forcing(attention):
    # The K beams of a sentence read one copy of its memory (as K query positions, or repeated
    # for local-m); every hypothesis must still score and attend as the model does alone.
    model = make_model({"style": "luong", "input_feeding": True}, dtype=torch.float64, attention=attention)
    src, src_len, max_lens = many_sources()
    results = beam_search(model, src, src_len, max_lens, PENALTIES["gnmt"], nbest=3, batch=3)
    for i, hyps in enumerate(results):
        n = int(src_len[i])
        one_src, one_len = src[i : i + 1, :n], src_len[i : i + 1]
        for h in hyps:
            assert h.log_prob == pytest.approx(
                teacher_forced_log_prob(model, one_src, one_len, h.tokens), abs=1e-6
            )
            expected = teacher_forced_attention(model, one_src, one_len, h.tokens).float()
            torch.testing.assert_close(h.attention[:, :n], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_min_len_no_repeat_and_no_unk_are_respected(search):
    model = make_model(STYLES["luong"])
    with torch.no_grad():
        model.decoder.output_layer.bias[UNK] += 3.0  # tempt it
    src, src_len, max_lens = sources()
    cfg = DecodeConfig(beam=1 if search == "greedy" else 4, min_len=4, no_repeat_ngram=2, allow_unk=False)
    if search == "greedy":
        hyps = greedy_search(model, src, src_len, max_lens, cfg)
    else:
        hyps = [h for nb in beam_search(model, src, src_len, max_lens, cfg, nbest=4) for h in nb]
    for h in hyps:
        assert UNK not in h.tokens
        assert len(h.tokens) >= min(4, max(max_lens))
        bigrams = list(zip(h.tokens, h.tokens[1:], strict=False))
        assert len(bigrams) == len(set(bigrams)), h.tokens
    unrestricted = greedy_search(model, src, src_len, max_lens, DecodeConfig())
    assert any(UNK in h.tokens for h in unrestricted)  # the restriction did something


def test_an_ensemble_of_one_model_twice_decodes_like_the_model():
    model = make_model(STYLES["luong-if"])
    src, src_len, max_lens = sources()
    cfg = DecodeConfig(beam=3, alpha=0.6)
    alone = beam_search(model, src, src_len, max_lens, cfg)
    pair = beam_search(Ensemble([model, model]), src, src_len, max_lens, cfg, batch=2)
    assert [h[0].tokens for h in alone] == [h[0].tokens for h in pair]
    for a, p in zip(alone, pair, strict=True):
        assert a[0].score == pytest.approx(p[0].score, abs=1e-5)


def test_an_ensemble_averages_log_probabilities():
    a, b = (
        make_model(STYLES["luong"], seed=1, dtype=torch.float64),
        make_model(STYLES["bahdanau"], seed=2, dtype=torch.float64),
    )
    src, src_len, max_lens = sources()
    (hyp,) = greedy_search(Ensemble([a, b]), src[:1, :5], src_len[:1], max_lens[:1], DecodeConfig())
    tgt_in = torch.tensor([[BOS, *hyp.tokens[:-1]]])
    with torch.no_grad():
        mean = (
            torch.log_softmax(a(src[:1, :5], src_len[:1], tgt_in)[0], -1)
            + torch.log_softmax(b(src[:1, :5], src_len[:1], tgt_in)[0], -1)
        ) / 2
    logp = torch.log_softmax(mean[0], -1)  # a log-linear ensemble renormalises the mean
    assert hyp.log_prob == pytest.approx(
        float(logp[torch.arange(len(hyp.tokens)), hyp.tokens].sum()), abs=1e-6
    )


# -- exact search on a tiny fake model: beam search with a wide beam must find the optimum ------
@dataclass
class FakeState:
    h: torch.Tensor

    def select(self, index):
        return FakeState(self.h[index])

    def join(self, other):
        return FakeState(torch.cat([self.h, other.h]))


class FakeMemory:
    def rows(self, index, length):
        return self

    def compact(self, rows, holes, fillers):
        return self

    def share(self, beams):
        return self

    def join(self, other, longest):
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

    def step(self, y, state, mem, t, vocabulary=None):
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
@pytest.mark.parametrize("penalty,alpha", [("gnmt", 0.0), ("gnmt", 0.8), ("gnmt", 2.0), ("avg", 1.0)])
def test_a_wide_beam_finds_the_exact_optimum(seed, penalty, alpha):
    cfg = DecodeConfig(beam=32, alpha=alpha, length_penalty=penalty)
    model, max_len = FakeModel(seed), 5
    src = torch.tensor([[seed + 7]])
    candidates = [[*body, EOS] for n in range(max_len) for body in itertools.product([4, 5], repeat=n)]
    candidates += [list(body) for body in itertools.product([4, 5], repeat=max_len)]  # capped
    start = int(src.sum()) % 997
    best = max(candidates, key=lambda c: model.log_prob(start, c) / length_penalty(len(c), cfg))
    (found,) = beam_search(model, src, torch.tensor([1]), [max_len], cfg)[0]
    assert found.tokens == best


def test_gradients_stay_on_in_the_caller_between_results():
    # The search switches gradients off only while it runs, not in the code consuming it.
    model = make_model(STYLES["luong"])
    src, src_len, max_lens = sources()
    items = [Source(i, src[i, : int(src_len[i])].tolist(), m) for i, m in enumerate(max_lens)]
    results = search(model, items, DecodeConfig(), lambda n, longest: n <= 1, torch.device("cpu"))
    key, _ = next(results)
    assert torch.is_grad_enabled()
    assert sorted([key, *(k for k, _ in results)]) == list(range(len(items)))
