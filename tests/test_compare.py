"""`nmt compare`: planning (budgets, --vary, --system, checks before training), the verdicts,
the evaluation sets, and the whole command on the toy task: trains two variants x two seeds two
at a time, scores every set (the split, its joined lines, an extra file pair), draws forced
attention, reports, reuses finished runs and translations, resumes a raised budget, and redraws
the report."""

import json

import pytest
import sacrebleu
from typer.testing import CliRunner

from nmt.cli import app
from nmt.compare.decoding import read_hyps
from nmt.compare.plan import parse_budget, parse_system, parse_vary, plan
from nmt.compare.results import verdict
from nmt.compare.sets import check_line, length_groups, parse_extra, parse_join
from nmt.errors import NMTError
from nmt.fileio import read_lines
from tests.conftest import assert_image

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
    assert parse_budget("20m") == ("train.max_time=1200", "train.max_steps=100000000", "train.max_epochs=0")
    assert parse_budget("90s")[0] == "train.max_time=90"
    assert parse_budget("1.5h")[0] == "train.max_time=5400"
    # a step budget is not cut short by the config's own time or epoch limit
    assert parse_budget("3000steps") == parse_budget("3000")
    assert parse_budget("3000") == ("train.max_steps=3000", "train.max_time=0", "train.max_epochs=0")
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


def test_join_and_extra_options():
    assert parse_join("2,3,4") == (2, 3, 4) and parse_join(None) == ()
    for bad in ("1", "2,2", "two"):
        with pytest.raises(NMTError, match="--join"):
            parse_join(bad)
    assert parse_extra(["iwslt = data/iwslt14/valid"]) == (("iwslt", "data/iwslt14/valid"),)
    for bad in ("data/iwslt14/valid", "../x=data/iwslt14/valid"):
        with pytest.raises(NMTError, match="NAME=PREFIX"):
            parse_extra([bad])


def test_length_groups(toy_dir):
    from nmt.compare.sets import evaluation_sets
    from nmt.config import load_config

    cfg = load_config("toy-luong.yaml", [f"data.dir={toy_dir}"])
    sets = evaluation_sets(cfg, "test", (2, 3), (("other", str(toy_dir / "valid")),))
    assert [(s.name, s.kind) for s in sets] == [
        ("test", "split"),
        ("joined-2", "joined"),
        ("joined-3", "joined"),
        ("other", "extra"),
    ]
    assert len(sets[1].sources) == len(sets[0].sources) // 2
    assert sets[2].refs[0] == " ".join(sets[0].refs[:3])
    groups = length_groups(sets)
    assert {g: [s.name for s in m] for g, m in groups.items()} == {
        "test": ["test"],
        "stress": ["test", "joined-2", "joined-3"],
        "other": ["other"],
    }
    with pytest.raises(NMTError, match="nope.human not found"):
        evaluation_sets(cfg, "test", (), (("x", str(toy_dir / "valid")), ("y", str(toy_dir / "nope"))))
    with pytest.raises(NMTError, match="must differ"):
        evaluation_sets(cfg, "test", (2,), (("joined-2", str(toy_dir / "valid")),))
    with pytest.raises(NMTError, match="--join 61: the test split has only 60 lines"):
        evaluation_sets(cfg, "test", (61,), ())
    with pytest.raises(NMTError, match="--heatmap 61: the test split has lines 1 to 60"):
        check_line(sets[0], 61)


def test_the_split_is_read_under_the_configs_own_file_name(toy_dir):
    """`--split test` is the config's `data.test`, whatever its files are called."""
    from nmt.compare.sets import evaluation_sets
    from nmt.config import load_config

    cfg = load_config("toy-luong.yaml", [f"data.dir={toy_dir}", "data.test=valid"])
    (split,) = evaluation_sets(cfg, "test", (), ())
    assert split.name == "test" and split.refs == read_lines(toy_dir / "valid.iso")


def compare(toy_dir, out, *extra):
    sets = [x for item in [*SMALL, f"data.dir={toy_dir}"] for x in ("--set", item)]
    args = ["compare", "-c", "toy-luong.yaml", *sets, "--vary", "model.attention.type=dot,general"]
    return runner.invoke(
        app, [*args, "--seeds", "1,2", "--jobs", "2", "--threads", "1", "-o", str(out), *extra]
    )


def test_compare_trains_scores_reports_and_reuses(toy_dir, tmp_path):
    out = tmp_path / "cmp"
    sets = ["--join", "2,3", "--extra", f"other={toy_dir / 'valid'}", "--heatmap", "2"]
    first = compare(toy_dir, out, "--budget", "12steps", "--bootstrap", "50", *sets)
    assert first.exit_code == 0, first.output
    assert "4 runs: 2 variants x 2 seeds, 2 at a time, 1 threads each" in first.output
    results = json.loads((out / "results.json").read_text())
    assert [v["name"] for v in results["variants"]] == ["type=dot", "type=general"]
    refs = read_lines(toy_dir / "test.iso")
    other_refs = read_lines(toy_dir / "valid.iso")
    for run in results["runs"]:
        assert run["steps"] == 12 and run["train_tokens_per_s"] > 0
        assert 100 < run["train_peak_mib"] < 4000  # a torch process's own peak: measured
        hyps = out / "hyps" / run["variant"].replace("=", "-") / f"seed{run['seed']}"
        test_hyps = read_hyps(hyps / "test.best.beamcfg.txt.gz")
        bleu = sacrebleu.corpus_bleu(test_hyps, [refs])
        assert run["BLEU"] == round(bleu.score, 2)  # real scores
        assert run["length_ratio"] == round(bleu.sys_len / bleu.ref_len, 3)
        other = read_hyps(hyps / "other.best.beamcfg.txt.gz")
        assert run["scores"]["other"]["BLEU"] == round(sacrebleu.corpus_bleu(other, [other_refs]).score, 2)
        assert len(read_hyps(hyps / "joined-3.best.beamcfg.txt.gz")) == len(refs) // 3
        assert set(run["lengths"]) == {"test", "stress", "other"}
    assert results["lengths"]["stress"]["sets"] == ["test", "joined-2", "joined-3"]
    assert sum(results["lengths"]["stress"]["sentences"]) == len(refs) + len(refs) // 2 + len(refs) // 3
    filled = [c for v in results["variants"] for c in v["lengths"]["test"] if c["bleu"] is not None]
    assert filled and all(c["ci"] is not None and c["ci"] >= 0 for c in filled)
    assert [p["variant"] for p in results["heatmaps"]] == ["type=dot", "type=general"]
    panel = results["heatmaps"][0]
    assert panel["line"] == 2 and panel["reference"] == refs[1]
    assert len(panel["matrix"]) == len(panel["target_words"]) and panel["target_words"][-1] == "</s>"
    assert all(abs(sum(row) - 1) < 0.01 for row in panel["matrix"])  # each output word's weights
    general = results["variants"][1]
    seeds = [r["BLEU"] for r in results["runs"] if r["variant"] == "type=general"]
    assert general["BLEU"]["min"] == min(seeds) and general["BLEU"]["max"] == max(seeds)
    (comparison,) = results["comparisons"]
    assert comparison["baseline"] == "type=dot" and set(comparison["p_values"]) == {"1", "2"}
    report = (out / "report.md").read_text()
    assert "| type=general | " in report and "## Against type=dot" in report
    assert "### stress: test + joined-2 + joined-3" in report and "## Every test set" in report
    assert "Length ratio: output tokens / reference tokens" in report
    for png in ("curves", "lengths", "heatmaps"):
        width, height = assert_image(out / f"{png}.png")
        assert width > 300 and height > 200

    hyp_file = out / "hyps" / "type-dot" / "seed1" / "joined-2.best.beamcfg.txt.gz"
    decoded_at = hyp_file.stat().st_mtime_ns
    again = compare(toy_dir, out, "--budget", "12steps", "--bootstrap", "50", *sets)
    assert again.exit_code == 0, again.output
    assert "already finished" in (out / "runs" / "type-dot" / "seed1.log").read_text()
    assert hyp_file.stat().st_mtime_ns == decoded_at  # nothing trained, nothing decoded again

    raised = compare(toy_dir, out, "--budget", "18steps", "--bootstrap", "50", *sets)
    assert raised.exit_code == 0, raised.output
    assert {r["steps"] for r in json.loads((out / "results.json").read_text())["runs"]} == {18}

    (out / "report.md").unlink()
    redrawn = runner.invoke(app, ["compare", "-o", str(out), "--report-only"])
    assert redrawn.exit_code == 0, redrawn.output
    assert "--budget 18steps --join 2,3 --heatmap 2 --bootstrap 50" in (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    del results["format"]  # as an older nmt compare wrote it
    (out / "results.json").write_text(json.dumps(results))
    old = runner.invoke(app, ["compare", "-o", str(out), "--report-only"])
    assert old.exit_code == 2 and "older nmt compare" in old.output


def test_failed_runs_end_in_one_line(toy_dir, tmp_path):
    nowhere = compare(tmp_path / "nowhere", tmp_path / "cmp", "--budget", "4steps")
    assert nowhere.exit_code == 2 and "nowhere/test.human: file not found" in nowhere.output
    assert not (tmp_path / "cmp").exists()  # the test split is read before anything trains
    no_train = tmp_path / "no-train"
    no_train.mkdir()
    for name in ("test.human", "test.iso"):
        (no_train / name).symlink_to(toy_dir / name)
    result = compare(no_train, tmp_path / "cmp", "--budget", "4steps")
    assert result.exit_code == 2
    assert "4 of 4 runs failed" in result.output and "seed1.log" in result.output
    args = ["compare", "-c", "toy-luong.yaml", "--vary", "model.attention.type=dot,general"]
    unknown = runner.invoke(app, [*args, "-o", str(tmp_path / "b"), "--baseline", "x"])
    assert unknown.exit_code == 2 and "--baseline 'x': not a variant" in unknown.output
    here = ["--set", f"data.dir={toy_dir}", "-o", str(tmp_path / "b")]
    missing = runner.invoke(app, [*args, *here, "--extra", f"x={tmp_path / 'none'}"])
    assert missing.exit_code == 2 and "none.human not found" in missing.output
    assert not (tmp_path / "b").exists()
