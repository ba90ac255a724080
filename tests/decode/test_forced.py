"""Forced decoding: `Translator.score` and `nmt score` agree with the search and the trainer."""

import json

import pytest
from typer.testing import CliRunner

from nmt.checkpoint import load_checkpoint
from nmt.cli import app
from nmt.decode.translator import Translator, load_translator

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_forced_log_prob_of_the_beam_output_is_its_search_log_prob(toy_model, toy_dir):
    sources = (toy_dir / "test.human").read_text().splitlines()[:20]
    translator = load_translator([toy_model.last], {"beam": 3, "length_penalty": "none"})
    translations = translator.translate(sources)
    hyps = [t.hypotheses[0] for t in translations]
    # score the very token sequences the search produced (a re-encoded text may segment otherwise)
    forced = translator.score(sources, [t.text for t in translations])
    compared = 0
    for t, h, f in zip(translations, hyps, forced, strict=True):
        if translator.tok.tgt.id_to_piece(h.tokens) == f.tgt_pieces:
            assert f.log_prob == pytest.approx(h.log_prob, abs=1e-4)
            assert f.log_prob == pytest.approx(h.score, abs=1e-4)  # no length penalty: score = log-prob
            assert f.attention.shape == (len(f.tgt_pieces), len(t.src_pieces))
            assert f.attention.numpy() == pytest.approx(h.attention[:, : len(t.src_pieces)].numpy(), abs=1e-5)
            compared += 1
    assert compared >= 15


def test_nmt_score_matches_nmt_translate_scores(toy_model, toy_dir, tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("".join(line + "\n" for line in (toy_dir / "test.human").read_text().splitlines()[:12]))
    out = invoke("translate", "-m", toy_model.last, "-i", src, "--beam", 4, "--alpha", 0, "--scores").stdout
    rows = [line.split("\t") for line in out.splitlines()]
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("".join(text + "\n" for _, text in rows))
    result = invoke("score", "-m", toy_model.last, "--src", src, "--ref", hyp, "-o", tmp_path / "s.jsonl")
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(records) == 12
    translator = load_translator([toy_model.last], {})
    same = 0
    for (score, text), rec in zip(rows, records, strict=True):
        pieces = translator.tok.tgt.id_to_piece(translator.tok.tgt.encode(text)) + ["</s>"]
        assert [p for p, _ in rec["pieces"]] == pieces
        assert sum(lp for _, lp in rec["pieces"]) == pytest.approx(rec["log_prob"], abs=1e-3)
        assert sum(lp for _, lp in rec["words"]) == pytest.approx(rec["log_prob"], abs=1e-3)
        same += abs(float(score) - rec["log_prob"]) < 2e-4
    assert same >= 10  # the few others are outputs whose text re-encodes to other pieces
    assert "12 pairs" in result.stderr and "NLL/token" in result.stderr


def test_summed_token_nll_equals_the_trainers_validation_loss(toy_model, toy_dir):
    loaded = load_checkpoint(toy_model.last)
    translator = Translator.from_config(loaded.model, loaded.tokenizers, loaded.config, "cpu")
    sources = (toy_dir / "valid.human").read_text().splitlines()
    targets = (toy_dir / "valid.iso").read_text().splitlines()
    scores = translator.score(sources, targets)
    nll = -sum(s.log_prob for s in scores) / sum(s.length for s in scores)
    assert nll == pytest.approx(toy_model.valid_loss, rel=1e-4)


def test_an_ensemble_scores_as_one_model_and_each_model_alone(toy_model, toy_dir, tmp_path):
    src, ref = toy_dir / "test.human", toy_dir / "test.iso"
    each = invoke("score", "-m", toy_model.last, "-m", toy_model.last, "--src", src, "--ref", ref)
    both = invoke(
        "score", "-m", toy_model.last, "-m", toy_model.last, "--ensemble", "--src", src, "--ref", ref
    )
    each_records = [json.loads(line) for line in each.stdout.splitlines()]
    both_records = [json.loads(line) for line in both.stdout.splitlines()]
    assert len(each_records) == 2 * len(both_records)
    # an ensemble of a model with itself is that model
    assert [r["log_prob"] for r in both_records] == pytest.approx(
        [r["log_prob"] for r in each_records[: len(both_records)]], abs=1e-4
    )
    assert len(each.stderr.strip().splitlines()) == 2 and " + " in both.stderr


def test_score_refuses_files_of_different_lengths(toy_model, toy_dir, tmp_path):
    short = tmp_path / "short.iso"
    short.write_text("2000-01-01\n")
    out = tmp_path / "s.jsonl"
    result = runner.invoke(
        app,
        [
            "score",
            "-m",
            str(toy_model.last),
            "--src",
            str(toy_dir / "test.human"),
            "--ref",
            str(short),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 2
    assert "one line per sentence" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_the_attention_export_holds_words_unless_pieces_are_asked_for(toy_model, toy_dir, tmp_path):
    src = toy_dir / "test.human"
    for extra, unit in (([], "words"), (["--pieces"], "pieces")):
        att = tmp_path / f"{unit}.jsonl"
        invoke(
            "translate",
            "-m",
            toy_model.last,
            "-i",
            src,
            "-o",
            tmp_path / "out.txt",
            "--attention",
            att,
            *extra,
        )
        record = json.loads(att.read_text().splitlines()[0])
        assert record["unit"] == unit and record["source"][-1] == "</s>"
        assert len(record["weights"]) == len(record["target"]) and len(record["weights"][0]) == len(
            record["source"]
        )
        if unit == "words":
            assert "\u2581" not in "".join(record["source"] + record["target"])
            assert sum(record["weights"][0]) == pytest.approx(1.0, abs=1e-3)
        else:
            assert record["source"][0].startswith("\u2581")
