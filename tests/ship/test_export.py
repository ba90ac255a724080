"""`nmt export` and the onnx engine: every attention and decoder style exports, and onnxruntime
with numpy search translates a trained model as torch does (greedy exactly; beam up to float ties)."""

import json
import subprocess
import sys

import pytest
import torch

from nmt.checkpoint import load_model, save_checkpoint
from nmt.config import config_from_dict
from nmt.decode.translator import load_translator
from nmt.fileio import read_lines
from nmt.model.decoder import lstm_cell
from nmt.model.seq2seq import Seq2Seq
from nmt.runtime.translator import load_onnx_translator
from tests.ship.conftest import invoke

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def exported(translating_model, tmp_path_factory):
    """The ONNX export of a model that translates (two layers each side, trained weights)."""
    out = tmp_path_factory.mktemp("export") / "toy-onnx"
    result = invoke("export", translating_model.run, "-o", out)
    return out, result.output


def test_unrolled_lstm_cell_equals_the_fused_cell():
    torch.manual_seed(0)
    x, h, c = torch.randn(5, 7), torch.randn(5, 6), torch.randn(5, 6)
    weights = torch.randn(24, 7), torch.randn(24, 6), torch.randn(24), torch.randn(24)
    for ours, theirs in zip(
        lstm_cell(x, (h, c), *weights), torch.lstm_cell(x, (h, c), *weights), strict=True
    ):
        assert torch.allclose(ours, theirs, atol=1e-6)


def test_export_writes_graphs_tokenizer_and_config(exported):
    out, output = exported
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "decoder_step.onnx",
        "encoder.onnx",
        "spm.model",
    ]
    config = json.loads((out / "config.json").read_text())
    assert (
        config["decoder"] == "luong"
        and config["attention"] == "general"
        and config["decode"]["max_len"] == 16
    )
    assert "checked against torch: max relative difference" in output


def test_onnx_engine_translates_a_trained_model_like_torch(exported, translating_model, toy_dir, tmp_path):
    out, _ = exported
    # the model really translates: a different date for most sentences, some of them right (on
    # weights that write one string for every input, the engines would agree on anything)
    greedy = tmp_path / "greedy.txt"
    invoke("translate", "-m", translating_model.run, "-i", toy_dir / "test.human", "-o", greedy, "-q")
    hyps, refs = greedy.read_text().splitlines(), read_lines(toy_dir / "test.iso")
    assert len(set(hyps)) >= len(refs) // 2, hyps
    assert sum(h == r for h, r in zip(hyps, refs, strict=True)) >= 5, hyps
    for extra in ([], ["--beam", "4"], ["--beam", "3", "--nbest", "3"]):
        a, b = tmp_path / "torch.txt", tmp_path / "onnx.txt"
        invoke("translate", "-m", translating_model.run, "-i", toy_dir / "test.human", "-o", a, "-q", *extra)
        invoke(
            "translate", "-m", out, "--engine", "onnx", "-i", toy_dir / "test.human", "-o", b, "-q", *extra
        )
        if "--nbest" in extra:  # scores to 4 decimals: equal up to float noise in the last digit
            rows_a = [line.split("\t") for line in a.read_text().splitlines()]
            rows_b = [line.split("\t") for line in b.read_text().splitlines()]
            assert [(r[0], r[1], r[3]) for r in rows_a] == [(r[0], r[1], r[3]) for r in rows_b]
            assert all(abs(float(x[2]) - float(y[2])) < 2e-4 for x, y in zip(rows_a, rows_b, strict=True))
        else:
            assert a.read_text() == b.read_text(), extra


def test_runtime_needs_no_torch(exported, translating_model, toy_dir):
    out, _ = exported
    lines = read_lines(toy_dir / "test.human")[:20]
    code = (
        "import sys, json\n"
        "sys.modules['torch'] = None  # any import of torch now fails\n"
        "from nmt.runtime.translator import load_onnx_translator\n"
        f"t = load_onnx_translator([{str(out)!r}], {{'beam': 3}})\n"
        f"print(json.dumps([x.text for x in t.translate({lines!r})]))\n"
        "assert not [m for m in sys.modules if m.startswith('torch')] or sys.modules['torch'] is None\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = [t.text for t in load_translator([translating_model.run], {"beam": 3}).translate(lines)]
    assert json.loads(result.stdout) == expected


def test_engines_refuse_each_others_models_in_one_line(exported, toy_run, toy_dir, tmp_path):
    out, _ = exported
    sampled = tmp_path / "sampled.txt"
    args = (
        "translate",
        "-m",
        out,
        "--engine",
        "onnx",
        "--sample",
        "-i",
        toy_dir / "test.human",
        "-o",
        sampled,
    )
    result = invoke(*args, code=2)
    assert "the onnx engine searches and does not sample; sample with --engine torch" in result.output
    assert not sampled.exists()
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("".join("2001\n" for _ in (toy_dir / "test.human").read_text().splitlines()))
    args = ("translate", "-m", out, "--engine", "onnx", "-i", toy_dir / "test.human", "--prefixes", prefixes)
    result = invoke(*args, "-o", sampled, code=2)
    assert (
        "this engine does not take target prefixes, constraints or a shortlist; use --engine torch"
        in result.output
    )
    assert not sampled.exists()
    guides = tmp_path / "constraints.jsonl"
    guides.write_text("".join('{"constraints": ["2001"]}\n' for _ in prefixes.read_text().splitlines()))
    args = ("translate", "-m", out, "--engine", "onnx", "-i", toy_dir / "test.human", "--constraints", guides)
    result = invoke(*args, "--beam", "3", "-o", sampled, code=2)
    assert (
        "this engine does not take target prefixes, constraints or a shortlist; use --engine torch"
        in result.output
    )
    assert not sampled.exists()
    result = invoke("translate", "-m", toy_run, "--engine", "onnx", "-i", "/dev/null", code=2)
    assert "not an ONNX export" in result.output and len(result.output.strip().splitlines()) == 1
    result = invoke("translate", "-m", out, "-i", "/dev/null", code=2)
    assert "is an ONNX export; decode it with --engine onnx" in result.output
    assert "not empty" in invoke("export", toy_run, "-o", out, code=2).output


def test_an_export_that_does_not_reproduce_torch_is_refused(toy_run, tmp_path, monkeypatch):
    import nmt.ship.export as export

    monkeypatch.setattr(export, "TOLERANCE", 0.0)
    result = invoke("export", toy_run, "-o", tmp_path / "refused", code=2)
    assert "luong decoder with general attention differ from torch" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "refused").exists()

    def unsupported(*args):
        raise RuntimeError("Exporting the operator 'aten::mystery' to ONNX opset version 17 is not supported")

    monkeypatch.setattr(export, "export_graphs", unsupported)
    result = invoke("export", toy_run, "-o", tmp_path / "refused", code=2)
    assert "cannot be exported to ONNX (RuntimeError: Exporting the operator" in result.output


STYLES = [  # every attention once, the decoder variants spread over them
    ("none", "luong", False),
    ("dot", "luong", False),
    ("scaled_dot", "luong", True),
    ("general", "bahdanau", False),
    ("concat", "luong", False),
    ("bahdanau", "bahdanau", False),
    ("local_m", "luong", True),
    ("local_p", "bahdanau", False),
    ("multihead", "luong", False),
]


@pytest.mark.slow
@pytest.mark.parametrize("attention,style,feeding", STYLES, ids=lambda x: str(x))
def test_every_attention_and_decoder_style_exports_and_runs_with_random_weights(
    attention, style, feeding, toy_run, toy_dir, tmp_path
):
    """Coverage of the exporter, not parity: each style's graphs build, pass the exporter's own
    check against torch, and decode under onnxruntime. The weights are random (training nine
    models would take minutes), so the translations are noise and their agreement says little;
    parity on real translations is test_onnx_engine_translates_a_trained_model_like_torch's."""
    tok = load_model(toy_run).tokenizers
    cfg = config_from_dict(
        {
            "data": {"src_lang": "human", "tgt_lang": "iso"},
            "model": {
                "embedding": 8,
                "encoder": {"hidden": 8, "layers": 2},
                "decoder": {"hidden": 16, "layers": 2, "style": style, "input_feeding": feeding},
                "attention": {"type": attention, "window": 2, "heads": 2},
            },
            "decode": {"max_len": 10},
        }
    )
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "m.pt", cfg, Seq2Seq(cfg.model, len(tok.src), len(tok.tgt)), tok)
    invoke("export", tmp_path / "m.pt", "-o", tmp_path / "onnx")
    lines = read_lines(toy_dir / "test.human")[:12]
    for beam in (1, 3):
        ours = load_onnx_translator([tmp_path / "onnx"], {"beam": beam}).translate(lines)
        theirs = load_translator([tmp_path / "m.pt"], {"beam": beam}).translate(lines)
        assert [t.text for t in ours] == [t.text for t in theirs]
