"""scripts/compare_attention.py end to end on the toy task: it trains, scores, plots and reports,
and a rerun reuses the finished runs."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_attention.py"
SMALL = [
    "model.embedding=16",
    "model.encoder.hidden=16",
    "model.decoder.hidden=32",
    "tokenizer.vocab_size=120",
]
SYSTEMS = ["bahdanau", "none", "additive-luong-order", "luong-concat", "luong-general-no-if", "multihead"]


def study(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, check=False
    )


def test_study_trains_scores_and_reports_every_system(toy_dir, tmp_path):
    args = [
        "--config", "toy-luong.yaml", "--data-dir", str(toy_dir), "--steps", "12", "--valid-every", "6",
        "--systems", ",".join(SYSTEMS), "--bootstrap", "20", "--buckets", "1",
        "--out", str(tmp_path / "runs"), "--report", str(tmp_path / "study.md"),
        *[x for item in SMALL for x in ("--set", item)],
    ]  # fmt: skip
    first = study(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    report = (tmp_path / "study.md").read_text()
    for label in ("Bahdanau (paper)", "no attention", "Luong general, no IF", "multi-head (4)"):
        assert f"| {label} |" in report
    assert "1-1 words (n=60)" in report  # toy references are one word: every sentence in bucket 1
    assert "p vs Bahdanau (paper)" in report and "## What the numbers say" in report
    assert "compare_attention.py --config toy-luong.yaml" in report  # the exact command
    assert "initialisation `model.init: uniform`" in report  # the default, stated
    # Luong's concat is the additive score: same weights, same outputs, and the report says so
    assert "additive, Luong order and Luong concat translate every test sentence identically" in report
    for png in ("curves.png", "bleu-by-length.png", "attention.png"):
        assert (tmp_path / "study" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    results = json.loads((tmp_path / "study" / "results.json").read_text())
    assert list(results) == SYSTEMS  # Bahdanau first: the baseline of the significance tests
    assert results["bahdanau"]["p_bleu_beam"] is None
    assert all(0 <= results[n]["p_bleu_beam"] <= 1 for n in SYSTEMS[1:])
    # the same model size everywhere except what the attention itself adds
    assert results["none"]["parameters"] < results["luong-general-no-if"]["parameters"]
    assert all(results[n]["steps"] == 12 and results[n]["tok_per_s"] > 0 for n in SYSTEMS)

    again = study(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("finished earlier, reused") == len(SYSTEMS)
    assert json.loads((tmp_path / "study" / "results.json").read_text())["none"] == results["none"]


def test_study_refuses_an_unknown_system_in_one_line(tmp_path):
    result = study("--systems", "bahdanau,luong-magic", "--report", str(tmp_path / "s.md"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "luong-magic" in result.stderr
