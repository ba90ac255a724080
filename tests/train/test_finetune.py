"""Fine-tuning (`nmt train --init-from`): the checkpoint's weights and tokenizers, a fresh
optimiser and step count, the new data encoded with the old tokenizers and its unknown pieces
counted; a config whose model or tokenizer differs is refused in one line, nothing written."""

import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from nmt.checkpoint import config_differences, read_checkpoint, write_state
from nmt.cli import app
from nmt.config import load_config
from nmt.data.toy import write_toy_corpus
from nmt.train.trainer import Trainer
from tests.conftest import one_line_error, sets
from tests.test_end_to_end import TINY, train_toy

runner = CliRunner()


@pytest.fixture(scope="module")
def base(toy_dir, tmp_path_factory):
    """A tiny toy model trained 30 steps: the checkpoint fine-tuning starts from."""
    return train_toy(toy_dir, tmp_path_factory.mktemp("finetune") / "base", "train.max_steps=30")


@pytest.fixture(scope="module")
def new_domain(tmp_path_factory):
    """Other toy pairs, one training line with characters the base tokenizer never saw."""
    out = tmp_path_factory.mktemp("new-domain")
    write_toy_corpus(out, seed=11, sizes={"train": 300, "valid": 20, "test": 20})
    with open(out / "train.human", "a", encoding="utf-8") as f:
        f.write("Ωμέγα 5. März 1990\n")
    with open(out / "train.iso", "a", encoding="utf-8") as f:
        f.write("1990-03-05\n")
    return out


def train(*args, code=0):
    result = runner.invoke(app, ["train", *map(str, args), "--quiet"])
    assert result.exit_code == code, result.output
    return result


def test_a_finetuned_run_starts_from_the_checkpoints_weights_and_tokenizers(base, new_domain, tmp_path):
    run = tmp_path / "ft"
    steps = ("train.max_steps=6", "train.valid_every=3", "train.log_every=3", "train.lr=0.0005")
    train("--init-from", base, *sets([f"data.dir={new_domain}", *steps]), "-o", run)
    old, new = (
        read_checkpoint(base / "checkpoints" / "last.pt"),
        read_checkpoint(run / "checkpoints" / "last.pt"),
    )
    assert new["tokenizers"] == old["tokenizers"]  # the data was encoded with the checkpoint's pieces
    assert new["progress"]["step"] == 6 and old["progress"]["step"] == 30  # the step count starts at 0
    assert new["optimizer"]["state"][0]["step"] == 6  # a fresh optimiser: 6 updates, not 36
    cfg = load_config(run / "config.yaml")
    assert cfg.train.init_from == str(base) and cfg.data.dir == str(new_domain)
    assert cfg.model == load_config(base / "config.yaml").model  # the checkpoint's own config
    log = (run / "train.log").read_text()
    assert f"fine-tuning from {base}/checkpoints/best.pt (step" in log
    src_unknown = float(log.split("unknown pieces in the training data: ")[1].split("%")[0])
    assert 0 < src_unknown < 5  # one line of 301 holds 5 unknown characters
    changed = [k for k, v in new["model"].items() if not torch.equal(v, old["model"][k])]
    assert changed  # it trained


def test_the_model_starts_exactly_at_the_checkpoints_weights(base, new_domain, tmp_path):
    """Also when a fine-tuning run killed before its first checkpoint resumes: the trainer built
    from the run's config starts from train.init_from again."""
    overrides = [*TINY, f"data.dir={new_domain}", f"train.init_from={base}", "train.device=cpu"]
    cfg = load_config("toy-luong.yaml", overrides)
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    best = read_checkpoint(base / "checkpoints" / "best.pt")["model"]
    assert all(torch.equal(v, best[k]) for k, v in trainer.model.state_dict().items())
    assert any("fine-tuning from" in note for note in trainer.notes)


def test_dropout_and_training_settings_may_differ_from_the_checkpoint(base, toy_dir, tmp_path):
    run = tmp_path / "ft"
    extra = ["model.dropout=0.4", "train.max_steps=2", "train.valid_every=2", "tokenizer.sampling_alpha=0.2"]
    train(
        "-c", "toy-luong.yaml", *sets([*TINY, f"data.dir={toy_dir}", *extra]), "--init-from", base, "-o", run
    )
    assert load_config(run / "config.yaml").model.dropout == 0.4


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ("model.decoder.hidden=64", "model.decoder.hidden is 32 in"),
        ("model.attention.type=bahdanau", "model.attention.type is"),
        ("tokenizer.vocab_size=100", "tokenizer.vocab_size is 120 in"),
        ("data.normalize=none", 'data.normalize is "NFC" in'),
    ],
)
def test_a_config_that_differs_from_the_checkpoint_is_refused_naming_the_key(
    base, toy_dir, tmp_path, change, key
):
    run = tmp_path / "ft"
    args = (
        "-c",
        "toy-luong.yaml",
        *sets([*TINY, f"data.dir={toy_dir}", change]),
        "--init-from",
        base,
        "-o",
        run,
    )
    result = train(*args, code=2)
    line = one_line_error(result, "train.init_from: ", key, "a fine-tuned model keeps its checkpoint's model")
    assert str(base / "checkpoints" / "best.pt") in line
    assert not run.exists()


def test_bad_starting_points_are_one_line_and_write_nothing(base, tmp_path):
    run = tmp_path / "ft"
    one_line_error(train("--init-from", tmp_path / "missing", "-o", run, code=2), "checkpoint not found")
    one_line_error(
        train("--init-from", base, "--resume", base, code=2),
        "--init-from starts a new run; --resume continues one",
    )
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"not a checkpoint")
    one_line_error(train("--init-from", damaged, "-o", run, code=2), "not an nmt checkpoint")
    assert not run.exists()


def hidden_size_changed(state):
    state["config"]["model"]["encoder"]["hidden"] += 8  # the weights keep the old size


def no_weights(state):
    state["model"] = {}


def garbage_tokenizers(state):
    state["tokenizers"] = {"src": b"not a SentencePiece model", "tgt": b"not one either"}


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (hidden_size_changed, "encoder.rnn.weight_ih_l0 has the shape"),
        (no_weights, "its model holds no weights"),
        (garbage_tokenizers, "SentencePiece cannot load its tokenizers"),
    ],
)
def test_a_checkpoint_that_does_not_make_its_model_is_one_line_and_writes_nothing(
    base, tmp_path, damage, message
):
    """Checked before use, as a translator's checkpoint is: a crafted or damaged checkpoint with
    valid checksums (write_state) whose weights, model or tokenizers cannot start the run."""
    state = read_checkpoint(base / "checkpoints" / "last.pt")
    damage(state)
    write_state(tmp_path / "bad.pt", state)
    result = train(
        "--init-from", tmp_path / "bad.pt", "--set", "train.max_steps=1", "-o", tmp_path / "ft", code=2
    )
    one_line_error(result, str(tmp_path / "bad.pt"), message, "fine-tune ")
    assert not (tmp_path / "ft").exists()


def test_without_an_output_the_run_is_named_after_the_checkpoints(base, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "m30k"
    shutil.copytree(base, copy)
    train("--init-from", copy, "--set", "train.max_steps=1", "--set", "train.valid_every=1")
    assert (tmp_path / "runs" / "m30k-finetuned" / "checkpoints" / "last.pt").is_file()


@pytest.mark.parametrize(
    ("part", "names"), [("encoder", ("encoder.",)), ("embeddings", ("encoder.embed.", "decoder.embed."))]
)
def test_a_frozen_part_keeps_the_checkpoints_weights_for_its_steps(base, new_domain, tmp_path, part, names):
    first, later = tmp_path / "first", tmp_path / "later"
    common = [
        f"data.dir={new_domain}",
        f"train.freeze=[{part}]",
        "train.freeze_steps=3",
        "train.valid_every=3",
    ]
    train("--init-from", base, *sets([*common, "train.max_steps=3"]), "-o", first)
    train("--init-from", base, *sets([*common, "train.max_steps=6"]), "-o", later)
    old = read_checkpoint(base / "checkpoints" / "best.pt")["model"]
    for run, frozen_still in ((first, True), (later, False)):
        new = read_checkpoint(run / "checkpoints" / "last.pt")["model"]
        held = {k: torch.equal(v, old[k]) for k, v in new.items() if k.startswith(names)}
        assert all(held.values()) if frozen_still else not any(held.values()), held
        assert not any(
            torch.equal(v, old[k]) for k, v in new.items() if not k.startswith(("encoder.", "decoder.embed."))
        )
    assert f"frozen: {part} for the first 3 steps" in (first / "train.log").read_text()


def test_old_data_mixed_in_by_weight_is_encoded_with_the_checkpoints_tokenizers(
    base, new_domain, toy_dir, tmp_path
):
    run = tmp_path / "mixed"
    corpora = json.dumps(
        [{"train": "train", "dir": str(new_domain), "weight": 4}, {"train": "train", "dir": str(toy_dir)}]
    )
    train(
        "--init-from",
        base,
        *sets([f"data.corpora={corpora}", "train.max_steps=2", "train.valid_every=2"]),
        "-o",
        run,
    )
    log = (run / "train.log").read_text()
    assert (
        f"corpora: {new_domain}/train 301 pairs: 80.0% of an epoch; {toy_dir}/train 1500 pairs: 20.0%" in log
    )
    old = read_checkpoint(base / "checkpoints" / "last.pt")["tokenizers"]
    assert read_checkpoint(run / "checkpoints" / "last.pt")["tokenizers"] == old


def test_config_differences_name_each_differing_key_and_skip_settings_newer_than_the_checkpoint():
    ours = {
        "model": {"encoder": {"hidden": 256, "layers": 2}, "dropout": 0.3},
        "tokenizer": {"user_symbols": []},
    }
    theirs = {"model": {"encoder": {"hidden": 128, "layers": 2}, "dropout": 0.1}, "tokenizer": {}}
    assert list(config_differences(ours, theirs)) == [
        ("model.encoder.hidden", 256, 128),
        ("model.dropout", 0.3, 0.1),
    ]
    assert list(config_differences(ours, ours)) == []
