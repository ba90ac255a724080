"""Guided alignment (`train.guided_alignment`): word links -> attention targets over pieces, the
loss that pulls the attention to them, links checked against the training text in one line,
each cached pair's line kept through cleaning, filtering and joining, and a guided toy run whose
attention aligns better than its unguided twin at the same steps."""

import numpy as np
import pytest
import torch

from nmt.config import load_config
from nmt.data.links import piece_targets, read_links
from nmt.data.prepare import prepare
from nmt.errors import NMTError
from nmt.train.loss import alignment_sums
from tests.conftest import tiny_config
from tests.test_faults import fails_cleanly, sets


def test_a_word_link_spreads_over_the_pieces_of_both_words():
    src, tgt = ["\u2581ab", "c", "\u2581d"], ["\u2581x", "\u2581y", "z", "</s>"]  # words abc d / x yz
    rows = piece_targets(np.array([[0, 1], [1, 0]]), src, tgt)
    assert rows.tolist() == [[0, 0, 1], [0.5, 0.5, 0], [0.5, 0.5, 0], [0, 0, 0]]
    two = piece_targets(np.array([[0, 0], [1, 0]]), src, tgt)
    assert two[0].tolist() == [1 / 3, 1 / 3, 1 / 3] and not two[1:].any()


def test_the_loss_is_zero_on_the_links_and_grows_away_from_them():
    targets = torch.tensor([[[0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]])
    uniform = torch.full_like(targets, 1 / 3)
    matching = targets.clone()
    matching[0, 2] = torch.tensor([0.2, 0.3, 0.5])  # an unlinked row: any attention is free
    loss, rows = alignment_sums(matching, targets)
    assert rows == 2 and abs(float(loss)) < 1e-6
    losses = [float(alignment_sums((1 - a) * targets + a * uniform, targets)[0]) for a in (0.1, 0.4, 0.8)]
    assert 0 < losses[0] < losses[1] < losses[2]
    weights = matching.clone().requires_grad_()
    alignment_sums(weights * 0.9 + 0.1 * uniform, targets)[0].backward()
    assert weights.grad[0, 2].abs().sum() == 0  # no gradient where nothing is linked


def guided(toy_dir, links, **train):
    return tiny_config(toy_dir, train={"guided_alignment": {"links": [str(links)]}, **train})


def test_every_cached_pair_knows_its_line_through_cleaning_filtering_and_joining(toy_dir, tmp_path):
    for side in ("human", "iso"):
        lines = (toy_dir / f"train.{side}").read_text().splitlines()[:40]
        lines[3] = "" if side == "human" else lines[3]  # an empty side: dropped
        lines[7] = "1 " * 70 if side == "human" else lines[7]  # too long: dropped
        (tmp_path / f"train.{side}").write_text("\n".join(lines) + "\n")
        for split in ("valid", "test"):
            (tmp_path / f"{split}.{side}").write_text((toy_dir / f"{split}.{side}").read_text())
    cfg = tiny_config(tmp_path, data={"join": 2, "cache_dir": str(tmp_path / "cache")})
    data = prepare(cfg)
    sources = (tmp_path / "train.human").read_text().splitlines()
    single = [int(line) for line in data.train.lines if line]
    assert single == [n for n in range(1, 41) if n not in (4, 8)]
    assert (data.train.lines == 0).sum() == len(data.train) - 38  # the joined pairs: no line
    for index in np.flatnonzero(data.train.lines)[:5]:
        line = int(data.train.lines[index])
        assert data.tokenizers.src.decode(list(data.train.src[index])) == sources[line - 1]
    again = prepare(cfg)  # from the cache
    assert again.from_cache and (again.train.lines == data.train.lines).all()


@pytest.mark.parametrize(
    "edit,fragment",
    [
        (lambda lines: lines[:-1], "has 1499 lines, fewer than the pairs of the training split train"),
        (lambda lines: [*lines, "0-0"], "has more lines than the 1500 pairs"),
        (lambda lines: ["0-29", *lines[1:]], "train.align:1: link 0-29 is outside the pair"),
        (lambda lines: [*lines[:4], "0:1", *lines[5:]], "train.align:5: '0:1' is not an alignment link"),
    ],
    ids=["short", "long", "out of range", "not a link"],
)
def test_links_that_do_not_fit_the_corpus_are_one_line(toy_dir, tmp_path, edit, fragment):
    lines = (toy_dir / "train.align").read_text().splitlines()
    links = tmp_path / "train.align"
    links.write_text("\n".join(edit(lines)) + "\n")
    with pytest.raises(NMTError, match="train.guided_alignment.links") as caught:
        read_links(guided(toy_dir, links))
    assert fragment in str(caught.value)


def test_a_tagged_corpus_s_links_count_words_after_its_tag(toy_dir, tmp_path):
    for name in ("train.human", "train.iso"):
        (tmp_path / name).write_bytes((toy_dir / name).read_bytes())
    corpora = [{"train": "train", "tag": "<T>"}, {"train": "train", "dir": str(tmp_path)}]
    links = [str(toy_dir / "train.align")] * 2
    cfg = tiny_config(toy_dir, data={"corpora": corpora}, train={"guided_alignment": {"links": links}})
    read = read_links(cfg)
    tagged, plain = read.rows[0], read.rows[1500]
    assert len(plain) and (tagged[0::2] == plain[0::2] + 3).all()  # "<T>" is the words < T >
    assert (tagged[1::2] == plain[1::2]).all() and read.linked == 3000


def test_a_links_file_per_corpus_and_an_attention_to_guide_are_required(toy_dir):
    for overrides, fragment in [
        (["train.guided_alignment.links=[a, b]"], "give one file per training corpus (1), got 2"),
        (
            ["train.guided_alignment.links=[a]", "model.attention.type=none"],
            "the none attention has no weights",
        ),
        (["train.guided_alignment.links=[a]", "train.guided_alignment.weight=0"], "weight: must be above 0"),
        (["train.guided_alignment.links=[a]", "tokenizer.sampling_alpha=0.1"], "sampling_alpha to 0"),
        (["train.guided_alignment.links=[a]", "train.teacher_forcing_ratio=0.5"], "teacher_forcing_ratio 1"),
    ]:
        with pytest.raises(NMTError, match="train.guided_alignment") as caught:
            load_config("toy-luong.yaml", [f"data.dir={toy_dir}", *overrides])
        assert fragment in str(caught.value)


def test_a_bad_links_file_stops_nmt_train_before_the_run_folder(toy_dir, tmp_path):
    links = tmp_path / "short.align"
    links.write_text("0-0\n")
    run = tmp_path / "run"
    overrides = [f"data.dir={toy_dir}", f"train.guided_alignment.links=[{links}]"]
    command = ["train", "-c", "toy-luong.yaml", *sets(overrides), "-o", run]
    fails_cleanly(command, "has 1 lines, fewer than the pairs")
    assert not run.exists()
    gold = tmp_path / "valid.align"
    gold.write_text("0-0\n")
    overrides = [f"data.dir={toy_dir}", f"train.guided_alignment.valid_links={gold}"]
    fails_cleanly(
        ["train", "-c", "toy-luong.yaml", *sets(overrides), "-o", run],
        "has 1 lines and the validation split 60",
    )
    assert not run.exists()


def test_guided_attention_aligns_better_than_its_unguided_twin(toy_dir, tmp_path):
    """Same seed, same steps: the guided run logs its alignment loss falling and ends with a
    lower validation AER, and the AER it logs is `nmt align --ref`'s."""
    from nmt.rundir import prepare_run_dir, read_metrics
    from nmt.train.trainer import Trainer

    def run(name, links):
        train = {"max_steps": 60, "valid_every": 60, "log_every": 20, "lr": 0.01}
        gold = {"valid_links": str(toy_dir / "valid.align")}
        section = {"guided_alignment": {**gold, **({"links": [str(links)]} if links else {})}}
        cfg = tiny_config(toy_dir, train={**train, **section})
        folder = tmp_path / name
        prepare_run_dir(folder, cfg)
        Trainer(cfg, folder, quiet=True).train()
        return read_metrics(folder)

    plain, steered = run("plain", None), run("guided", toy_dir / "train.align")
    aer = [next(m["valid_aer"] for m in metrics if "valid_aer" in m) for metrics in (plain, steered)]
    assert aer[1] < aer[0] - 0.1, aer
    losses = [m["alignment_loss"] for m in steered if "alignment_loss" in m]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert not any("alignment_loss" in m for m in plain)


def test_a_killed_guided_run_resumes_exactly(toy_dir, tmp_path):
    """kill -9 mid-run, then --resume: the same translation and alignment losses as a run never
    stopped (the log window's alignment sums travel in the checkpoint)."""
    from nmt.checkpoint import read_checkpoint
    from nmt.rundir import CHECKPOINTS, LAST, read_metrics
    from tests.conftest import assert_resumed_at
    from tests.test_faults import LOG_EVERY, nmt_process, train_args, wait_for_step

    links = f"train.guided_alignment.links=[{toy_dir / 'train.align'}]"
    run, reference = tmp_path / "run", tmp_path / "reference"
    proc = nmt_process(
        train_args(toy_dir, run, links, "train.valid_every=1000", "train.save_every_minutes=0.0001")
    )
    wait_for_step(run, proc, 15)
    proc.kill()
    proc.wait()
    step = read_checkpoint(run / CHECKPOINTS / LAST)["progress"]["step"]
    before = read_metrics(run)
    whole = nmt_process(train_args(toy_dir, reference, links, "train.valid_every=10"))
    _, err = whole.communicate(timeout=600)
    assert whole.returncode == 0, err
    resumed = nmt_process(["train", "--resume", run, "-q", "--set", "train.valid_every=10"])
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert_resumed_at(run, before, step, LOG_EVERY)

    def logged(folder):
        return [(m["step"], m["loss"], m["alignment_loss"]) for m in read_metrics(folder) if "loss" in m]

    assert logged(run) == logged(reference) and len(logged(run)) >= 4
