"""Weighted corpora (`data.corpora`): each epoch draws from every corpus in the ratio of its
weight, every pair once before any twice; tags are one piece before each source; the shares are
logged; a resumed run draws the same; bad weights and tags are refused in one line."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from nmt.checkpoint import read_checkpoint
from nmt.cli import app
from nmt.data.batching import weighted_order
from nmt.data.corpus import EncodedCorpus
from nmt.data.tokenizer import TokenizerPair
from nmt.rundir import read_metrics
from tests.conftest import one_line_error, sets
from tests.test_end_to_end import TINY

runner = CliRunner()
# The toy corpus's validation and test splits as two training corpora: 60 pairs each, the second
# tagged and drawn three times as often; 8 batches of 16 an epoch, so 20 steps cross epochs.
CORPORA = '[{"train": "valid", "weight": 1}, {"train": "test", "weight": 3, "tag": "<T>"}]'
RUN = [*TINY, f"data.corpora={CORPORA}", "train.batch_size=16", "train.log_every=2", "train.valid_every=10"]


def parts_of(order: np.ndarray, parts: list[int]) -> list[int]:
    return np.bincount(np.searchsorted(np.cumsum(parts), order, side="right"), minlength=len(parts)).tolist()


@pytest.mark.parametrize(
    ("parts", "weights"), [([60, 60], [1, 3]), ([100, 7, 30], [1, 1, 2]), ([5, 1000], [9, 1])]
)
def test_an_epoch_draws_each_corpus_in_the_ratio_of_its_weight(parts, weights):
    order = weighted_order(parts, weights, seed=1, epoch=0)
    total = sum(parts)
    assert len(order) == total
    expected = np.asarray(weights) / sum(weights) * total
    assert all(abs(n - e) < 1 for n, e in zip(parts_of(order, parts), expected, strict=True))
    start = 0
    for size, count in zip(parts, parts_of(order, parts), strict=True):  # once before twice
        mine = order[(order >= start) & (order < start + size)]
        times = np.bincount(mine - start, minlength=size)
        assert times.max() - times.min() <= 1 and times.sum() == count
        start += size
    assert np.array_equal(order, weighted_order(parts, weights, seed=1, epoch=0))
    assert not np.array_equal(order, weighted_order(parts, weights, seed=1, epoch=1))


def train(toy_dir, out, *extra, code=0):
    args = [
        "train",
        "-c",
        "toy-luong.yaml",
        *sets([*RUN, f"data.dir={toy_dir}", *extra]),
        "-o",
        str(out),
        "-q",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    return result


def losses(run):
    return [(m["step"], m["loss"]) for m in read_metrics(run) if "loss" in m]


def test_tagged_weighted_corpora_train_and_log_their_shares(toy_dir, tmp_path):
    run = tmp_path / "run"
    train(toy_dir, run, "train.max_steps=4", f"data.cache_dir={tmp_path / 'cache'}")
    log = (run / "train.log").read_text()
    assert (
        f"corpora: {toy_dir}/valid 60 pairs: 25.0% of an epoch; {toy_dir}/test 60 pairs tagged <T>: 75.0%"
        in log
    )
    tok = TokenizerPair.from_state(read_checkpoint(run / "checkpoints" / "last.pt")["tokenizers"])
    assert "<T>" in tok.src.id_to_piece(tok.src.encode_batch(["<T> 5. März 1990"])[0])  # one piece
    (meta,) = (tmp_path / "cache").glob("*/meta.json")
    assert json.loads(meta.read_text())["parts"] == [60, 60]  # the corpora, in order, in one cache
    tag = tok.src.encode_batch(["<T>"])[0][-1]  # it leads each source of the second corpus only
    corpus = EncodedCorpus.open(meta.parent / "train", json.loads(meta.read_text())["layout"])
    sources = [
        corpus.src.tokens[corpus.src.offsets[i] : corpus.src.offsets[i + 1]].tolist() for i in range(120)
    ]
    assert all(tag not in row for row in sources[:60]) and all(tag in row[:2] for row in sources[60:])


def test_a_resumed_run_draws_what_an_uninterrupted_one_does(toy_dir, tmp_path):
    train(toy_dir, tmp_path / "whole", "train.max_steps=20")
    train(toy_dir, tmp_path / "cut", "train.max_steps=10")
    result = runner.invoke(
        app, ["train", "--resume", str(tmp_path / "cut"), "--set", "train.max_steps=20", "-q"]
    )
    assert result.exit_code == 0, result.output
    assert losses(tmp_path / "cut") == losses(tmp_path / "whole")  # bit-identical, across 2 epochs


@pytest.mark.parametrize(
    ("corpora", "message"),
    [
        ('[{"train": "valid", "weight": 0}]', "data.corpora[0].weight: must be a finite number > 0, got 0"),
        ('[{"train": "valid", "weight": -1}]', "data.corpora[0].weight: must be a finite number > 0, got -1"),
        (
            '[{"train": "valid", "tag": "<a b>"}]',
            "data.corpora[0].tag: '<a b>': a tag is one word without spaces",
        ),
        ('[{"train": "valid", "tag": "</s>"}]', "data.corpora[0].tag: '</s>' is a special piece"),
        ('[{"train": "valid"}, {"train": "valid"}]', "data.corpora[1].train: "),
        ('[{"train": "nowhere"}]', "nowhere.human"),
        ('[{"weight": 2}]', "data.corpora[0].train: required key is missing"),
    ],
)
def test_bad_corpora_are_refused_in_one_line(toy_dir, tmp_path, corpora, message):
    run = tmp_path / "run"
    one_line_error(train(toy_dir, run, f"data.corpora={corpora}", code=2), message)
    assert not run.exists()


@pytest.mark.parametrize("spelling", ["{toy}/", "./{toy}", "{toy}/../{name}", "{toy}//."])
def test_one_corpus_listed_twice_in_two_spellings_is_refused(toy_dir, tmp_path, monkeypatch, spelling):
    """`d/base` and `d/base/` are one folder: its corpus was taken twice (drawn at twice its weight)."""
    monkeypatch.chdir(toy_dir.parent)  # relative spellings too
    toy = toy_dir.name
    second = spelling.format(toy=toy, name=toy)
    corpora = json.dumps([{"train": "valid", "dir": toy}, {"train": "valid", "dir": second}])
    run = tmp_path / "run"
    one_line_error(
        train(toy_dir, run, f"data.corpora={corpora}", code=2),
        f"data.corpora[1].train: {Path(second, 'valid')} is listed twice; give each corpus once, weighted",
    )
    assert not run.exists()
