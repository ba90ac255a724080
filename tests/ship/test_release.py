"""`nmt release`: a small directory that every -m accepts, loads without pickle and translates
byte-identically to its checkpoint."""

import pytest
import torch

from nmt.checkpoint import load_model, resolve_checkpoint, save_checkpoint
from nmt.config import TokenizerConfig, config_from_dict
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import read_lines
from nmt.model.seq2seq import Seq2Seq
from tests.ship.conftest import invoke


@pytest.fixture(scope="module")
def released(toy_run, toy_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "toy-model"
    result = invoke(
        "release",
        toy_run,
        "-o",
        out,
        "--test-src",
        toy_dir / "test.human",
        "--test-ref",
        toy_dir / "test.iso",
    )
    return out, result.output


def test_release_holds_weights_config_tokenizer_and_card(released, toy_run):
    out, output = released
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "config.yaml",
        "manifest.json",
        "model.safetensors",
        "model.safetensors.bleu-check.json",  # its BLEU in each precision, for auto's int8
        "spm.model",
    ]
    checkpoint = resolve_checkpoint(toy_run).stat().st_size
    size = sum(p.stat().st_size for p in out.iterdir())
    weights = (out / "model.safetensors").stat().st_size
    assert weights * 2.5 < checkpoint and size * 2 < checkpoint  # no optimiser state: weights once, not 3x
    assert f"{size / 1e6:.2f} MB" in output and "smaller" in output
    config = (out / "config.yaml").read_text()
    assert "train:" not in config and "dir:" not in config and "attention:" in config
    card = (out / "README.md").read_text()
    for expected in ("human -> iso", "`general`", "parameters", "30 steps", "nrefs:1|case:mixed", "chrF"):
        assert expected in card, expected


def test_a_release_with_a_test_set_carries_its_bleu_check(released, toy_dir):
    from nmt.decode.bleucheck import read_check

    out, output = released
    check, unused = read_check(out / "model.safetensors", out)  # as auto reads it where served
    assert unused == "" and set(check.bleu) >= {"fp32", "int8"}
    lines, beam = len(read_lines(toy_dir / "test.human")), load_model(out).config.decode.beam
    assert check.on == f"test.human ({lines:,} lines, beam {beam})"
    card_bleu = next(line for line in output.splitlines() if line.startswith("test BLEU ")).split()[2]
    assert f"{check.bleu['fp32']:.2f}" == card_bleu  # the card's fp32 decode, scored alike
    verdict = "may take int8 where it runs faster" if check.allows_int8 else "stays off int8"
    assert f"BLEU check: {check}; auto {verdict}" in output


def test_release_translates_byte_identically_and_loads_without_pickle(
    released, toy_run, toy_dir, tmp_path, monkeypatch
):
    out, _ = released
    for beam in ("1", "3"):
        a, b = tmp_path / f"ckpt{beam}.txt", tmp_path / f"release{beam}.txt"
        invoke("translate", "-m", toy_run, "-i", toy_dir / "test.human", "-o", a, "--beam", beam, "-q")
        invoke("translate", "-m", out, "-i", toy_dir / "test.human", "-o", b, "--beam", beam, "-q")
        assert a.read_bytes() == b.read_bytes()

    def no_pickle(*args, **kwargs):
        raise AssertionError("a release must load without torch.load")

    monkeypatch.setattr(torch, "load", no_pickle)
    loaded = load_model(out)
    assert loaded.config.data.src_lang == "human"
    result = invoke(
        "eval", "-m", out, "--src", toy_dir / "test.human", "--ref", toy_dir / "test.iso", "--bootstrap", 0
    )
    assert "BLEU" in result.output


def test_fp16_release_halves_the_weights(released, toy_run, toy_dir, tmp_path):
    out, _ = released
    half = tmp_path / "half"
    invoke("release", toy_run, "-o", half, "--fp16")
    ratio = (half / "model.safetensors").stat().st_size / (out / "model.safetensors").stat().st_size
    assert 0.45 < ratio < 0.55
    card = (half / "README.md").read_text()
    assert "fp16" in card and f"`{toy_dir / 'test.human'}`" in card  # the run's own test split, found
    weights = load_model(half).model.state_dict()
    reference = load_model(out).model.state_dict()
    assert all(weights[k].dtype == torch.float32 for k in weights)
    assert all(torch.allclose(weights[k], reference[k], atol=1e-3) for k in weights)
    invoke("translate", "-m", half, "-i", toy_dir / "test.human", "-o", tmp_path / "h.txt", "-q")


def test_tied_embeddings_are_stored_once_and_tied_again(toy_run, tmp_path):
    tok = load_model(toy_run).tokenizers
    cfg = config_from_dict(
        {
            "data": {"src_lang": "a", "tgt_lang": "b"},
            "model": {
                "embedding": 32,
                "tie_embeddings": True,
                "encoder": {"hidden": 8},
                "decoder": {"hidden": 32},
                "attention": {"type": "general"},
            },
        }
    )
    model = Seq2Seq(cfg.model, len(tok.src), len(tok.tgt))
    save_checkpoint(tmp_path / "tied.pt", cfg, model, tok)
    invoke("release", tmp_path / "tied.pt", "-o", tmp_path / "tied")
    loaded = load_model(tmp_path / "tied").model
    assert loaded.decoder.output_layer.weight is loaded.decoder.embed.weight
    assert torch.equal(loaded.decoder.embed.weight, model.decoder.embed.weight)


def test_release_refuses_to_overwrite_and_a_broken_release_is_one_line(released, toy_run, tmp_path):
    out, _ = released
    result = invoke("release", toy_run, "-o", out, code=2)
    assert "already exists and is not empty" in result.output
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.yaml", "spm.model", "README.md"):
        (broken / name).write_bytes((out / name).read_bytes())
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    result = invoke("translate", "-m", broken, "-i", "/dev/null", code=2)
    assert "not a readable safetensors file" in result.output and len(result.output.strip().splitlines()) == 1
    assert (
        "give both --test-src and --test-ref"
        in invoke("release", toy_run, "-o", tmp_path / "x", "--test-src", "a.txt", code=2).output
    )


def test_separate_tokenizers_travel_as_two_files(toy_dir, tmp_path):
    pairs = list(
        zip(read_lines(toy_dir / "train.human")[:500], read_lines(toy_dir / "train.iso")[:500], strict=True)
    )
    tok = TokenizerPair.train(pairs, TokenizerConfig(vocab_size=60, joint=False))
    assert tok.save(tmp_path) == ["src.model", "tgt.model"]
    again = TokenizerPair.load(tmp_path)
    assert again.to_state() == tok.to_state() and not again.joint
    (tmp_path / "tgt.model").unlink()
    with pytest.raises(NMTError, match="no SentencePiece model"):
        TokenizerPair.load(tmp_path)
