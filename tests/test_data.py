"""Data sources: text files, the datasets path on local folders, the toy task, tokenizer."""

import json

import pytest

from nmt.config import DataConfig, TokenizerConfig
from nmt.data.batching import length_grouped_batches
from nmt.data.corpus import EncodedCorpus
from nmt.data.sources import load_split, read_parallel
from nmt.data.tokenizer import TokenizerPair
from nmt.data.toy import FORMS, write_toy_corpus
from nmt.errors import NMTError


def test_toy_corpus_is_deterministic_and_held_out(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_toy_corpus(a, seed=5, sizes={"train": 300, "valid": 40, "test": 40})
    write_toy_corpus(b, seed=5, sizes={"train": 300, "valid": 40, "test": 40})
    for name in ("train.human", "train.iso", "test.human", "test.iso"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    train = set((a / "train.human").read_text().splitlines())
    assert not train & set((a / "test.human").read_text().splitlines())
    iso = (a / "test.iso").read_text().splitlines()
    assert all(len(d) == 10 and d[4] == d[7] == "-" for d in iso)
    assert len(FORMS) >= 10


def test_text_files_with_different_line_counts_are_refused(tmp_path):
    (tmp_path / "x.de").write_text("a\nb\n")
    (tmp_path / "x.en").write_text("a\n")
    with pytest.raises(NMTError, match="has 2 lines but .* has 1"):
        read_parallel(tmp_path / "x.de", tmp_path / "x.en")


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "x.de").write_bytes(b"ok\nbad \xff\n")
    (tmp_path / "x.en").write_text("a\nb\n")
    with pytest.raises(NMTError, match="line 2 is not valid UTF-8"):
        read_parallel(tmp_path / "x.de", tmp_path / "x.en")


@pytest.mark.parametrize("layout", ["translation", "columns"])
def test_local_dataset_folder_through_load_dataset(tmp_path, layout):
    folder = tmp_path / "ds"
    folder.mkdir()
    for split in ("train", "validation"):
        with open(folder / f"{split}.jsonl", "w") as f:
            for i in range(5):
                row = {"de": f"hallo {split} {i}", "en": f"hello {split} {i}"}
                f.write(json.dumps({"translation": row} if layout == "translation" else row) + "\n")
    cfg = DataConfig(src_lang="de", tgt_lang="en", format="hf", hf_path=str(folder), valid="validation")
    assert load_split(cfg, "valid")[2] == ("hallo validation 2", "hello validation 2")
    swapped = DataConfig(src_lang="en", tgt_lang="de", format="hf", hf_path=str(folder))
    assert load_split(swapped, "train")[0] == ("hello train 0", "hallo train 0")


def test_unknown_columns_are_listed(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"src": "a", "tgt": "b"}) + "\n")
    cfg = DataConfig(src_lang="de", tgt_lang="en", format="hf", hf_path=str(folder))
    with pytest.raises(NMTError, match="columns found: src, tgt"):
        load_split(cfg, "train")


def test_missing_local_path_fails_at_once_instead_of_asking_the_hub():
    cfg = DataConfig(src_lang="de", tgt_lang="en", format="hf", hf_path="./no/such/folder")
    with pytest.raises(NMTError, match="does not exist"):
        load_split(cfg, "train")


def test_unreachable_hub_gives_one_clear_error():
    cfg = DataConfig(src_lang="de", tgt_lang="en", format="hf", hf_path="nobody/no-such-dataset")
    with pytest.raises(NMTError, match="cannot load 'nobody/no-such-dataset'"):
        load_split(cfg, "train")


def test_tokenizer_round_trips_and_travels_as_bytes(toy_dir):
    pairs = read_parallel(toy_dir / "train.human", toy_dir / "train.iso")
    tok = TokenizerPair.train(pairs, TokenizerConfig(vocab_size=120))
    again = TokenizerPair.from_state(tok.to_state())
    text = "Montag, 5. März 2001"
    assert again.src.decode(again.src.encode(text)) == text
    assert again.src is again.tgt  # joint
    ids = again.src.encode(text)
    assert again.src.id_to_piece(ids) == again.src.sp.encode(text, out_type=str)
    assert again.src.id_to_piece(range(len(again.src))) == [
        again.src.sp.id_to_piece(i) for i in range(len(again.src))
    ]


def test_length_grouped_batches_cover_everything_once_and_vary_by_epoch(toy_dir):
    pairs = read_parallel(toy_dir / "train.human", toy_dir / "train.iso")
    corpus = EncodedCorpus.from_lists([[5] * (len(s) // 3 + 1) for s, _ in pairs], [[5] for _ in pairs])
    epoch0 = length_grouped_batches(corpus, 32, seed=1, epoch=0)

    def listed(plan):
        return [b.tolist() for b in plan]

    assert sorted(i for b in epoch0 for i in b) == list(range(len(corpus)))
    assert listed(epoch0) == listed(length_grouped_batches(corpus, 32, seed=1, epoch=0))
    assert listed(epoch0) != listed(length_grouped_batches(corpus, 32, seed=1, epoch=1))
    lengths = corpus.src.lengths
    spread = sum(int(lengths[b].max() - lengths[b].min()) for b in epoch0)
    assert spread / len(epoch0) < 2  # similar lengths share a batch


def test_process_shards_are_disjoint_and_equally_long(toy_dir):
    pairs = read_parallel(toy_dir / "train.human", toy_dir / "train.iso")
    corpus = EncodedCorpus.from_lists([[5] * (len(s) // 3 + 1) for s, _ in pairs], [[5] for _ in pairs])
    plan = length_grouped_batches(corpus, 64, seed=1, epoch=0)
    for world in (2, 3):
        shards = [[set(b.tolist()) for b in plan.shard(rank, world)] for rank in range(world)]
        assert len({len(s) for s in shards}) == 1 and len(shards[0]) == len(plan) // world
        seen = [i for shard in shards for batch in shard for i in batch]
        assert len(seen) == len(set(seen))  # no pair on two processes
        assert shards[0][0] == set(plan[0].tolist()) and shards[1][0] == set(plan[1].tolist())


def test_an_unreachable_hub_fails_in_seconds(monkeypatch):
    import socket
    import time

    def no_network(*args, **kwargs):
        raise socket.gaierror("Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", no_network)
    cfg = DataConfig(src_lang="de", tgt_lang="en", format="hf", hf_path="IWSLT/iwslt2017")
    started = time.perf_counter()
    with pytest.raises(NMTError, match="cannot reach the Hugging Face hub"):
        load_split(cfg, "train")
    assert time.perf_counter() - started < 5
