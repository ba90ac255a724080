"""The data pipeline: cleaning counts, compact corpora, token batches, the cache, download, stats."""

import json
import time

import pytest
from typer.testing import CliRunner

from nmt.cli import app
from nmt.config import DataConfig, load_config
from nmt.data.batching import collate, length_grouped_batches, padding_efficiency
from nmt.data.cleaning import clean_pairs, normalize
from nmt.data.corpus import EncodedCorpus
from nmt.data.encoding import length_filter
from nmt.data.prepare import prepare
from nmt.data.sources import download, load_split
from nmt.errors import NMTError
from nmt.vocab import BOS, EOS, PAD
from tests.conftest import MULTI30K, assert_image, needs_multi30k

runner = CliRunner()


def test_normalisation_and_empty_sides_are_counted():
    decomposed = "Mu\u0308nchen  ist\tgroß "
    assert normalize(decomposed, "NFC") == "München ist groß"
    assert normalize(decomposed, "none") == "Mu\u0308nchen ist groß"
    cfg = DataConfig(src_lang="de", tgt_lang="en")
    kept, dropped = clean_pairs([("a", "b"), ("  ", "x"), ("y", ""), ("c", "d")], cfg)
    assert kept == [("a", "b"), ("c", "d")] and dropped == {"empty side": 2}


def test_length_filter_counts_each_reason():
    cfg = DataConfig(src_lang="de", tgt_lang="en", max_len=10, max_ratio=2)
    keep, dropped = length_filter([3, 11, 2, 5], [4, 5, 9, 5], cfg)
    assert keep.tolist() == [0, 3]
    assert dropped == {"longer than 10 subwords": 1, "length ratio above 2": 1}


def test_each_stage_takes_the_previous_stages_output(toy_dir, tmp_path):
    """source -> clean (+ joined runs) -> encode (+ length filter), chunk by chunk, with every
    drop counted where it happens and the pairs read carried along."""
    import numpy as np

    from nmt.data.cleaning import clean_chunks
    from nmt.data.encoding import encode_chunks
    from nmt.data.sources import Chunk, pick

    raw = [Chunk(1, ["a b", "  ", "c"], ["x", "y", "z z"]), Chunk(4, ["d"], ["w"])]
    cfg = DataConfig(src_lang="de", tgt_lang="en", join=2, max_len=3)
    cleaned = list(clean_chunks(raw, cfg))
    assert [(c.sources, c.targets, c.read) for c in cleaned] == [
        (["a b", "c", "a b c"], ["x", "z z", "x z z"], 3),  # the run of 2 stays inside its chunk
        (["d"], ["w"], 1),
    ]
    assert cleaned[0].dropped == {"empty side": 1}
    tok = prepare(
        load_config("toy-luong.yaml", [f"data.dir={toy_dir}", f"data.cache_dir={tmp_path}"]), ()
    ).tokenizers
    encoded = list(encode_chunks(cleaned, tok, cfg))
    assert [e.read for e in encoded] == [3, 1]
    for chunk, enc in zip(cleaned, encoded, strict=True):
        assert len(enc.corpus) + sum(enc.dropped.values()) - sum(chunk.dropped.values()) == len(chunk.sources)
        assert max(enc.corpus.src.lengths.max(initial=0), enc.corpus.tgt.lengths.max(initial=0)) <= 3
    picked = list(pick(raw, np.array([0, 2, 3])))  # 0-based lines 0 and 2 of the first chunk, 3 of the second
    assert [(c.sources, c.targets) for c in picked] == [(["a b", "c"], ["x", "z z"]), (["d"], ["w"])]


def test_corpus_round_trip_and_collate(tmp_path):
    corpus = EncodedCorpus.from_lists([[5, 6, 7], [8]], [[9], [10, 11]])
    corpus.save(tmp_path / "c.npz")
    again = EncodedCorpus.load(tmp_path / "c.npz")
    assert [again.src[i].tolist() for i in range(2)] == [[5, 6, 7], [8]]
    batch = collate(again, [0, 1])
    assert batch.src.tolist() == [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    assert batch.src_len.tolist() == [4, 2]
    assert batch.tgt_in.tolist() == [[BOS, 9, PAD], [BOS, 10, 11]]
    assert batch.tgt_out.tolist() == [[9, EOS, PAD], [10, 11, EOS]]


def test_token_batches_respect_the_budget_and_pad_little(toy_dir, tmp_path):
    cfg = load_config("toy-luong.yaml", [f"data.dir={toy_dir}", f"data.cache_dir={tmp_path}"])
    corpus = prepare(cfg, ()).train
    batches = length_grouped_batches(corpus, 400, seed=3, epoch=0, batch_type="tokens")
    assert sorted(i for b in batches for i in b) == list(range(len(corpus)))
    for b in batches:
        padded = len(b) * (int(corpus.src.lengths[b].max()) + 1 + int(corpus.tgt.lengths[b].max()) + 1)
        assert padded <= 400 or len(b) == 1
    src_real, tgt_real = padding_efficiency(corpus, batches)
    assert src_real > 0.8 and tgt_real > 0.9


def test_sentence_batches_pad_the_target_least(toy_dir, tmp_path):
    # The decoder pays for every padded target position, the packed encoder for none: sorting by
    # target length first must leave less target padding than source padding.
    cfg = load_config("toy-luong.yaml", [f"data.dir={toy_dir}", f"data.cache_dir={tmp_path}"])
    corpus = prepare(cfg, ()).train
    src_real, tgt_real = padding_efficiency(corpus, length_grouped_batches(corpus, 16, seed=3, epoch=0))
    assert tgt_real > 0.97 and tgt_real > src_real


def test_prepare_caches_and_rebuilds_when_a_setting_changes(toy_dir, tmp_path):
    overrides = [f"data.dir={toy_dir}", f"data.cache_dir={tmp_path}", "tokenizer.vocab_size=100"]
    first = prepare(load_config("toy-luong.yaml", overrides), ("valid", "test"))
    second = prepare(load_config("toy-luong.yaml", overrides), ("valid", "test"))
    assert not first.from_cache and second.from_cache and first.cache_dir == second.cache_dir
    assert second.train.src.tokens.tolist() == first.train.src.tokens.tolist()
    assert (
        second.held_out["test"].corpus.tgt.tokens.tolist()
        == first.held_out["test"].corpus.tgt.tokens.tolist()
    )
    changed = prepare(load_config("toy-luong.yaml", [*overrides, "data.max_len=12"]))
    assert not changed.from_cache and changed.cache_dir != first.cache_dir
    assert changed.dropped["longer than 12 subwords"] > 0


def test_joining_adds_longer_pairs_of_the_same_text(toy_dir, tmp_path):
    from nmt.data.joining import joined, joined_pairs

    assert joined(["a b", "c", "d", "e", "f"], 2) == ["a b c", "d e"]  # a last, shorter run is dropped
    pairs = [(f"s{i}", f"t{i}") for i in range(7)]
    assert joined_pairs(pairs, 3) == [("s0 s1", "t0 t1"), ("s2 s3", "t2 t3"), ("s4 s5", "t4 t5"),
                                      ("s0 s1 s2", "t0 t1 t2"), ("s3 s4 s5", "t3 t4 t5")]  # fmt: skip
    assert joined_pairs(pairs, 0) == []

    overrides = [f"data.dir={toy_dir}", f"data.cache_dir={tmp_path}", "data.max_len=200"]
    plain = prepare(load_config("toy-luong.yaml", overrides), ())
    longer = prepare(load_config("toy-luong.yaml", [*overrides, "data.join=3"]), ())
    n = len(plain.train)
    assert len(longer.train) == n + n // 2 + n // 3 and longer.cache_dir != plain.cache_dir
    first = longer.train.src[n].tolist()  # pairs 1 and 2 of the file as one: the same pieces
    assert first == plain.train.src[0].tolist() + plain.train.src[1].tolist()
    models = [d.tokenizers.src.sp.serialized_model_proto() for d in (plain, longer)]
    assert models[0] == models[1]  # the tokenizer learns from each sentence once
    bad = runner.invoke(app, ["data", "prepare", "-c", "toy-luong.yaml", "--set", "data.join=1"])
    assert bad.exit_code == 2 and "data.join: must be 0 (off) or at least 2" in bad.output


def test_a_tampered_cached_tokenizer_is_detected(toy_dir, tmp_path):
    cfg = load_config("toy-luong.yaml", [f"data.dir={toy_dir}", f"data.cache_dir={tmp_path}"])
    data = prepare(cfg, ())
    (data.cache_dir / "src.model").write_bytes(b"not the model")
    with pytest.raises(NMTError, match="does not match the cached data"):
        prepare(cfg, ())


def write_dataset(folder, fmt, layout, n=(30, 5, 5)):
    import pandas as pd

    folder.mkdir()
    for split, count in zip(("train", "validation", "test"), n, strict=True):
        rows = [{"de": f"Satz {split} {i}", "en": f"sentence {split} {i}"} for i in range(count)]
        if layout == "translation":
            rows = [{"translation": r} for r in rows]
        frame = pd.DataFrame(rows)
        if fmt == "jsonl":
            frame.to_json(folder / f"{split}.jsonl", orient="records", lines=True, force_ascii=False)
        else:
            frame.to_parquet(folder / f"{split}.parquet")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("layout", ["translation", "columns"])
def test_download_materialises_a_datasets_source_once(tmp_path, fmt, layout):
    write_dataset(tmp_path / "ds", fmt, layout)
    cfg = DataConfig(
        src_lang="de",
        tgt_lang="en",
        format="hf",
        hf_path=str(tmp_path / "ds"),
        dir=str(tmp_path / "text"),
        valid="validation",
    )
    report = download(cfg)
    assert "train: 30 pairs" in report
    assert (tmp_path / "text" / "validation.en").read_text().splitlines()[2] == "sentence validation 2"
    manifest = json.loads((tmp_path / "text" / "manifest.json").read_text())
    assert manifest["splits"]["test"]["pairs"] == 5 and len(manifest["splits"]["test"]["sha256"]["de"]) == 64
    assert "nothing to do" in download(cfg)
    (tmp_path / "ds" / f"train.{fmt}").unlink()  # now only the text copy can answer
    assert load_split(cfg, "train")[4] == ("Satz train 4", "sentence train 4")


def test_invalid_utf8_can_be_replaced(tmp_path):
    (tmp_path / "train.de").write_bytes(b"gut\nkaputt \xff\n")
    (tmp_path / "train.en").write_text("good\nbroken\n")
    cfg = DataConfig(src_lang="de", tgt_lang="en", dir=str(tmp_path))
    with pytest.raises(NMTError, match="line 2 is not valid UTF-8.*data.errors: replace"):
        load_split(cfg, "train")
    cfg.errors = "replace"
    assert load_split(cfg, "train")[1] == ("kaputt \ufffd", "broken")


def test_missing_split_is_one_clear_error(toy_dir, tmp_path):
    result = runner.invoke(
        app,
        [
            "data",
            "prepare",
            "-c",
            "toy-luong.yaml",
            "--set",
            f"data.dir={toy_dir}",
            "--set",
            "data.test=nope",
            "--set",
            f"data.cache_dir={tmp_path}",
        ],
    )
    assert result.exit_code == 2 and "nope.human: file not found" in result.stderr


@needs_multi30k
def test_multi30k_download_prepare_stats(tmp_path):
    base = [
        "-c",
        "multi30k-luong-dot.yaml",
        "--set",
        f"data.dir={MULTI30K}",
        "--set",
        f"data.cache_dir={tmp_path}",
        "--set",
        "tokenizer.vocab_size=4000",
    ]
    result = runner.invoke(app, ["data", "download", *base])
    assert result.exit_code == 0 and "29000 train, 1014 valid, 1000 test pairs" in result.stdout
    started = time.perf_counter()
    result = runner.invoke(app, ["data", "prepare", *base])
    assert result.exit_code == 0, result.output
    print(f"\nprepare Multi30k de-en (4k vocab): {time.perf_counter() - started:.1f} s")
    assert "1014 valid, 1000 test pairs" in result.stdout
    started = time.perf_counter()
    result = runner.invoke(app, ["data", "prepare", *base])
    print(f"load from cache: {time.perf_counter() - started:.2f} s")
    assert "already prepared" in result.stdout
    result = runner.invoke(app, ["data", "stats", *base, "--plot", str(tmp_path / "lengths.png")])
    assert result.exit_code == 0, result.output
    assert "valid: 1014 pairs" in result.stdout and "test: 1000 pairs" in result.stdout
    assert "padding efficiency, batches of 4096 tokens" in result.stdout
    width, height = assert_image(tmp_path / "lengths.png")
    assert width > 300 and height > 200


def test_a_different_tokenizer_never_reads_another_tokenizers_cached_encodings(toy_dir, tmp_path):
    from nmt.config import TokenizerConfig
    from nmt.data.sources import read_parallel
    from nmt.data.tokenizer import TokenizerPair

    cfg = load_config("toy-luong.yaml", [f"data.dir={toy_dir}", f"data.cache_dir={tmp_path}"])
    prepare(cfg, ("valid",))  # caches train and valid with the config's tokenizer
    other = TokenizerPair.train(
        read_parallel(toy_dir / "train.human", toy_dir / "train.iso")[:300], TokenizerConfig(vocab_size=60)
    )
    data = prepare(cfg, ("valid",), tokenizers=other)  # e.g. resuming with a checkpoint's tokenizer
    first_valid = (toy_dir / "valid.human").read_text().splitlines()[0]
    assert data.held_out["valid"].corpus.src[0].tolist() == other.src.encode(first_valid)
    assert data.train.src.tokens.max() < len(other.src)
