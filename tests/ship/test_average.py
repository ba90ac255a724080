"""`nmt average`: the mean of snapshots, the same maths as the trainer's averaged.pt, refusals."""

import torch

from nmt.checkpoint import model_weights, read_checkpoint, save_checkpoint, write_state
from nmt.config import config_from_dict
from nmt.data.tokenizer import TokenizerPair
from nmt.model.seq2seq import Seq2Seq
from tests.ship.conftest import invoke


def snapshots(run):
    return sorted((run / "checkpoints").glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))


def test_average_of_a_run_is_the_mean_and_the_trainers_average(toy_run, tmp_path):
    out = tmp_path / "avg.pt"
    result = invoke("average", toy_run, "--last", 3, "-o", out)
    assert "averaged 3 checkpoints (step-10.pt, step-20.pt, step-30.pt)" in result.output
    averaged = model_weights(read_checkpoint(out))
    parts = [model_weights(read_checkpoint(p)) for p in snapshots(toy_run)]
    name = "decoder.attention.W_a.weight"
    assert torch.allclose(averaged[name], sum(p[name] for p in parts) / 3, atol=1e-7)
    assert not torch.equal(averaged[name], parts[-1][name])
    trainer = model_weights(read_checkpoint(toy_run / "checkpoints" / "averaged.pt"))
    assert all(torch.equal(trainer[k], averaged[k]) for k in averaged)  # one implementation


def test_averaged_checkpoint_translates_and_evaluates(toy_run, toy_dir, tmp_path):
    paths = snapshots(toy_run)[-2:]
    out = tmp_path / "two.pt"
    invoke("average", *paths, "-o", out)
    hyp = tmp_path / "hyp.txt"
    invoke("translate", "-m", out, "-i", toy_dir / "test.human", "-o", hyp, "-q")
    assert len(hyp.read_text().splitlines()) == 60
    result = invoke(
        "eval", "-m", out, "--src", toy_dir / "test.human", "--ref", toy_dir / "test.iso", "--bootstrap", 0
    )
    assert "BLEU" in result.output


def test_average_refuses_other_models_and_bad_requests(toy_run, toy_dir, tmp_path):
    first = snapshots(toy_run)[0]
    state = read_checkpoint(first)
    tok = TokenizerPair.from_state(state["tokenizers"])
    other_cfg = config_from_dict({**state["config"], "model": {**state["config"]["model"], "embedding": 8}})
    save_checkpoint(
        tmp_path / "other.pt", other_cfg, Seq2Seq(other_cfg.model, len(tok.src), len(tok.tgt)), tok
    )
    result = invoke("average", first, tmp_path / "other.pt", "-o", tmp_path / "x.pt", code=2)
    assert "model config differs" in result.output and len(result.output.strip().splitlines()) == 1

    foreign = {**state, "tokenizers": {"src": b"x", "tgt": b"x"}}
    write_state(tmp_path / "foreign.pt", foreign)  # whole, checksums and all: another vocabulary
    result = invoke("average", first, tmp_path / "foreign.pt", "-o", tmp_path / "x.pt", code=2)
    assert "vocabulary differs" in result.output

    assert (
        "fewer than --last 9"
        in invoke("average", toy_run, "--last", 9, "-o", tmp_path / "x.pt", code=2).output
    )
    assert "needs --last" in invoke("average", toy_run, "-o", tmp_path / "x.pt", code=2).output
    assert "is one of the checkpoints" in invoke("average", first, first, "-o", first, code=2).output
    assert "at least 2" in invoke("average", first, "-o", tmp_path / "x.pt", code=2).output
    assert not (tmp_path / "x.pt").exists()
