"""`nmt eval` against sacreBLEU itself, on real text when Multi30k is present."""

import json
import os
import random
import stat

import pytest
import sacrebleu
from typer.testing import CliRunner

from nmt.cli import app
from nmt.errors import NMTError
from nmt.evaluate.scoring import EvalOptions, bleu_interval, evaluate
from nmt.fileio import atomic_write_text
from tests.conftest import MULTI30K

runner = CliRunner()


def corpus():
    """References with a wide range of lengths and two imperfect systems."""
    if (MULTI30K / "val.en").is_file():
        refs = (MULTI30K / "val.en").read_text().splitlines()[:300]
        src = (MULTI30K / "val.de").read_text().splitlines()[:300]
    else:
        rng = random.Random(0)
        words = "a man in an orange hat staring at something while the dog runs on grass".split()
        refs = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 35))) for _ in range(300)]
        src = refs
    rng = random.Random(1)

    def damage(line, p):
        return " ".join(w for w in line.split() if rng.random() > p) or "x"

    return src, refs, [damage(r, 0.2) for r in refs], [damage(r, 0.35) for r in refs]


def test_corpus_scores_equal_sacrebleu():
    src, refs, a, b = corpus()
    second = [r.lower() for r in refs]
    report = evaluate({"a": a, "b": b}, [refs, second], EvalOptions(bootstrap=0))
    for system, hyps in zip(report.systems, (a, b), strict=True):
        assert system.scores["BLEU"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs, second]).score)
        assert system.scores["chrF"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs, second]).score)
        assert system.scores["TER"] == pytest.approx(sacrebleu.corpus_ter(hyps, [refs, second]).score)


def test_tokenizer_lowercase_and_chrf_plus_reach_sacrebleu():
    _, refs, a, _ = corpus()
    report = evaluate({"a": a}, [refs], EvalOptions(tokenize="intl", lowercase=True, chrf_word_order=2))
    (system,) = report.systems
    assert system.scores["BLEU"] == pytest.approx(
        sacrebleu.corpus_bleu(a, [refs], tokenize="intl", lowercase=True).score
    )
    assert system.scores["chrF++"] == pytest.approx(
        sacrebleu.CHRF(word_order=2, lowercase=True).corpus_score(a, [refs]).score
    )
    assert "tok:intl" in report.signatures["BLEU"] and "nw:2" in report.signatures["chrF++"]


@pytest.mark.parametrize("by", ["ref", "src"])
def test_each_bucket_is_sacrebleu_on_that_buckets_lines(by):
    src, refs, a, _ = corpus()
    report = evaluate({"a": a}, [refs], EvalOptions(buckets=(5, 10, 15), by=by, bootstrap=0), src)
    side = src if by == "src" else refs
    bounds = [(1, 5), (6, 10), (11, 15), (16, 10**9)]
    for bucket, (lo, hi) in zip(report.systems[0].buckets, bounds, strict=True):
        idx = [i for i, line in enumerate(side) if lo <= len(line.split()) <= hi]
        assert bucket.sentences == len(idx)
        if idx:
            expected = sacrebleu.corpus_bleu([a[i] for i in idx], [[refs[i] for i in idx]]).score
            assert bucket.bleu == pytest.approx(expected)
        else:
            assert bucket.bleu is None
    assert sum(b.sentences for b in report.systems[0].buckets) == len(refs)


def test_bootstrap_is_reproducible_and_identical_systems_are_not_significant():
    _, refs, a, b = corpus()
    opts = EvalOptions(bootstrap=200, seed=7)
    first = evaluate({"a": a, "b": b, "same": a}, [refs], opts)
    second = evaluate({"a": a, "b": b, "same": a}, [refs], opts)
    assert first.systems[1].p_values == second.systems[1].p_values
    assert first.systems[1].p_values["BLEU"] < 0.05  # 35% of words dropped vs 20%: clearly worse
    assert first.systems[2].p_values == {"BLEU": 1.0, "chrF": 1.0, "TER": 1.0}
    assert all(b.p_bleu is not None for b in first.systems[1].buckets if b.sentences)
    assert "seed 7" in first.significance


def test_bleu_interval_is_seeded_and_narrows_with_more_sentences():
    _, refs, a, _ = corpus()
    opts = EvalOptions(seed=7)
    ci = bleu_interval(a, [refs], 200, opts)
    assert ci == bleu_interval(a, [refs], 200, opts) > 0  # the same seed, the same interval
    assert bleu_interval(a * 4, [refs * 4], 200, opts) < ci  # 4x the lines: about half as wide
    with pytest.raises(NMTError, match="at least 40"):
        bleu_interval(a, [refs], 10, opts)


def write_corpus(tmp_path):
    src, refs, a, b = corpus()
    for name, lines in (("src.txt", src), ("ref", refs), ("a", a), ("b", b)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    return tmp_path


def test_eval_cli_table_json_plot_and_details(tmp_path):
    d = write_corpus(tmp_path)
    args = [
        "eval",
        "--hyp",
        str(d / "a"),
        "--hyp",
        str(d / "b"),
        "--ref",
        str(d / "ref"),
        "--src",
        str(d / "src.txt"),
        "--bootstrap",
        "100",
    ]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "p(BLEU)" in table.stdout and "BLEU by ref length" in table.stdout
    assert "paired bootstrap resampling, 100 resamples" in table.stdout
    result = runner.invoke(
        app, [*args, "--json", "--plot", str(d / "bars.png"), "--details", str(d / "d.tsv")]
    )
    report = json.loads(result.stdout)
    assert [s["name"] for s in report["systems"]] == [str(d / "a"), str(d / "b")]
    rows = (d / "d.tsv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 300 and rows[0].startswith("system\tline")

    import matplotlib.image

    image = matplotlib.image.imread(d / "bars.png")
    assert image.shape[0] >= 400 and image.shape[1] >= 600 and image.std() > 0.05


@pytest.mark.parametrize(
    "make,args,message",
    [
        (
            lambda d: (d / "h").write_text("a\n"),
            ["--hyp", "h", "--ref", "ref"],
            "has 1 lines but the references have",
        ),
        (lambda d: (d / "e").write_text(""), ["--hyp", "a", "--ref", "e"], "reference file is empty"),
        (lambda d: None, ["--hyp", "a", "--ref", "ref", "--tokenize", "moses"], "is not one of '13a'"),
        (
            lambda d: (d / "u").write_bytes(b"ok\n\xff\n"),
            ["--hyp", "u", "--ref", "ref"],
            "line 2 is not valid UTF-8",
        ),
        (lambda d: None, ["--hyp", "a", "--ref", "ref", "--buckets", "10,5"], "increasing"),
        (lambda d: None, ["--hyp", "a", "--ref", "ref", "--by", "src"], "--by src needs the source"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(tmp_path, make, args, message):
    d = write_corpus(tmp_path)
    make(d)
    paths = [str(d / a) if (d / a).exists() else a for a in args]
    result = runner.invoke(app, ["eval", *paths])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("plot", ["x.png", "./x.png", "sub/../x.png"])
def test_details_and_plot_on_one_path_are_refused_before_anything_is_written(tmp_path, plot):
    """`--details X --plot X` wrote both and kept one, with exit 0."""
    d = write_corpus(tmp_path)
    (d / "sub").mkdir()
    before = sorted(p.name for p in d.iterdir())
    args = ["eval", "--hyp", str(d / "a"), "--ref", str(d / "ref"), "--bootstrap", "0"]
    result = runner.invoke(app, [*args, "--plot", str(d / plot), "--details", str(d / "x.png")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    clash = f"--details {d / 'x.png'}: is also this command's --plot output"
    assert result.stderr == f"error: {clash}; give each output its own path\n"
    assert sorted(p.name for p in d.iterdir()) == before


def test_atomic_write_never_replaces_a_device():
    atomic_write_text(os.devnull, "nothing\n")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def mecab_missing() -> bool:
    try:
        import ipadic  # noqa: F401
        import MeCab  # noqa: F401
    except ImportError:
        return True
    return False


@pytest.mark.skipif(not mecab_missing(), reason="MeCab is installed: ja-mecab loads")
def test_a_tokenizer_whose_package_is_missing_is_one_line_before_any_work(tmp_path):
    d = write_corpus(tmp_path)
    expected = (
        "error: --tokenize ja-mecab: sacreBLEU cannot load this tokenizer: it needs MeCab and its IPA "
        "dictionary: pip install 'sacrebleu[ja]'; or choose another --tokenize"
    )
    result = runner.invoke(
        app, ["eval", "--hyp", str(d / "a"), "--ref", str(d / "ref"), "--tokenize", "ja-mecab"]
    )
    assert result.exit_code == 2 and result.stderr.strip() == expected, result.output
    # checked before the models are loaded (this one does not exist) and --src is read
    missing = ["-m", str(tmp_path / "no.pt"), "--src", str(tmp_path / "no.src"), "--ref", str(d / "ref")]
    result = runner.invoke(app, ["eval", *missing, "--tokenize", "ja-mecab"])
    assert result.exit_code == 2 and result.stderr.strip() == expected, result.output
    with pytest.raises(NMTError, match=r"pip install 'sacrebleu\[ja\]'"):
        evaluate({"a": ["x"]}, [["x"]], EvalOptions(tokenize="ja-mecab"))
