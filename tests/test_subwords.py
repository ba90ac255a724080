"""Subword regularisation (`tokenizer.sampling_alpha`, `sampling_nbest`): each epoch segmented
afresh from the cached encoding by a worker process; the text of every pair unchanged, the
cache's pairs in its order, seeded (a resumed run trains on the same samples), unigram sampling
and BPE-dropout; with weighted corpora and their tags."""

import gc
import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from nmt.checkpoint import read_checkpoint
from nmt.cli import app
from nmt.config import load_config
from nmt.data.corpus import EncodedCorpus, Side
from nmt.data.prepare import prepare
from nmt.data.subwords import EpochSampler, Sampling, damage, sample_epoch
from nmt.data.tokenizer import TokenizerPair
from nmt.vocab import UNK
from tests.conftest import one_line_error
from tests.test_corpora import losses, train

runner = CliRunner()


def rows(side):
    return [side[i].tolist() for i in range(len(side))]


def sampled(data, sampling, seed, folder):
    """`sample_epoch` in this process, opened."""
    return EncodedCorpus.open(
        folder, sample_epoch(data.train, data.tokenizers.to_state(), sampling, seed, folder)
    )


@pytest.fixture(params=["unigram", "bpe"])
def prepared(request, toy_dir, tmp_path):
    alpha = 0.5 if request.param == "unigram" else 0.1
    overrides = [f"data.dir={toy_dir}", f"data.cache_dir={tmp_path}", f"tokenizer.type={request.param}"]
    cfg = load_config("toy-luong.yaml", [*overrides, f"tokenizer.sampling_alpha={alpha}"])
    return cfg, prepare(cfg, ()), Sampling(alpha, -1, cfg.data.max_len)


def test_a_sample_keeps_every_pairs_text_and_varies_its_pieces_by_seed(prepared, tmp_path):
    cfg, data, sampling = prepared
    state = data.tokenizers.to_state()
    first, again, other = (
        sample_epoch(data.train, state, sampling, seed, tmp_path / f"s{i}")
        for i, seed in enumerate((1, 1, 2))
    )
    from nmt.data.corpus import EncodedCorpus

    first, again, other = (
        EncodedCorpus.open(tmp_path / f"s{i}", layout) for i, layout in enumerate((first, again, other))
    )
    assert len(first) == len(data.train)  # the cache's pairs, in its order
    for side, tok in (("src", data.tokenizers.src), ("tgt", data.tokenizers.tgt)):
        cached, sampled = rows(getattr(data.train, side)), rows(getattr(first, side))
        assert rows(getattr(again, side)) == sampled  # seeded: the same draw in one process (another
        # process draws otherwise, whatever the seed: a resumed run reads its kept sample instead)
        assert rows(getattr(other, side)) != sampled
        assert sum(a != b for a, b in zip(cached, sampled, strict=True)) > len(cached) // 10
        assert tok.sp.decode(sampled) == tok.sp.decode(cached)  # the same text, other pieces
        assert max(map(len, sampled)) <= cfg.data.max_len


def test_a_sentence_with_the_unknown_piece_or_too_long_a_sample_keeps_its_cached_pieces(prepared):
    cfg, data, _ = prepared
    side = data.train.src.select(np.arange(50))
    cached = rows(side)
    cached[0] = [UNK, *cached[0]]

    tok = data.tokenizers.src
    with_unknown = Side.from_lists(cached)
    assert (
        rows(Sampling(0.1 if cfg.tokenizer.type == "bpe" else 0.5, -1, 80).sample(tok, with_unknown))[0]
        == cached[0]
    )
    shortest = min(map(len, cached[1:]))
    kept = rows(Sampling(0.1 if cfg.tokenizer.type == "bpe" else 0.5, -1, shortest).sample(tok, with_unknown))
    assert all(len(row) <= max(shortest, len(old)) for row, old in zip(kept, cached, strict=True))
    assert all(new == old for new, old in zip(kept, cached, strict=True) if len(old) > shortest)


def test_the_worker_draws_the_next_epoch_ahead_and_a_sample_on_disk_is_read_back(prepared, tmp_path):
    _, data, sampling = prepared
    sampler = EpochSampler(data.train, data.tokenizers, sampling, seed=7, folder=tmp_path / "sampled")
    sampler.draw(3)
    assert set(sampler.pending) == {4}  # epoch 4 is being drawn while 3 trains
    drawn = sampler.read(3)
    assert len(drawn) == len(data.train) and rows(drawn.src) != rows(data.train.src)
    again = EpochSampler(data.train, data.tokenizers, sampling, seed=7, folder=tmp_path / "sampled")
    again.draw(3)  # a resumed run: epoch 3 is read back, not drawn again
    assert rows(again.read(3).src) == rows(drawn.src) and set(again.pending) <= {4}
    sampler.draw(4)
    assert sorted(p.name for p in (tmp_path / "sampled").iterdir() if p.name.startswith("epoch-4")) == [
        "epoch-4"
    ]
    assert not (tmp_path / "sampled" / "epoch-3").exists() and set(sampler.pending) == {5}
    pool = sampler.pool
    del sampler, again, drawn
    gc.collect()
    with pytest.raises(ValueError):  # the worker stopped with the sampler
        pool.apply_async(print)


def test_a_sampled_run_with_weighted_corpora_resumes_on_the_pieces_it_was_training_on(toy_dir, tmp_path):
    """A run cut after 5 of an epoch's 8 batches (16 pairs each), copied, and both copies
    resumed to the end of the epoch: they train on the same kept sample, so alike to the bit;
    without sampling the losses differ."""
    run = ["tokenizer.sampling_alpha=0.5", "train.log_every=1", f"data.cache_dir={tmp_path / 'cache'}"]
    train(toy_dir, tmp_path / "cut", *run, "train.max_steps=5")
    sample = tmp_path / "cut" / "sampled" / "epoch-0"
    sources = rows(EncodedCorpus.open(sample, json.loads((sample / "layout.json").read_text())).src)
    tok = TokenizerPair.from_state(
        read_checkpoint(tmp_path / "cut" / "checkpoints" / "last.pt")["tokenizers"]
    )
    tag = tok.src.encode_batch(["<T>"])[0][-1]  # one piece, leading each source of the tagged corpus
    assert all(tag not in row for row in sources[:60]) and all(tag in row[:2] for row in sources[60:])
    shutil.copytree(tmp_path / "cut", tmp_path / "copy")
    for folder in ("cut", "copy"):
        more = ["--set", "train.max_steps=8", "-q"]
        resumed = runner.invoke(app, ["train", "--resume", str(tmp_path / folder), *more])
        assert resumed.exit_code == 0, resumed.output
    assert losses(tmp_path / "cut") == losses(tmp_path / "copy") and len(losses(tmp_path / "cut")) == 8
    train(toy_dir, tmp_path / "plain", *run[1:], "train.max_steps=8")
    assert losses(tmp_path / "plain") != losses(tmp_path / "cut")  # sampling changed what was trained on


def test_a_damaged_sample_is_drawn_again_with_a_warning_when_the_run_resumes(toy_dir, tmp_path):
    """The samples are nmt's own cache: one cut short since (issue 53) is removed and drawn
    afresh, with one line saying so, instead of ending the resumed run in a traceback."""
    run = ["tokenizer.sampling_alpha=0.5", f"data.cache_dir={tmp_path / 'cache'}"]
    train(toy_dir, tmp_path / "run", *run, "train.max_steps=3")
    sample = tmp_path / "run" / "sampled" / "epoch-0"
    tokens = sample / "src.tokens"
    tokens.write_bytes(tokens.read_bytes()[:100])
    resumed = runner.invoke(app, ["train", "--resume", str(tmp_path / "run"), "--set", "train.max_steps=5"])
    assert resumed.exit_code == 0, resumed.output
    (warning,) = [line for line in resumed.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith(f"warning: {tokens}: 100 bytes, not the ") and "sampled again" in warning
    assert warning in (tmp_path / "run" / "train.log").read_text()
    assert damage(sample) is None  # drawn whole again
    assert read_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["progress"]["step"] == 5


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["tokenizer.type=char", "tokenizer.sampling_alpha=0.1"], "needs type unigram or bpe"),
        (["tokenizer.type=bpe", "tokenizer.sampling_alpha=1.5"], "BPE's dropout probability: below 1"),
        (
            ["tokenizer.sampling_alpha=0.1", "tokenizer.sampling_nbest=0"],
            "tokenizer.sampling_nbest: must be -1",
        ),
        (["tokenizer.sampling_alpha=-0.1"], "tokenizer.sampling_alpha"),
    ],
)
def test_bad_sampling_settings_are_one_line(toy_dir, tmp_path, settings, message):
    one_line_error(train(toy_dir, tmp_path / "run", *settings, code=2), message)
    assert not (tmp_path / "run").exists()
