"""The batcher in process, with a real model: jobs of many clients and settings share pools that
admit them as they come, and each job gets exactly its own translations."""

import asyncio

import pytest

from nmt import Translator
from nmt.serve.batcher import Batcher, Settings
from tests.test_end_to_end import train_toy


@pytest.fixture(scope="module")
def translator(toy_dir, tmp_path_factory):
    run = train_toy(
        toy_dir, tmp_path_factory.mktemp("batcher") / "run", "train.max_steps=30", "data.max_len=12"
    )
    return Translator.load(run, device="cpu")


@pytest.fixture()
def lines(toy_dir):
    return (toy_dir / "test.human").read_text().splitlines()[:40]


async def submit_all(batcher: Batcher, jobs: list[tuple[Settings, list[str]]], stagger: float):
    """Submit every job (one every `stagger` seconds, so later ones join a pool under way)."""
    futures = []
    for settings, sentences in jobs:
        futures.append(batcher.submit(settings, sentences)[1])
        await asyncio.sleep(stagger)
    return await asyncio.gather(*futures)


@pytest.mark.parametrize("stagger", [0.0, 0.005])
@pytest.mark.parametrize("rows", ["pooled", "fixed"])
def test_every_job_gets_exactly_its_own_translations(translator, lines, stagger, rows, monkeypatch):
    """Plain requests (no attention, markup or constraints) share pools of their own, which on a
    GPU (`rows: fixed` here) run over fixed rows, fed live."""
    from nmt.decode import rows as fixed_rows

    searches = []
    pools = fixed_rows.Kept.pools
    monkeypatch.setattr(fixed_rows.Kept, "pools", lambda *a, **k: searches.append(1) or pools(*a, **k))
    greedy, beam = Settings("toy", 1, 1, None), Settings("toy", 3, 2, None)
    plain_greedy, plain_beam = (
        Settings("toy", 1, 1, None, plain=True),
        Settings("toy", 3, 2, None, plain=True),
    )
    kinds = [greedy, beam, plain_greedy, plain_beam]
    jobs = [(kinds[i % 4] if i % 3 else beam, lines[i : i + 1 + i % 4]) for i in range(0, 36, 2)]
    jobs.append((plain_greedy, ["", lines[0], ""]))  # empty lines are answered in place
    jobs.append((plain_beam, lines))  # wider than the pool: its sentences join as rows free up
    batcher = Batcher({"toy": translator.configured(rows=rows)}, max_batch=8, max_wait_ms=1)
    batcher.start()
    try:
        answers = asyncio.run(submit_all(batcher, jobs, stagger))
    finally:
        batcher.close()
    for (settings, sentences), answer in zip(jobs, answers, strict=True):
        alone = translator.translate(sentences, settings.nbest, beam=settings.beam)
        assert [t.texts for t in answer] == [t.texts for t in alone]
        assert all((t.hypotheses[0].attention is None) == settings.plain for t in answer if t.hypotheses)
    assert batcher.waiting == 0
    assert bool(searches) == (rows == "fixed")


def test_fixed_rows_fed_live_are_as_wide_as_the_server_s_batch(translator, lines):
    """A fixed-row pool that one request starts takes --max-batch rows: more requests come while
    it decodes, and they join it rather than pass through it a sentence at a time."""
    from nmt.decode import rows

    fixed = translator.configured(rows="fixed")
    fixed.kept = rows.Kept()  # this test's pools alone
    batcher = Batcher({"toy": fixed}, max_batch=8, max_wait_ms=0)
    batcher.start()
    plain = Settings("toy", 1, 1, None, plain=True)
    try:
        answers = asyncio.run(submit_all(batcher, [(plain, [line]) for line in lines[:16]], stagger=0.01))
    finally:
        batcher.close()
    assert [a[0].text for a in answers] == [t.text for t in translator.translate(lines[:16])]
    assert [len(pool.blocks) for pool in fixed.kept.kept.values()] == [8]


def test_close_answers_what_is_queued(translator, lines):
    batcher = Batcher({"toy": translator}, max_batch=4)
    batcher.start()

    async def main():
        futures = [batcher.submit(Settings("toy", 1, 1, None), [line])[1] for line in lines[:10]]
        await asyncio.to_thread(batcher.close)
        return await asyncio.gather(*futures)

    assert [t[0].text for t in asyncio.run(main())] == [t.text for t in translator.translate(lines[:10])]


def test_a_job_the_tokenizer_refuses_fails_alone(translator, lines):
    # A lone surrogate (parse_translate refuses it; here it reaches the batcher) made SentencePiece
    # raise inside the pool, and every job decoded with it was answered 500.
    batcher = Batcher({"toy": translator}, max_batch=8, max_wait_ms=200)  # the three share a pool
    batcher.start()
    settings = Settings("toy", 1, 1, None)

    async def main():
        futures = [
            batcher.submit(settings, sentences)[1] for sentences in (lines[:2], ["\ud800"], lines[2:4])
        ]
        return await asyncio.gather(*futures, return_exceptions=True)

    try:
        first, bad, last = asyncio.run(main())
    finally:
        batcher.close()
    assert isinstance(bad, TypeError)
    assert [t.text for t in first + last] == [t.text for t in translator.translate(lines[:4])]
