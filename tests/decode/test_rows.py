"""Fixed rows (`nmt.decode.rows`): the same hypotheses as the continuous pool at every window and
pool size, across source-length buckets, with a window of steps that never waits for the device
(what a CUDA graph may hold) and one read of the device a window."""

import dataclasses

import numpy as np
import pytest
import torch

from nmt.config import DecodeConfig
from nmt.decode import rows, vocabulary
from nmt.decode.search import Feed, search
from nmt.text.ranking import Source
from nmt.vocab import EOS, UNK
from tests.decode.test_host_traffic import PER_ENCODE, Counted, lasting
from tests.decode.test_search import FLOAT32_SUMS, STYLES, V, make_model
from tests.host_traffic import HostTraffic

CPU = torch.device("cpu")


def mixed_sources(count: int, longest: int, seed: int = 0) -> list[Source]:
    """Sources of 1 to `longest` ids in random order, so that the pool's longest source grows
    and shrinks across buckets while sentences join and leave."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, longest + 1, (count,), generator=g).tolist()
    lengths[count // 2] = longest
    items = []
    for i, n in enumerate(lengths):
        ids = torch.randint(4, V, (n,), generator=g).tolist()
        items.append(Source(i, ids[:-1] + [EOS], n + 6))
    return items


def both(model, items, cfg, batch, nbest=1, window=rows.WINDOW, kept=None):
    fits = lambda sentences, _: sentences <= batch  # noqa: E731
    pooled = dict(search(model, items, cfg, fits, CPU, nbest, attention=False))
    pools = (kept or rows.Kept()).pools(window)
    fixed = dict(search(model, items, cfg, fits, CPU, nbest, attention=False, pools=pools))
    assert sorted(fixed) == sorted(pooled) == list(range(len(items)))
    return pooled, fixed


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("window", [1, 8])
@pytest.mark.parametrize("batch", [2, 16])
def test_fixed_rows_find_what_the_continuous_pool_finds(style, beam, window, batch):
    model = make_model(STYLES[style], dtype=torch.float64)
    cfg = DecodeConfig(beam=beam, alpha=0.6)
    pooled, fixed = both(model, mixed_sources(40, 30), cfg, batch, nbest=beam, window=window)
    for key, hyps in pooled.items():
        assert [h.tokens for h in fixed[key]] == [h.tokens for h in hyps]
        assert [h.score for h in fixed[key]] == pytest.approx([h.score for h in hyps], rel=FLOAT32_SUMS)
        assert [h.log_prob for h in fixed[key]] == pytest.approx([h.log_prob for h in hyps], rel=FLOAT32_SUMS)


@pytest.mark.parametrize("beam", [1, 4])
def test_the_memory_moves_between_buckets_as_sources_join_and_leave(beam, monkeypatch):
    seen = []
    rebucket = rows.FixedRows.rebucket

    def recorded(self, longest, template):
        rebucket(self, longest, template)
        seen.append(self.bucket)

    monkeypatch.setattr(rows.FixedRows, "rebucket", recorded)
    model = make_model(STYLES["luong-if"], dtype=torch.float64)
    pooled, fixed = both(model, mixed_sources(40, 30, seed=1), DecodeConfig(beam=beam), batch=4)
    changes = [b for a, b in zip(seen, seen[1:], strict=False) if a != b]
    assert any(b > a for a, b in zip(seen, seen[1:], strict=False)), seen  # grew
    assert any(b < a for a, b in zip(seen, seen[1:], strict=False)), seen  # and shrank
    assert len(changes) > 2
    assert {k: [h.tokens for h in v] for k, v in fixed.items()} == {
        k: [h.tokens for h in v] for k, v in pooled.items()
    }


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("batch", [1, 4])
def test_a_shortlist_keeps_each_sentence_to_its_pieces_as_the_continuous_pool_does(beam, batch, monkeypatch):
    """The shortlist's columns on fixed rows (`FixedVocabulary`): a sentence's pieces get columns
    when it joins, the columns widen (another graph shape) and, once they are more than SLACK
    times the pool's own, start again (every sentence's mask anew), and every sentence decodes
    as in the continuous pool."""
    monkeypatch.setattr(vocabulary, "COLUMNS", 4)  # widths that change within 20 pieces
    monkeypatch.setattr(vocabulary, "SLACK", 1.0)  # and start again with sentences beside
    widths, restarts = [], []
    update = vocabulary.FixedVocabulary.update

    def watched(self, allowed, joining):
        before = len(self.ids)
        update(self, allowed, joining)
        widths.append(self.width)
        restarts.append(len(self.ids) < before)

    monkeypatch.setattr(vocabulary.FixedVocabulary, "update", watched)
    model = make_model(STYLES["luong-if"], dtype=torch.float64)
    with torch.no_grad():  # sentences of different lengths: blocks join while others go on
        model.decoder.output_layer.bias[EOS] -= 3.0
    items = []
    for item in mixed_sources(30, 10, seed=2):
        allowed = np.zeros(V, dtype=bool)
        allowed[[EOS, *(4 + (3 * item.key + j) % (V - 4) for j in range(5))]] = True  # a band of 5
        items.append(dataclasses.replace(item, vocabulary=allowed))
    pooled, fixed = both(model, items, DecodeConfig(beam=beam), batch, nbest=beam, window=2)
    for key, hyps in pooled.items():
        assert [h.tokens for h in fixed[key]] == [h.tokens for h in hyps]
        assert [h.score for h in fixed[key]] == pytest.approx([h.score for h in hyps], rel=FLOAT32_SUMS)
        assert all(items[key].vocabulary[t] for h in fixed[key] for t in h.tokens)
    assert any(b > a for a, b in zip(widths, widths[1:], strict=False)), widths
    assert any(restarts), restarts


def test_a_shortlist_s_columns_are_padded_to_a_few_widths():
    shortlist = vocabulary.FixedVocabulary(torch.nn.Linear(4, 8000), blocks=2, beam=1)
    widths = []
    for pieces in (1, 256, 257, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8000):
        shortlist.ids = np.arange(pieces)
        widths.append(shortlist.width // vocabulary.COLUMNS)
    assert widths == [1, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 32]  # 8,192 columns hold the 8,000 pieces


def test_source_buckets_pad_by_at_most_a_third():
    sizes = sorted({rows.source_bucket(n) for n in range(1, 300)})
    assert sizes[:8] == [8, 12, 16, 24, 32, 48, 64, 96]
    for n in range(9, 300):
        assert n <= rows.source_bucket(n) <= 1.5 * n


@pytest.mark.parametrize("beam", [1, 4])
def test_a_window_never_waits_for_the_device_and_the_host_reads_once_a_window(beam, monkeypatch):
    """What a CUDA graph may hold: nothing in a window reads the device or sends it host values
    (counted on the CPU, `tests.host_traffic`); outside the windows, one read each and what
    encoding the joining sentences costs."""
    in_windows, windows = [], []
    advance = rows.FixedRows.advance

    def watched(self):
        with HostTraffic() as seen:
            advance(self)
        in_windows.extend(seen.calls)
        windows.append(self.window)

    monkeypatch.setattr(rows.FixedRows, "advance", watched)
    counted = Counted(lasting(STYLES["luong-if"]))
    items = mixed_sources(30, 12)
    with HostTraffic() as seen:
        fits = lambda n, _: n <= 8  # noqa: E731
        results = list(
            search(counted, items, DecodeConfig(beam=beam), fits, CPU, 1, False, rows.Kept().pools())
        )
    assert len(results) == len(items)
    assert in_windows == []
    assert counted.steps == sum(windows) and len(windows) > 3
    assert seen.waits <= len(windows) + PER_ENCODE * counted.encodes, seen.calls


def test_a_live_feed_with_nothing_ready_is_asked_again():
    model = make_model(STYLES["luong"])
    items = mixed_sources(6, 8)

    def live():
        for item in items:
            yield None  # a server's queue between requests
            yield item

    fits = lambda n, _: n <= 4  # noqa: E731
    results = dict(search(model, live(), DecodeConfig(beam=2), fits, CPU, 1, False, rows.Kept().pools()))
    assert sorted(results) == list(range(6))


@pytest.mark.parametrize("beam", [1, 3])
def test_a_window_s_results_reach_a_live_feed_waiting_for_them(beam):
    # A window's results are handed out after the next window is launched; a pool left empty
    # must hand them out before asking the feed again, or a feed that waits for its answers (a
    # client sending a sentence once the last one is answered) is asked for ever.
    model = make_model(STYLES["luong"])
    items = mixed_sources(5, 8)
    answered: dict = {}

    def one_at_a_time():
        for item in items:
            yield item
            for _ in range(1000):
                if item.key in answered:
                    break
                yield None  # its answer is not in yet
            else:
                raise AssertionError(f"sentence {item.key} was never answered")

    fits = lambda n, _: n <= 4  # noqa: E731
    pools = rows.Kept().pools()
    for key, hyps in search(model, one_at_a_time(), DecodeConfig(beam=beam), fits, CPU, 1, False, pools):
        answered[key] = hyps
    assert sorted(answered) == list(range(5))


@pytest.mark.parametrize("beam", [1, 3])
def test_a_window_s_results_are_handed_out_once_the_next_window_runs(beam, monkeypatch):
    # On a GPU the caller's work on a window's results then runs beside the device's next window.
    model = make_model(STYLES["luong"])
    with torch.no_grad():  # sentences that end at their caps: 6 to 30 tokens, 1 to 4 windows
        model.decoder.output_layer.bias[EOS] -= 10.0
    items = [dataclasses.replace(s, max_len=8 * (s.key % 4) + 6) for s in mixed_sources(40, 12)]
    launched, collected = [0], {}
    run = rows.Steps.run

    def counted_run(self, bucket, window):
        launched[0] += 1
        run(self, bucket, window)

    def noted(collect):
        def collect_noting_the_window(self):
            for key, hyps in collect(self):
                collected[key] = launched[0]
                yield key, hyps

        return collect_noting_the_window

    monkeypatch.setattr(rows.Steps, "run", counted_run)
    for kind in (rows.FixedGreedy, rows.FixedBeam):
        monkeypatch.setattr(kind, "collect", noted(kind.collect))
    fits = lambda n, _: n <= 8  # noqa: E731
    found = search(model, items, DecodeConfig(beam=beam), fits, CPU, 1, False, rows.Kept().pools())
    handed = {key: launched[0] for key, _ in found}
    assert sorted(handed) == list(range(40))
    later = [key for key in handed if handed[key] == collected[key] + 1]
    assert all(handed[key] in (collected[key], collected[key] + 1) for key in handed)
    assert len(later) > 30  # all but those of the last windows, when the pool empties


def test_steered_sources_are_refused():
    model = make_model(STYLES["luong"])
    item = Source(0, [5, 6, 2], 8, include=[[7]])
    pool = rows.FixedGreedy(model, DecodeConfig(), CPU, False, rows.WINDOW, blocks=4)
    with pytest.raises(ValueError, match="without constraints"):
        list(pool.run(Feed([item], lambda n, _: True)))


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("batch", [2, 16])
def test_target_prefixes_are_forced_on_the_device_as_the_continuous_pool_forces_them(
    beam, batch, monkeypatch
):
    """A prefix token is the only one left to its rows, with the model's log-probability of it
    (forced from the device's count of tokens written, without the host); sentences with and
    without prefixes share the pool, and the first prefix may come after sentences without, in
    a pool whose last search forced prefixes in every block."""
    model = make_model(STYLES["luong-if"], dtype=torch.float64)
    cfg = DecodeConfig(beam=beam, alpha=0.6, min_len=4, allow_unk=False)
    g = torch.Generator().manual_seed(3)
    items = []
    for item in mixed_sources(30, 12, seed=3):
        length = 0 if item.key < 18 or item.key % 3 == 0 else item.key % 4 + 1
        prefix = torch.randint(3, V, (length,), generator=g).tolist()
        prefix = [
            UNK if token == EOS or item.key % 5 == 0 else token for token in prefix
        ]  # allow_unk forbids it
        items.append(dataclasses.replace(item, prefix=prefix))
    kept = rows.Kept()
    both(model, [dataclasses.replace(item, prefix=[5] * 12) for item in items], cfg, batch, beam, 1, kept)
    shapes = []
    run = rows.Steps.run
    monkeypatch.setattr(
        rows.Steps, "run", lambda self, shape, window: shapes.append(shape) or run(self, shape, window)
    )
    pooled, fixed = both(model, items, cfg, batch, nbest=beam, window=1, kept=kept)
    for key, hyps in pooled.items():
        assert [h.tokens for h in fixed[key]] == [h.tokens for h in hyps]
        assert [h.score for h in fixed[key]] == pytest.approx([h.score for h in hyps], rel=FLOAT32_SUMS)
        assert all(h.tokens[: len(items[key].prefix)] == items[key].prefix for h in fixed[key])
    assert any(UNK in item.prefix for item in items)  # a forced token the settings forbid
    assert not shapes[0][2] and shapes[-1][2]  # forcing from the first prefix on: a graph shape of its own


@pytest.mark.parametrize(
    ("setting", "device", "attention", "chosen"),
    [
        ("auto", "cpu", False, False),  # the continuous pool wins on a CPU (docs/performance.md)
        ("auto", "cuda", False, True),
        ("fixed", "cpu", False, True),
        ("fixed", "cpu", True, False),  # attention is kept a step at a time
        ("pooled", "cuda", False, False),
    ],
)
def test_fixed_rows_are_chosen_on_a_gpu_or_when_asked(setting, device, attention, chosen):
    model = make_model(STYLES["luong"])
    cfg = DecodeConfig(rows=setting)
    assert rows.suits(model, cfg, torch.device(device), attention) is chosen
    assert not rows.suits(model, DecodeConfig(rows=setting, no_repeat_ngram=2), torch.device(device), False)
    assert not rows.suits(Counted(model), cfg, torch.device(device), False)  # not a plain Seq2Seq
    tokens = DecodeConfig(rows=setting, batch_type="tokens", batch_size=2000)
    assert not rows.suits(model, tokens, torch.device(device), False)  # the first group would size it


def test_the_translator_takes_fixed_rows_only_for_unconstrained_sources(
    translating_model, toy_dir, monkeypatch
):
    from nmt import Translator

    lines = (toy_dir / "test.human").read_text(encoding="utf-8").splitlines()[:20]
    translator = Translator.load(translating_model.last, device="cpu", beam=3, rows="fixed")
    calls = []
    fixed_pools = rows.Kept.pools
    monkeypatch.setattr(rows.Kept, "pools", lambda *a, **k: calls.append(1) or fixed_pools(*a, **k))
    fixed = [t.text for t in translator.translate(lines, attention=False)]
    assert calls == [1]
    pooled = [t.text for t in translator.translate(lines, attention=False, rows="pooled")]
    assert fixed == pooled
    prefixes = [" ".join(text.split()[:1]) for text in fixed]
    prefixed = translator.translate(lines, attention=False, prefixes=prefixes)
    assert calls == [1, 1]  # target prefixes: fixed rows
    pooled = translator.translate(lines, attention=False, prefixes=prefixes, rows="pooled")
    assert [t.text for t in prefixed] == [t.text for t in pooled]
    translator.translate(lines, attention=False, constraints=[{}] * len(lines))  # may steer: pooled
    translator.translate(lines)  # attention kept: pooled
    assert calls == [1, 1]


def test_pools_have_a_power_of_two_blocks_up_to_the_batch():
    def blocks(sources, batch=64):
        return rows.pool_blocks(Feed(sources, lambda n, _: n <= batch), batch)

    items = mixed_sources(100, 8)
    assert [blocks(items[:n]) for n in (1, 2, 3, 5, 40, 64)] == [1, 2, 4, 8, 64, 64]
    assert blocks(items) == 64
    assert blocks([None, *items[:3]]) == 64  # a live feed with none ready yet
    assert blocks([items[0], None, *items[1:3]]) == 64  # a server's first request: more will come


def test_a_translator_keeps_its_pools_between_searches(translating_model, toy_dir):
    """Each shape's pool (and on a GPU its graphs) is made once: later searches of that shape
    decode in it, others in their own; a search left unfinished leaves it as good as new;
    weights changed in place are read, and weights elsewhere get a pool of their own."""
    from nmt import Translator

    lines = (toy_dir / "test.human").read_text(encoding="utf-8").splitlines()[:20]
    translator = Translator.load(translating_model.last, device="cpu", beam=3, rows="fixed")
    first = [t.text for t in translator.translate(lines, attention=False)]
    (pool,) = translator.kept.kept.values()
    assert len(pool.blocks) == 32  # 20 sentences at batch 64
    assert [t.text for t in translator.translate(lines, attention=False)] == first
    assert list(translator.kept.kept.values()) == [pool]

    translator.translate(lines[:3], attention=False)  # 4 blocks: a pool of its own
    translator.translate(lines, attention=False, beam=1)  # greedy, through a configured copy
    assert len(translator.kept.kept) == 3 and pool in translator.kept.kept.values()

    unfinished = translator.iter_translate(lines, attention=False)
    next(unfinished)
    unfinished.close()
    assert [t.text for t in translator.translate(lines, attention=False)] == first

    with torch.no_grad():
        for parameter in translator.model.parameters():
            parameter.mul_(1.5)  # in place, as an optimiser step: the same pool reads them
    changed = [t.text for t in translator.translate(lines, attention=False)]
    assert changed == [t.text for t in translator.translate(lines, attention=False, rows="pooled")]
    assert changed != first
    assert len(translator.kept.kept) == 3

    embedding = translator.model.decoder.embed.weight
    embedding.data = embedding.data.clone()  # the same values elsewhere: another pool
    assert [t.text for t in translator.translate(lines, attention=False)] == changed
    assert len(translator.kept.kept) == 4 and pool in translator.kept.kept.values()


def test_n_best_and_prefixes_decode_over_fixed_rows_and_constraints_fall_back(
    translating_model, toy_dir, monkeypatch
):
    """What the cuda test of the same name checks on a GPU, with fixed rows asked for on the CPU."""
    check_fixed_rows_routing(translating_model, toy_dir, monkeypatch, "cpu", rows="fixed")


def check_fixed_rows_routing(translating_model, toy_dir, monkeypatch, device: str, **settings) -> None:
    from nmt import Translator
    from nmt.decode import rows

    lines = (toy_dir / "test.human").read_text(encoding="utf-8").splitlines()[:30]
    translator = Translator.load(translating_model.last, device=device, beam=4, **settings)
    calls = []
    pools = rows.Kept.pools
    monkeypatch.setattr(rows.Kept, "pools", lambda *a, **k: calls.append(1) or pools(*a, **k))
    fixed = translator.translate(lines, nbest=3, attention=False)
    assert calls == [1]
    pooled = translator.translate(lines, nbest=3, attention=False, rows="pooled")
    same = sum(
        [h.tokens for h in f.hypotheses] == [h.tokens for h in p.hypotheses]
        for f, p in zip(fixed, pooled, strict=True)
    )
    assert same >= 0.9 * len(lines) and all(len(t.hypotheses) == 3 for t in fixed)
    prefixes = [t.text.split()[0] if i % 2 else "" for i, t in enumerate(fixed)]
    prefixed = translator.translate(lines, nbest=3, attention=False, prefixes=prefixes)
    assert calls == [1, 1]  # target prefixes: fixed rows, forced on the device
    assert all(text.startswith(p) for p, t in zip(prefixes, prefixed, strict=True) for text in t.texts)
    phrases = [t.text.split()[-1] for t in fixed[:5]]
    constrained = translator.translate(
        lines[:5], attention=False, constraints=[{"constraints": [p]} for p in phrases]
    )
    assert calls == [1, 1]  # the continuous pool
    assert all(p in t.text.split() for p, t in zip(phrases, constrained, strict=True))


def test_a_kept_pool_holds_nothing_of_a_search_and_one_that_failed_is_dropped(monkeypatch):
    """Between two searches a kept pool holds no sources or encoder outputs; a search that
    failed (out of memory in a window, say) may leave a half-made graph, so its pool goes."""
    model = make_model(STYLES["luong"])
    kept = rows.Kept()
    items = mixed_sources(6, 8)
    fits = lambda n, _: n <= 4  # noqa: E731
    assert len(dict(search(model, items, DecodeConfig(beam=2), fits, CPU, 1, False, kept.pools()))) == 6
    (pool,) = kept.kept.values()
    assert pool.feed is None and pool.encoded.mem is None and pool.encoded.sources == []

    def failing(self, j):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(rows.FixedBeam, "one_step", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        list(search(model, items, DecodeConfig(beam=2), fits, CPU, 1, False, kept.pools()))
    assert not kept.kept
