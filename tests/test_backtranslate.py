"""`nmt backtranslate`: a reverse model's translations of monolingual text as tagged synthetic
sources, beside a parallel corpus's splits, with a manifest; reproducible with a seed; a corpus
that trains with the tag as one piece; bad input refused in one line with nothing written."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from nmt.checkpoint import read_checkpoint
from nmt.cli import app
from nmt.config import SPECIAL_PIECES
from nmt.data.tokenizer import TokenizerPair
from nmt.fileio import read_lines
from tests.conftest import one_line_error
from tests.test_end_to_end import train_toy

runner = CliRunner()


@pytest.fixture(scope="module")
def reverse(toy_dir, tmp_path_factory):
    """A tiny iso -> human model: the reverse of the toy task."""
    out = tmp_path_factory.mktemp("bt") / "reverse"
    return train_toy(toy_dir, out, "train.max_steps=20", "data.src_lang=iso", "data.tgt_lang=human")


@pytest.fixture()
def mono(toy_dir, tmp_path):
    path = tmp_path / "mono.iso"
    path.write_text("".join(line + "\n" for line in read_lines(toy_dir / "test.iso")[:25]), encoding="utf-8")
    return path


def backtranslate(*args, code=0):
    result = runner.invoke(app, ["backtranslate", *map(str, args), "--quiet"])
    assert result.exit_code == code, result.output
    return result


def test_synthetic_pairs_follow_the_parallel_ones_tagged_and_described(reverse, mono, toy_dir, tmp_path):
    out = tmp_path / "bt"
    result = backtranslate(
        "-m", reverse, "--mono", mono, "--parallel", toy_dir, "--sample", "--seed", 4, "-o", out
    )
    assert "25 synthetic human-iso pairs" in result.stderr and "after 1500 parallel ones" in result.stderr
    assert 'tokenizer.user_symbols=["<BT>"]' in result.stderr
    sources, targets = read_lines(out / "train.human"), read_lines(out / "train.iso")
    assert sources[:1500] == read_lines(toy_dir / "train.human") and targets[:1500] == read_lines(
        toy_dir / "train.iso"
    )
    assert targets[1500:] == read_lines(mono)
    assert len(sources) == 1525 and all(s.startswith("<BT> ") for s in sources[1500:])
    for split in ("valid", "test"):  # the other splits come along, so the folder trains as it is
        assert read_lines(out / f"{split}.human") == read_lines(toy_dir / f"{split}.human")
    manifest = json.loads((out / "backtranslation.json").read_text())
    assert manifest["mono"]["lines"] == 25 and manifest["tag"] == "<BT>"
    assert manifest["decode"]["sample"] and manifest["decode"]["seed"] == 4
    assert manifest["languages"] == {"source": "human", "target": "iso"}
    assert manifest["pairs"] == {"parallel": 1500, "synthetic": 25}
    again = tmp_path / "again"
    backtranslate("-m", reverse, "--mono", mono, "--parallel", toy_dir, "--sample", "--seed", 4, "-o", again)
    assert read_lines(again / "train.human") == sources  # a seed gives the same samples


def test_the_synthetic_corpus_trains_with_the_tag_as_one_piece(reverse, mono, toy_dir, tmp_path):
    out = tmp_path / "bt"
    backtranslate("-m", reverse, "--mono", mono, "--parallel", toy_dir, "-o", out)
    run = train_toy(
        out, tmp_path / "run", "train.max_steps=2", "train.valid_every=2", 'tokenizer.user_symbols=["<BT>"]'
    )
    tok = TokenizerPair.from_state(read_checkpoint(run / "checkpoints" / "last.pt")["tokenizers"])
    pieces = tok.src.id_to_piece(tok.src.encode_batch(["<BT> 5. März 1990"])[0])
    assert pieces[0] == "<BT>" or pieces[:2] == ["▁", "<BT>"]


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ("2001-01-01\n\n2002-02-02\n", [], "mono.iso: line 2 is empty"),
        (
            "2001-01-01\n" + "1999-12-31 " * 40 + "\n",
            [],
            "mono.iso: line 2 is longer than the reverse model's limit",
        ),
        ("2001-01-01 <BT>\n", [], "mono.iso: line 1 holds the tag '<BT>'; choose another --tag"),
        ("2001-01-01\n", ["--tag", "<B T>"], "--tag: '<B T>' must be one word without spaces"),
        ("2001-01-01\n", ["--tag", "<BT>\t"], "--tag: '<BT>\\t' must be one word without spaces"),
        *[("2001-01-01\n", ["--tag", t], f"--tag: {t!r} is a special piece") for t in SPECIAL_PIECES],
        ("", [], "mono.iso: no lines to back-translate"),
        ("2001-01-01\n", ["--sample", "--top-p", "0"], "decode.top_p: must be in (0, 1]"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(reverse, tmp_path, content, args, message):
    mono, out = tmp_path / "mono.iso", tmp_path / "bt"
    mono.write_text(content, encoding="utf-8")
    one_line_error(backtranslate("-m", reverse, "--mono", mono, "-o", out, *args, code=2), message)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["mono.iso"]


def test_a_parallel_folder_without_the_split_or_an_existing_output_is_refused(reverse, mono, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = backtranslate("-m", reverse, "--mono", mono, "--parallel", empty, "-o", tmp_path / "bt", code=2)
    one_line_error(result, "--parallel: ", "train.human not found")
    result = backtranslate("-m", reverse, "--mono", mono, "-o", empty, code=2)
    one_line_error(result, "already exists; back-translation writes a new folder")


def test_untagged_back_translation_without_a_parallel_corpus(reverse, mono, tmp_path):
    out = tmp_path / "bt"
    backtranslate("-m", reverse, "--mono", mono, "--tag", "", "-o", out)
    assert sorted(p.name for p in out.iterdir()) == ["backtranslation.json", "train.human", "train.iso"]
    assert not any(s.startswith("<BT>") for s in read_lines(out / "train.human"))


@pytest.mark.parametrize("split", ["../victim", "", ".hidden", "a/b", "/tmp/victim", "train\n"])
def test_a_split_that_is_not_a_plain_name_is_refused_before_anything_is_written(
    reverse, mono, toy_dir, tmp_path, split
):
    """`--split ../victim` appended the synthetic pairs to victim.* beside the output folder, and
    `--split ''` wrote hidden files: a split names files inside the folder, nothing else."""
    victims = {tmp_path / f"victim.{lang}": f"{lang} of the user's own\n" for lang in ("human", "iso")}
    for path, text in victims.items():
        path.write_text(text, encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = backtranslate(
        "-m", reverse, "--mono", mono, "--parallel", toy_dir, "--split", split, "-o", tmp_path / "bt", code=2
    )
    one_line_error(result, f"--split: {split!r} is not a plain name")
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert all(path.read_text(encoding="utf-8") == text for path, text in victims.items())


def test_a_plain_split_name_with_dots_and_dashes_is_taken(reverse, mono, tmp_path):
    out = tmp_path / "bt"
    backtranslate("-m", reverse, "--mono", mono, "--split", "bt-2.v1", "-o", out)
    assert sorted(p.name for p in out.iterdir()) == ["backtranslation.json", "bt-2.v1.human", "bt-2.v1.iso"]


@pytest.mark.parametrize("side", ["human", "iso"])
@pytest.mark.parametrize("split", ["train", "valid"])
def test_a_misaligned_parallel_corpus_is_refused_naming_both_files(
    reverse, mono, toy_dir, tmp_path, split, side
):
    parallel = tmp_path / "parallel"
    shutil.copytree(toy_dir, parallel)
    lines = read_lines(parallel / f"{split}.{side}")
    (parallel / f"{split}.{side}").write_text("".join(f"{line}\n" for line in lines[:-7]), encoding="utf-8")
    out = tmp_path / "bt"
    result = backtranslate("-m", reverse, "--mono", mono, "--parallel", parallel, "-o", out, code=2)
    counts = {"human": len(lines), "iso": len(lines)} | {side: len(lines) - 7}
    one_line_error(result, *(f"{parallel / f'{split}.{lang}'} has {n}" for lang, n in counts.items()))
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["mono.iso", "parallel"]
