"""The lexical shortlist (issue 41, item 4): IBM Model 1's table, the file and its checks, and
decoding restricted to it: every token from the sentence's own shortlist, the same output
whatever shares the pool, the same output as without when the shortlist allows everything; a
damaged shortlist file (issue 53) is one line wherever it is read, the server's start-up included."""

import dataclasses
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from nmt.cli import app
from nmt.decode.search import search
from nmt.errors import NMTError
from nmt.text.ranking import Source
from nmt.text.shortlist import LexicalTable, Shortlist, fingerprint
from tests.conftest import one_line_error

runner = CliRunner()


def test_ibm_model_1_finds_the_word_each_source_word_translates_to():
    # source 3 <-> target 13, 4 <-> 14, 5 <-> 15, in every combination; 9 only ever beside 13
    pairs = [([3, 4], [14, 13]), ([4, 5], [15, 14]), ([3, 5], [13, 15]), ([3, 9], [13])]
    table = LexicalTable.estimate(pairs, src_size=10, tgt_size=20, iterations=10)
    best = table.best(2, 10)
    assert [best[3, 0], best[4, 0], best[5, 0]] == [13, 14, 15]
    assert best[9, 0] == 13 and best[9, 1] == -1  # one target seen with it: the rest is -1
    assert (best[[0, 1, 2, 6, 7, 8]] == -1).all()  # never seen
    assert list(np.argsort(-table.target_counts, kind="stable")[:3]) == [13, 14, 15]


@pytest.fixture(scope="module")
def translator(translating_model):
    from nmt import Translator

    return Translator.load(translating_model.last, device="cpu")


@pytest.fixture(scope="module")
def shortlist_file(translating_model, toy_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("shortlist") / "shortlist.npz"
    args = ["shortlist", "-m", str(translating_model.last), "--src", str(toy_dir / "train.human")]
    result = runner.invoke(app, [*args, "--tgt", str(toy_dir / "train.iso"), "-o", str(path), "--best", "3"])
    assert result.exit_code == 0, result.output
    assert "the 3 likeliest target pieces of each source piece" in result.stdout
    return path


LINES = ["5. März 1990", "Montag, 12. April 2001", "3.4.1977", "", "17 Oct 1999", "2/9/86"]


def test_every_token_comes_from_the_sentences_own_shortlist(translator, shortlist_file):
    restricted = translator.shortlisted(shortlist_file)
    shortlist = restricted.shortlist
    ids, _ = translator.encode_sources(LINES)
    for line, row, t in zip(LINES, ids, restricted.translate(LINES, beam=3, nbest=3), strict=True):
        allowed = shortlist.allowed(row)
        assert all(allowed[token] for h in t.hypotheses for token in h.tokens), line
    assert shortlist.allowed([])[translator.tok.tgt.sp.piece_to_id("1")]  # a frequent piece


@pytest.mark.parametrize("beam", [1, 3])
def test_a_sentence_decodes_the_same_alone_as_beside_others(translator, shortlist_file, beam):
    restricted = translator.shortlisted(shortlist_file)
    together = restricted.translate(LINES, beam=beam, nbest=beam)
    for line, t in zip(LINES, together, strict=True):
        (alone,) = restricted.translate([line], beam=beam, nbest=beam)
        assert alone.texts == t.texts
        assert [h.score for h in alone.hypotheses] == pytest.approx([h.score for h in t.hypotheses], abs=1e-5)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_shortlist_on_fixed_rows_decodes_as_in_the_continuous_pool(translator, shortlist_file, beam):
    """A shortlist stays on a GPU's fast path (`nmt.decode.rows`, asked for here on the CPU):
    the same translations as the continuous pool, from a kept pool that scored its pieces only
    and then serves a search without a shortlist."""
    restricted = translator.shortlisted(shortlist_file)
    lines = LINES * 3
    narrow = {"beam": beam, "nbest": beam, "batch_size": 4}  # sentences join as others go on
    pooled = restricted.translate(lines, rows="pooled", **narrow)
    before = set(restricted.kept.kept.values())
    fixed = restricted.translate(lines, rows="fixed", attention=False, **narrow)
    assert [t.texts for t in fixed] == [t.texts for t in pooled]
    assert [t.score for t in fixed] == pytest.approx([t.score for t in pooled], abs=1e-5)
    (pool,) = set(restricted.kept.kept.values()) - before
    assert 0 < len(pool.shortlist.ids) < len(translator.tok.tgt)
    everything = translator.translate(lines, rows="fixed", attention=False, **narrow)
    assert set(restricted.kept.kept.values()) - before == {pool} and pool.vocabulary is None  # the same pool
    assert [t.texts for t in everything] == [t.texts for t in translator.translate(lines, **narrow)]


def test_a_shortlist_allowing_everything_decodes_as_without(translator, tmp_path):
    size = len(translator.tok.tgt)
    everything = Shortlist(
        np.tile(np.arange(size, dtype=np.int32), (len(translator.tok.src), 1)),
        np.arange(size, dtype=np.int32),
        fingerprint(translator.tok.src),
        fingerprint(translator.tok.tgt),
        size,
    )
    everything.save(tmp_path / "all.npz")
    wide = translator.shortlisted(tmp_path / "all.npz")
    for beam in (1, 3):
        plain, restricted = translator.translate(LINES, beam=beam), wide.translate(LINES, beam=beam)
        assert [t.text for t in restricted] == [t.text for t in plain]
        assert [t.score for t in restricted] == pytest.approx([t.score for t in plain], abs=1e-4)


def test_prefix_and_constraint_pieces_are_allowed_whatever_the_shortlist(translator, tmp_path):
    size = len(translator.tok.tgt)
    nothing = Shortlist(
        np.full((len(translator.tok.src), 1), -1, dtype=np.int32),
        np.zeros(0, dtype=np.int32),
        fingerprint(translator.tok.src),
        fingerprint(translator.tok.tgt),
        size,
    )  # only EOS and <unk>, and each sentence's own prefix and phrases
    nothing.save(tmp_path / "nothing.npz")
    restricted = translator.shortlisted(tmp_path / "nothing.npz")
    prefix, phrase = "2222-", "-77"
    results = restricted.translate(
        ["5. März 1990"] * 2, prefixes=[prefix, ""], constraints=[{}, {"constraints": [phrase]}], beam=3
    )
    # then only the prefix's own pieces (which the model may repeat), EOS or <unk>
    assert results[0].text.startswith(prefix) and set(results[0].text) <= set(prefix)
    assert phrase in results[1].text and set(results[1].text) <= set(phrase)


def test_the_search_keeps_each_source_to_its_shortlist(translator, shortlist_file):
    restricted = translator.shortlisted(shortlist_file)
    ids, _ = translator.encode_sources(LINES[:3])
    sources = [
        Source(i, row, 20, *restricted.steering([], None, row, f"line {i}", True))
        for i, row in enumerate(ids)
    ]
    results = dict(search(translator.model, sources, translator.cfg, translator.fits, torch.device("cpu")))
    for i, row in enumerate(ids):
        assert all(restricted.shortlist.allowed(row)[t] for t in results[i][0].tokens)


def test_the_command_line_translates_with_a_shortlist_and_refuses_another_models(
    translator, translating_model, shortlist_file, tmp_path
):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["translate", "-i", str(source), "-o", str(out), "-q", "--shortlist", str(shortlist_file)]
    result = runner.invoke(app, [*args, "-m", str(translating_model.last), "--beam", "3"])
    assert result.exit_code == 0, result.output
    expected = translator.shortlisted(shortlist_file).translate(LINES, beam=3)
    assert out.read_text(encoding="utf-8").splitlines() == [t.text for t in expected]
    out.unlink()
    built = Shortlist.load(shortlist_file, translator.tok)
    dataclasses.replace(built, tgt_vocab="another vocabulary").save(tmp_path / "other.npz")
    for extra, message in [
        (["--shortlist", str(tmp_path / "other.npz")], "built for other vocabularies than this model's"),
        (["--shortlist", str(source)], "not a shortlist written by `nmt shortlist`"),
        (["--shortlist", str(tmp_path / "none.npz")], "no such shortlist file"),
        (["--shortlist", str(shortlist_file), "--precision", "int8"], "--precision int8 replaces"),
    ]:
        bad = ["translate", "-m", str(translating_model.last), "-i", str(source), "-o", str(out), "-q"]
        result = runner.invoke(app, [*bad, *extra])
        assert result.exit_code == 2 and message in result.stderr, result.output
        assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_release_stores_its_shortlist_and_refuses_another_models(
    translator, translating_model, shortlist_file, tmp_path
):
    from nmt.checkpoint import check_manifest

    release = ["release", str(translating_model.last), "--shortlist"]
    result = runner.invoke(app, [*release, str(shortlist_file), "-o", str(tmp_path / "rel")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "rel" / "shortlist.npz").read_bytes() == shortlist_file.read_bytes()
    check_manifest(tmp_path / "rel")
    assert "shortlist.npz" in (tmp_path / "rel" / "manifest.json").read_text()
    other = tmp_path / "other.npz"
    dataclasses.replace(Shortlist.load(shortlist_file, translator.tok), src_vocab="another").save(other)
    result = runner.invoke(app, [*release, str(other), "-o", str(tmp_path / "other")])
    assert result.exit_code == 2 and "built for other vocabularies" in result.stderr
    assert not (tmp_path / "other").exists()


def test_a_shortlist_for_files_of_different_lengths_is_refused(translating_model, tmp_path):
    (tmp_path / "a").write_text("1\n2\n3\n", encoding="utf-8")
    (tmp_path / "b").write_text("1\n2\n", encoding="utf-8")
    args = ["shortlist", "-m", str(translating_model.last), "--src", str(tmp_path / "a")]
    result = runner.invoke(app, [*args, "--tgt", str(tmp_path / "b"), "-o", str(tmp_path / "s.npz")])
    assert result.exit_code == 2 and "ends at line 2; --src and --tgt must be line-aligned" in result.stderr
    assert not (tmp_path / "s.npz").exists()
    with pytest.raises(NMTError, match="no training pair"):
        LexicalTable.estimate([([], [1])], 5, 5, 1)


def arrays_with(**changes):
    """A writer of the built shortlist's arrays with `changes` (each a function of them)."""

    def write(good, path):
        with np.load(good) as data:
            arrays = dict(data)
        np.savez_compressed(path, **{**arrays, **{name: change(arrays) for name, change in changes.items()}})

    return write


def bytes_with(change):
    """A writer of the built shortlist's bytes as `change` makes them."""
    return lambda good, path: path.write_bytes(change(good.read_bytes()))


def flipped(data: bytes) -> bytes:
    """A byte in the middle (inside a member's compressed data) changed: its CRC-32 fails."""
    return data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1 :]


DAMAGED = {
    "ids past the vocabulary": (
        arrays_with(best=lambda a: a["best"] + 1000),
        "its 'best' array holds the target id",
    ),
    "negative ids": (
        arrays_with(frequent=lambda a: a["frequent"] - 1000),
        "its 'frequent' array holds the target id -",
    ),
    "float ids": (arrays_with(best=lambda a: a["best"].astype(np.float32)), "its 'best' array holds float32"),
    "float frequencies": (
        arrays_with(frequent=lambda a: a["frequent"] + 0.5),
        "its 'frequent' array holds float64",
    ),
    "another target size": (
        arrays_with(tgt_size=lambda a: np.array(7)),
        "built for a target vocabulary of 7 pieces",
    ),
    "rows missing": (arrays_with(best=lambda a: a["best"][:5]), "its arrays have the shapes best (5, 3)"),
    "other arrays": (lambda good, path: np.savez(path, a=np.arange(3)), "(no 'format' array)"),
    "a pickle": (lambda good, path: path.write_bytes(pickle.dumps({"best": [1]})), "not an .npz archive"),
    "random bytes": (bytes_with(lambda b: np.random.default_rng(0).bytes(len(b))), "not an .npz archive"),
    "cut short": (bytes_with(lambda b: b[: len(b) // 2]), "not an .npz archive, or one cut short"),
    "empty": (bytes_with(lambda b: b""), "not an .npz archive"),
    "a damaged member": (bytes_with(flipped), "a damaged shortlist file"),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_shortlist_is_one_line_before_anything_is_translated(
    translating_model, shortlist_file, tmp_path, case
):
    write, message = DAMAGED[case]
    bad, source, out = tmp_path / "bad.npz", tmp_path / "in.txt", tmp_path / "out.txt"
    write(shortlist_file, bad)
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["translate", "-m", str(translating_model.last), "-i", str(source), "-o", str(out), "-q"]
    line = one_line_error(runner.invoke(app, [*args, "--shortlist", str(bad)]), str(bad), message)
    assert "nmt shortlist -m MODEL" in line  # how to fix it
    assert not out.exists()


def test_the_server_refuses_a_damaged_shortlist_at_start_up(translating_model, shortlist_file, tmp_path):
    """In its own process, as `nmt serve` runs: exit 2 and one line before it listens, not a
    500 on the first request that reaches past the vocabulary."""
    bad = tmp_path / "bad.npz"
    DAMAGED["ids past the vocabulary"][0](shortlist_file, bad)
    serve = [sys.executable, "-m", "nmt", "serve", "-m", str(translating_model.last), "--port", "0"]
    result = subprocess.run(
        [*serve, "--device", "cpu", "--shortlist", str(bad)], capture_output=True, text=True, timeout=300
    )
    one_line_error(result, str(bad), "outside this model's vocabulary")
