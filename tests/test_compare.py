"""`nmt compare`: planning (budgets, --vary, --system, checks before training), the verdicts,
and the whole command on the toy task: trains two variants x two seeds two at a time, scores,
reports, reuses finished runs and translations, resumes a raised budget, and redraws the report."""

import json

import pytest
import sacrebleu
from typer.testing import CliRunner

from nmt.cli import app
from nmt.compare.plan import parse_budget, parse_system, parse_vary, plan
from nmt.compare.results import verdict
from nmt.errors import NMTError
from nmt.fileio import read_lines

runner = CliRunner()
SMALL = [
    "model.embedding=16",
    "model.encoder.hidden=16",
    "model.decoder.hidden=32",
    "tokenizer.vocab_size=120",
    "train.valid_every=6",
    "train.log_every=3",
]


def test_budgets():
    assert parse_budget("20m") == ("train.max_time=1200", "train.max_steps=100000000")
    assert parse_budget("90s")[0] == "train.max_time=90"
    assert parse_budget("1.5h")[0] == "train.max_time=5400"
    assert parse_budget("3000steps") == parse_budget("3000") == ("train.max_steps=3000",)
    for bad in ("fast", "0m", "1.5steps", "20 parsecs"):
        with pytest.raises(NMTError, match="--budget"):
            parse_budget(bad)


def test_vary_gives_every_combination_named_by_its_values():
    variants = parse_vary(["model.attention.type=dot,general", "model.decoder.input_feeding=true,false"])
    assert [v.name for v in variants] == [
        "type=dot, input_feeding=true",
        "type=dot, input_feeding=false",
        "type=general, input_feeding=true",
        "type=general, input_feeding=false",
    ]
    assert variants[1].overrides == ("model.attention.type=dot", "model.decoder.input_feeding=false")
    assert variants[1].slug == "type-dot-input_feeding-false"
    with pytest.raises(NMTError, match="--vary"):
        parse_vary(["model.attention.type"])


def test_system_spec():
    system = parse_system("Bahdanau: model.decoder.style=bahdanau, model.attention.type=bahdanau")
    assert system.name == "Bahdanau" and system.overrides == (
        "model.decoder.style=bahdanau",
        "model.attention.type=bahdanau",
    )
    assert parse_system("as is:").overrides == ()
    with pytest.raises(NMTError, match="--system"):
        parse_system("model.attention.type=dot")


def test_every_variant_is_checked_before_anything_trains(tmp_path):
    with pytest.raises(NMTError, match="variant 'type=dott'.*model.attention.type"):
        plan("toy-luong.yaml", [], [], ["model.attention.type=dot,dott"], "1", "10steps", tmp_path)
    with pytest.raises(NMTError, match="nothing to compare"):
        plan("toy-luong.yaml", [], [], ["model.attention.type=dot"], "1", "10steps", tmp_path)
    with pytest.raises(NMTError, match="folder name"):
        plan("toy-luong.yaml", [], ["a b:", "a-b:"], [], "1", "10steps", tmp_path)
    assert not list(tmp_path.iterdir())


def test_verdicts():
    assert verdict(True, 3, 3) == "survives both"
    assert verdict(True, 2, 3) == "seeds only"
    assert verdict(False, 3, 3) == "bootstrap only"
    assert verdict(False, 1, 3) == "neither"
    assert verdict(None, 1, 1).startswith("bootstrap only")


def compare(toy_dir, out, *extra):
    sets = [x for item in [*SMALL, f"data.dir={toy_dir}"] for x in ("--set", item)]
    args = ["compare", "-c", "toy-luong.yaml", *sets, "--vary", "model.attention.type=dot,general"]
    return runner.invoke(
        app, [*args, "--seeds", "1,2", "--jobs", "2", "--threads", "1", "-o", str(out), *extra]
    )


def test_compare_trains_scores_reports_and_reuses(toy_dir, tmp_path):
    out = tmp_path / "cmp"
    first = compare(toy_dir, out, "--budget", "12steps", "--bootstrap", "50")
    assert first.exit_code == 0, first.output
    assert "4 runs: 2 variants x 2 seeds, 2 at a time, 1 threads each" in first.output
    results = json.loads((out / "results.json").read_text())
    assert [v["name"] for v in results["variants"]] == ["type=dot", "type=general"]
    refs = read_lines(toy_dir / "test.iso")
    for run in results["runs"]:
        assert run["steps"] == 12
        hyps = read_lines(f"{run['dir']}/compare/test.best.beamcfg.txt")
        assert run["BLEU"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)  # real scores
    general = results["variants"][1]
    seeds = [r["BLEU"] for r in results["runs"] if r["variant"] == "type=general"]
    assert general["BLEU"]["min"] == min(seeds) and general["BLEU"]["max"] == max(seeds)
    (comparison,) = results["comparisons"]
    assert comparison["baseline"] == "type=dot" and set(comparison["p_values"]) == {"1", "2"}
    report = (out / "report.md").read_text()
    assert "| type=general | " in report and "## Against type=dot" in report
    assert (out / "curves.png").stat().st_size > 10_000 and (out / "lengths.png").stat().st_size > 10_000

    hyp_file = out / "runs" / "type-dot" / "seed1" / "compare" / "test.best.beamcfg.txt"
    decoded_at = hyp_file.stat().st_mtime_ns
    again = compare(toy_dir, out, "--budget", "12steps", "--bootstrap", "50")
    assert again.exit_code == 0, again.output
    assert "already finished" in (out / "runs" / "type-dot" / "seed1.log").read_text()
    assert hyp_file.stat().st_mtime_ns == decoded_at  # nothing trained, nothing decoded again

    raised = compare(toy_dir, out, "--budget", "18steps", "--bootstrap", "50")
    assert raised.exit_code == 0, raised.output
    assert {r["steps"] for r in json.loads((out / "results.json").read_text())["runs"]} == {18}

    (out / "report.md").unlink()
    redrawn = runner.invoke(app, ["compare", "-o", str(out), "--report-only"])
    assert redrawn.exit_code == 0, redrawn.output
    assert "--budget 18steps" in (out / "report.md").read_text()


def test_failed_runs_end_in_one_line(toy_dir, tmp_path):
    result = compare(tmp_path / "nowhere", tmp_path / "cmp", "--budget", "4steps")
    assert result.exit_code == 2
    assert "4 of 4 runs failed" in result.output and "seed1.log" in result.output
    args = ["compare", "-c", "toy-luong.yaml", "--vary", "model.attention.type=dot,general"]
    unknown = runner.invoke(app, [*args, "-o", str(tmp_path / "b"), "--baseline", "x"])
    assert unknown.exit_code == 2 and "--baseline 'x': not a variant" in unknown.output
    assert not (tmp_path / "b").exists()
