"""Alignments from attention, AER, the toy task's gold links, and `nmt align` end to end."""

import numpy as np
import pytest
from typer.testing import CliRunner

from nmt.cli import app
from nmt.data.toy import write_toy_corpus
from nmt.errors import NMTError
from nmt.evaluate.alignment import alignment_error_rate, method
from nmt.pharaoh import parse_pharaoh
from nmt.words import text_words

runner = CliRunner()


def test_aer_precision_and_recall_on_hand_made_cases():
    sure, possible = {(0, 0), (1, 1)}, {(2, 1)}
    perfect = alignment_error_rate([{(0, 0), (1, 1)}], [(sure, possible)])
    assert (perfect.aer, perfect.precision, perfect.recall) == (0.0, 1.0, 1.0)
    # one sure hit, one possible-only link, one wrong link: |A|=3, |S|=2, |A∩S|=1, |A∩P|=2
    mixed = alignment_error_rate([{(0, 0), (2, 1), (1, 0)}], [(sure, possible)])
    assert mixed.aer == pytest.approx(1 - (1 + 2) / (3 + 2))
    assert mixed.precision == pytest.approx(2 / 3) and mixed.recall == pytest.approx(1 / 2)
    # a possible link costs nothing when missed, and counts when found
    assert alignment_error_rate([{(0, 0), (1, 1), (2, 1)}], [(sure, possible)]).aer == 0.0
    # sums run over the corpus, not averages of sentences
    corpus = alignment_error_rate([{(0, 0)}, set()], [({(0, 0)}, set()), ({(0, 0)}, set())])
    assert corpus.aer == pytest.approx(1 - 2 / 3) and corpus.recall == 0.5


def test_pharaoh_parsing_and_its_errors():
    sure, possible = parse_pharaoh("0-0 2?1 1-1", "gold:1")
    assert sure == {(0, 0), (1, 1)} and possible == {(0, 0), (1, 1), (2, 1)}
    assert parse_pharaoh("", "gold:2") == (set(), set())
    for bad in ("0-", "a-1", "0:1", "1-2-3"):
        with pytest.raises(NMTError, match="gold:3: .* is not an alignment link"):
            parse_pharaoh(bad, "gold:3")


def test_argmax_links_each_target_word_and_threshold_keeps_the_strong_weights():
    matrix = np.array([[0.7, 0.3], [0.45, 0.55]])
    assert method("argmax").links(matrix) == {(0, 0), (1, 1)}
    assert method("threshold", 0.4).links(matrix) == {(0, 0), (0, 1), (1, 1)}
    with pytest.raises(NMTError, match="unknown alignment method 'best'"):
        method("best")


def test_the_toy_corpus_writes_gold_alignments_within_its_sentences(tmp_path):
    write_toy_corpus(tmp_path, seed=5, sizes={"test": 200})
    sources = (tmp_path / "test.human").read_text().splitlines()
    targets = (tmp_path / "test.iso").read_text().splitlines()
    gold = (tmp_path / "test.align").read_text().splitlines()
    assert len(gold) == 200
    for src, tgt, line in zip(sources, targets, gold, strict=True):
        sure, possible = parse_pharaoh(line, "gold")
        assert {j for _, j in sure} == {0, 2, 4}  # year, month, day of the ISO date's five words
        assert {j for i, j in possible - sure} == {1, 3}  # the separators, possible links only
        assert all(i < len(text_words(src)) and j < len(text_words(tgt)) for i, j in possible)
        year = [text_words(src)[i] for i, j in sure if j == 0]
        assert year == [tgt[:4]]


@pytest.fixture(scope="module")
def files(toy_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("align")
    n = 30
    for ext in ("human", "iso", "align"):
        lines = (toy_dir / f"test.{ext}").read_text().splitlines()[:n]
        (folder / f"t.{ext}").write_text("".join(line + "\n" for line in lines))
    return folder


def align(*args):
    return runner.invoke(app, ["align", *map(str, args)])


def test_nmt_align_forced_and_free_with_aer(toy_model, files, tmp_path):
    out = tmp_path / "out.align"
    result = align(
        "-m",
        toy_model.last,
        "--src",
        files / "t.human",
        "--ref",
        files / "t.iso",
        "--gold",
        files / "t.align",
        "-o",
        out,
    )
    assert result.exit_code == 0, result.output
    assert "argmax (forced on the reference): AER" in result.stdout
    lines = out.read_text().splitlines()
    assert len(lines) == 30
    for line, ref in zip(lines, (files / "t.iso").read_text().splitlines(), strict=True):
        links = parse_pharaoh(line, "out")[0]
        assert sorted(j for _, j in links) == list(range(len(text_words(ref))))  # argmax: one per word
    result = align(
        "-m",
        toy_model.last,
        "--src",
        files / "t.human",
        "--gold",
        files / "t.align",
        "--method",
        "threshold",
        "-o",
        out,
    )
    assert result.exit_code == 0, result.output
    assert "threshold (free decoding): AER" in result.stdout


def test_an_empty_input_line_gets_an_empty_alignment_line(toy_model, tmp_path):
    src, ref = tmp_path / "s.txt", tmp_path / "r.txt"
    src.write_text("March 3, 1999\n\n")
    ref.write_text("1999-03-03\n\n")
    for extra in ([], ["--ref", ref]):
        result = align("-m", toy_model.last, "--src", src, *extra, "-o", tmp_path / "o.align")
        assert result.exit_code == 0, result.output
        lines = (tmp_path / "o.align").read_text().split("\n")
        assert lines[1] == "" and lines[0] != "" and len(lines) == 3


@pytest.mark.parametrize(
    "case, message",
    [
        ("short-ref", "one line per sentence"),
        ("short-gold", "one line per sentence"),
        ("outside", "link 9-0 is outside the sentence"),
        ("malformed", "'0x1' is not an alignment link"),
        ("method", "Invalid value for '--method'"),
        ("folder", "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2_with_nothing_written(
    toy_model, files, tmp_path, case, message
):
    src, ref, gold = files / "t.human", files / "t.iso", files / "t.align"
    out = tmp_path / "out.align"
    out.write_text("what the user had\n")
    extra = []
    if case == "short-ref":
        ref = tmp_path / "short.iso"
        ref.write_text("2000-01-01\n")
    if case in ("short-gold", "outside", "malformed"):
        lines = gold.read_text().splitlines()
        lines = lines[:3] if case == "short-gold" else ["9-0" if case == "outside" else "0x1", *lines[1:]]
        gold = tmp_path / "g.align"
        gold.write_text("".join(line + "\n" for line in lines))
    if case == "method":
        extra = ["--method", "best"]
    if case == "folder":
        out = tmp_path / "missing" / "out.align"
    result = align("-m", toy_model.last, "--src", src, "--ref", ref, "--gold", gold, *extra, "-o", out)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    if case != "folder":
        assert out.read_text() == "what the user had\n"
