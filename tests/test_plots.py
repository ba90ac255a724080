"""Attention heatmaps: words on the axes, a title, a labelled colour bar, the suffix's format."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from nmt.cli import app
from nmt.errors import NMTError
from nmt.plots import attention_heatmap
from nmt.words import SPACE
from tests.conftest import assert_image

runner = CliRunner()
SRC = [SPACE, "S", "onntag", ",", f"{SPACE}12", ".", f"{SPACE}März", "</s>"]
TGT = [f"{SPACE}19", "89", "-0", "3", "-", "12", "</s>"]


def weights():
    w = np.random.default_rng(0).random((len(TGT), len(SRC)))
    return w / w.sum(1, keepdims=True)


def test_an_svg_heatmap_has_words_a_title_and_a_labelled_colour_bar(tmp_path):
    attention_heatmap(weights(), SRC, TGT, tmp_path / "a.svg", title="sentence 4 \u2014 runs/toy")
    assert_image(tmp_path / "a.svg", "svg")
    svg = (tmp_path / "a.svg").read_text()
    for text in ("sentence 4", "attention weight", "Sonntag", "März", "1989", "03", "source words"):
        assert f"<!-- {text}" in svg or f"{text} -->" in svg or f" {text} " in svg, text
    assert "<!-- \u2581 -->" not in svg


def test_the_suffix_picks_the_format_and_dpi_the_resolution(tmp_path):
    attention_heatmap(weights(), SRC, TGT, tmp_path / "a.pdf")
    assert_image(tmp_path / "a.pdf", "pdf")
    sizes = []
    for dpi in (50, 100):
        attention_heatmap(weights(), SRC, TGT, tmp_path / f"a{dpi}.png", dpi=dpi)
        sizes.append(assert_image(tmp_path / f"a{dpi}.png", "png"))
    assert sizes[1][0] == pytest.approx(2 * sizes[0][0], abs=2)
    assert sizes[1][1] == pytest.approx(2 * sizes[0][1], abs=2)
    with pytest.raises(NMTError, match="end it in .png, .svg or .pdf"):
        attention_heatmap(weights(), SRC, TGT, tmp_path / "a.jpg")
    assert not (tmp_path / "a.jpg").exists()


def test_plot_attention_from_a_words_export_and_its_errors(tmp_path):
    record = {
        "index": 1,
        "unit": "words",
        "source": ["a", "</s>"],
        "target": ["b", "</s>"],
        "weights": [[1, 0], [0, 1]],
    }
    att = tmp_path / "att.jsonl"
    att.write_text(json.dumps(record) + "\n")
    for name in ("w.svg", "w.pdf", "w.png"):  # the suffix picks the format through the CLI too
        ok = runner.invoke(app, ["plot", "attention", "--attention", str(att), "-o", str(tmp_path / name)])
        assert ok.exit_code == 0, ok.output
        assert_image(tmp_path / name)
    bad = runner.invoke(
        app, ["plot", "attention", "--attention", str(att), "--pieces", "-o", str(tmp_path / "p.png")]
    )
    assert bad.exit_code == 2 and "holds words" in bad.stderr
    bad = runner.invoke(app, ["plot", "attention", "--attention", str(att), "-o", str(tmp_path / "p.gif")])
    assert bad.exit_code == 2 and ".png, .svg or .pdf" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "p.gif").exists()


def test_plot_attention_from_a_model_decodes_with_its_configs_beam(toy_model, tmp_path, monkeypatch):
    from nmt.decode import translator
    from tests.explore.test_page import checkpoint_with_beam

    model = checkpoint_with_beam(toy_model.last, 3, tmp_path)
    built, load = [], translator.load_translator
    monkeypatch.setattr(
        translator, "load_translator", lambda *a, **k: built.append(load(*a, **k)) or built[0]
    )
    out = tmp_path / "a.png"
    args = ["plot", "attention", "-m", str(model), "--sentence", "Sonntag, 12. März 1989", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert_image(out, "png")
    assert built[0].cfg.beam == 3
