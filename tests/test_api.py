"""The Python API: lazy top-level names, Translator.load / translate / info, nmt.train and
nmt.evaluate, and every example in docs/api.md, run against the real toy task."""

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nmt
from nmt.words import merge_attention

DOCS = Path(__file__).resolve().parents[1] / "docs" / "api.md"


@pytest.fixture(scope="module")
def docs_run(toy_dir, tmp_path_factory) -> tuple[str, Path]:
    """Every ```python block of docs/api.md, run in order in one namespace from a directory with
    the toy corpus at data/toy: (what they printed, the run directory they trained)."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 5
    where = tmp_path_factory.mktemp("api")
    (where / "data").mkdir()
    (where / "data" / "toy").symlink_to(toy_dir)
    cwd, printed = os.getcwd(), io.StringIO()
    os.chdir(where)
    try:
        namespace: dict = {}
        with contextlib.redirect_stdout(printed):
            for block in blocks:
                exec(compile(block, str(DOCS), "exec"), namespace)
    finally:
        os.chdir(cwd)
    return printed.getvalue(), where / "runs" / "toy"


@pytest.fixture(scope="module")
def translator(docs_run):
    return nmt.Translator.load(docs_run[1], device="cpu")


def test_the_docs_examples_run(docs_run):
    out, run_dir = docs_run
    assert "trained 60 steps" in out and "human -> iso: luong decoder, general attention" in out
    assert "BLEU" in out and "error: runs/does-not-exist: checkpoint not found" in out
    assert (run_dir / "checkpoints" / "last.pt").is_file()


def test_import_nmt_loads_no_heavy_package_until_a_name_is_used():
    code = (
        "import sys, nmt; heavy = {'torch', 'sacrebleu'}; before = sorted(heavy & set(sys.modules)); "
        "nmt.Translator; print(before, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] True"


def test_unknown_top_level_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'Translater'"):
        nmt.Translater  # noqa: B018
    assert {"Translator", "train", "evaluate"} <= set(dir(nmt))


def test_train_and_evaluate_stay_callable_next_to_their_packages():
    import nmt.evaluate.scoring  # noqa: F401
    import nmt.train.trainer  # noqa: F401

    assert callable(nmt.train) and callable(nmt.evaluate)
    assert nmt.train.trainer.Trainer  # the package is still the package


def test_info_describes_the_model(translator, docs_run):
    info = translator.info
    assert (info.src_lang, info.tgt_lang, info.decoder, info.attention) == (
        "human",
        "iso",
        "luong",
        "general",
    )
    assert info.parameters == sum(p.numel() for p in translator.model.parameters())
    assert info.checkpoints == [str(docs_run[1])]
    assert translator.configured(beam=3).info == info


def test_translate_takes_settings_per_call_and_a_single_string(translator, toy_dir):
    lines = (toy_dir / "test.human").read_text().splitlines()[:6]
    per_call = translator.translate(lines, beam=3, nbest=2)
    configured = translator.configured(beam=3).translate(lines, nbest=2)
    assert [t.texts for t in per_call] == [t.texts for t in configured]
    assert all(len(t.texts) == len(t.scores) == 2 and t.score == t.scores[0] for t in per_call)
    (single,) = translator.translate(lines[0])
    assert single.text == translator.translate([lines[0]])[0].text
    with pytest.raises(nmt.NMTError, match="beam"):
        translator.translate(lines, beam=0)


def test_samples_come_per_call_and_top_k_one_is_greedy(translator, toy_dir):
    lines = (toy_dir / "test.human").read_text().splitlines()[:6]
    drawn = translator.translate(lines, sample=True, nbest=3, temperature=2.0, seed=11)
    assert all(len(t.texts) == 3 and t.scores == sorted(t.scores, reverse=True) for t in drawn)
    alone = [translator.translate(line, sample=True, nbest=3, temperature=2.0, seed=11)[0] for line in lines]
    assert [t.texts for t in drawn] == [t.texts for t in alone]
    greedy = translator.translate(lines, beam=1)
    assert [t.text for t in translator.translate(lines, sample=True, top_k=1)] == [t.text for t in greedy]
    with pytest.raises(nmt.NMTError, match="decode.top_p: must be in"):
        translator.translate(lines, sample=True, top_p=0.0)
    with pytest.raises(nmt.NMTError, match="decode.temperature: applies only when sampling"):
        translator.translate(lines, temperature=0.5)


def test_attention_is_merged_by_word(translator):
    (t,) = translator.translate("Sonntag, 12. März 1989")
    weights, source, target = merge_attention(t.hypotheses[0].attention, t.src_pieces, t.tokens)
    assert (t.attention.source, t.attention.target, t.attention.weights) == (source, target, weights.tolist())
    assert t.attention.source[:6] == ["Sonntag", ",", "12", ".", "März", "1989"]
    assert all(sum(row) == pytest.approx(1.0, abs=1e-4) for row in t.attention.weights)


def test_an_empty_line_has_an_empty_translation(translator):
    (t,) = translator.translate([""], nbest=2, beam=2)
    assert (t.text, t.score, t.tokens, t.attention.weights) == ("", 0.0, [], [])


def test_load_names_a_missing_checkpoint(tmp_path):
    with pytest.raises(nmt.NMTError, match="checkpoint not found"):
        nmt.Translator.load(tmp_path / "missing.pt")
