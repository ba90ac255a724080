"""The training split read a chunk at a time: broken lines among many are one clear line naming
the file and line, and a cache is complete or absent, never half-written."""

import os
import random

import numpy as np
import pytest
from typer.testing import CliRunner

from nmt.cli import app
from nmt.config import load_config
from nmt.data import cache as cache_module
from nmt.data import prepare as prepare_module
from nmt.data.batching import collate, length_grouped_batches
from nmt.data.prepare import prepare
from nmt.vocab import BOS, EOS
from tests.conftest import refuse_reading

runner = CliRunner()
PAIRS = 3_000


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """A folder of PAIRS training pairs (a dates corpus), read in chunks of 500 pairs."""
    monkeypatch.setattr(prepare_module, "CHUNK", 500)
    rng = random.Random(1)
    months = ["January", "March", "May", "July", "October", "December"]
    pairs = [
        (f"{rng.randint(1, 28)} {m} {rng.randint(1900, 2030)}", "") for m in rng.choices(months, k=PAIRS)
    ]
    pairs = [(de, de.upper()) for de, _ in pairs]
    folder = tmp_path / "data"
    folder.mkdir()
    for split, rows in (("train", pairs), ("valid", pairs[:20]), ("test", pairs[:20])):
        (folder / f"{split}.de").write_text("".join(f"{s}\n" for s, _ in rows), encoding="utf-8")
        (folder / f"{split}.en").write_text("".join(f"{t}\n" for _, t in rows), encoding="utf-8")
    return folder


def config_args(folder, cache) -> list[str]:
    settings = [
        "data.src_lang=de",
        "data.tgt_lang=en",
        f"data.dir={folder}",
        f"data.cache_dir={cache}",
        "data.max_len=40",
        "tokenizer.vocab_size=60",
    ]
    return ["-c", "toy-luong.yaml", *[x for s in settings for x in ("--set", s)]]


def prepare_cli(folder, cache):
    return runner.invoke(app, ["data", "prepare", *config_args(folder, cache)])


def replace_line(path, number: int, content: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[number - 1] = content
    path.write_bytes(b"\n".join(lines))


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    return line


def test_bad_utf8_deep_in_the_file_names_its_line_and_leaves_no_cache(corpus, tmp_path):
    replace_line(corpus / "train.de", 2345, b"kaputt \xff\xfe")  # in the fifth chunk
    line = one_error_line(prepare_cli(corpus, tmp_path / "cache"))
    assert f"{corpus / 'train.de'}: line 2345 is not valid UTF-8" in line
    assert not list((tmp_path / "cache").glob("*"))


def test_empty_sides_and_a_one_megabyte_line_are_dropped_and_counted(corpus, tmp_path):
    replace_line(corpus / "train.en", 10, b"   ")
    replace_line(corpus / "train.de", 2000, b"")
    replace_line(corpus / "train.de", 2500, ("sehr lang " * 100_000).encode())  # 1 MB
    result = prepare_cli(corpus, tmp_path / "cache")
    assert result.exit_code == 0, result.output
    assert f"prepared: {PAIRS - 3} train" in result.stdout
    assert "dropped: 2 empty side, 1 longer than 40 subwords" in result.stdout


def test_files_of_different_lengths_fail_before_anything_is_written(corpus, tmp_path):
    with open(corpus / "train.en", "ab") as f:
        f.write(b"one more line at the very end\n")
    line = one_error_line(prepare_cli(corpus, tmp_path / "cache"))
    assert line.endswith(
        f"{corpus / 'train.de'} has {PAIRS} lines but {corpus / 'train.en'} has {PAIRS + 1}: "
        "parallel files must be line-aligned"
    )
    assert not (tmp_path / "cache").exists()


def test_a_build_that_fails_half_way_leaves_nothing_a_later_run_would_take_for_whole(
    corpus, tmp_path, monkeypatch
):
    cfg = load_config("toy-luong.yaml", [a for a in config_args(corpus, tmp_path / "cache") if "=" in a])
    encode_chunks = prepare_module.encode_chunks

    def disk_full_at_the_fourth_chunk(*args):
        for done, chunk in enumerate(encode_chunks(*args)):
            if done == 3:
                raise OSError(28, "No space left on device")
            yield chunk

    monkeypatch.setattr(prepare_module, "encode_chunks", disk_full_at_the_fourth_chunk)
    with pytest.raises(OSError):
        prepare(cfg)
    assert not list((tmp_path / "cache").iterdir())  # the partial folder went with the error

    monkeypatch.setattr(prepare_module, "encode_chunks", encode_chunks)
    data = prepare(cfg)
    assert not data.from_cache and len(data.train) == PAIRS


def test_a_build_abandoned_by_a_killed_process_is_cleared_and_redone(corpus, tmp_path):
    cfg = load_config("toy-luong.yaml", [a for a in config_args(corpus, tmp_path / "cache") if "=" in a])
    key = prepare(cfg).cache_dir.name
    for path in (tmp_path / "cache").iterdir():
        path.rename(tmp_path / "cache" / f"{key}.partial-999999999-abcdef")  # a pid that runs no more
    data = prepare(cfg)
    assert not data.from_cache and [p.name for p in (tmp_path / "cache").iterdir()] == [key]


def test_the_mapped_cache_reads_back_every_pair_as_encoded(corpus, tmp_path):
    cfg = load_config("toy-luong.yaml", [a for a in config_args(corpus, tmp_path / "cache") if "=" in a])
    built, loaded = prepare(cfg), prepare(cfg)
    assert loaded.from_cache and loaded.train.src.tokens.dtype == np.uint16  # a 60-piece vocabulary
    lines = (corpus / "train.de").read_text(encoding="utf-8").splitlines()
    for i in (0, 1234, PAIRS - 1):  # chunk boundaries are invisible
        assert loaded.train.src[i].tolist() == built.tokenizers.src.encode(lines[i])
    batch = collate(loaded.train, length_grouped_batches(loaded.train, 64, seed=1, epoch=0)[0])
    assert (batch.tgt_in[:, 0] == BOS).all() and (batch.src == EOS).sum() == batch.src.size(0)
    loaded.train.release()  # pages handed back; the arrays still read
    assert loaded.train.src[5].tolist() == built.train.src[5].tolist()


def test_a_cache_whose_meta_cannot_be_read_is_rebuilt(corpus, tmp_path, monkeypatch):
    cfg = load_config("toy-luong.yaml", [a for a in config_args(corpus, tmp_path / "cache") if "=" in a])
    meta = prepare(cfg).cache_dir / cache_module.META
    meta.unlink()
    meta.mkdir()  # a folder in its place
    data = prepare(cfg)
    assert not data.from_cache and len(data.train) == PAIRS and meta.is_file()
    refuse_reading(monkeypatch, meta)
    data = prepare(cfg)
    assert not data.from_cache and len(data.train) == PAIRS
    monkeypatch.undo()  # readable again
    assert prepare(cfg).from_cache


def test_a_partial_folder_of_a_running_process_is_left_alone(corpus, tmp_path):
    cfg = load_config("toy-luong.yaml", [a for a in config_args(corpus, tmp_path / "cache") if "=" in a])
    key = prepare(cfg).cache_dir.name
    busy = tmp_path / "cache" / f"{key}-other.partial-{os.getpid()}-abcdef"
    busy.mkdir()
    cache_module._remove_abandoned(tmp_path / "cache" / f"{key}-other")
    assert busy.is_dir()
