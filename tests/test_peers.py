"""scripts/peers.py without the peers: Marian's training command is the bench shape, its log is
read as Marian writes it, and its decoding script is Python that names the same search; the
decoding and training matrices alternate their runs and tabulate them."""

import argparse
from pathlib import Path

import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def peers():
    return load_script("peers")


# two lines of a real `pymarian` training log (1.12.42, one thread), the second with commas
MARIAN_LOG = (
    "[2026-12-02 02:42:35] Ep. 1 : Up. 20 : Sen. 1,280 : Cost 7.31858730 * 21,580 @ 768 after 21,580 : "
    "Time 65.35s : 330.22 words/s : gNorm 1.2743\n"
    "[2026-12-02 02:43:27] Ep. 1 : Up. 1,040 : Sen. 66,560 : Cost 5.48583889 * 18,478 @ 768 after "
    "40,058 : Time 51.88s : 1,356.14 words/s : gNorm 1.0260\n"
)


def test_marians_log_gives_its_steps_and_target_words_per_second(peers):
    pattern, number = peers.TOK_S["marian"], peers.number
    found = [(number(m.group(1)), number(m.group(2))) for m in pattern.finditer(MARIAN_LOG)]
    assert found == [(20, 330.22), (1040, 1356.14)]


def test_marian_trains_the_bench_shape_on_the_shared_pieces(peers, tmp_path):
    cmd = peers.marian_train_command(Path("/venv/bin"), tmp_path, tmp_path / "run", 500, 2)

    def value(flag: str) -> str:
        return cmd[cmd.index(flag) + 1]

    assert cmd[0] == "/venv/bin/pymarian" and "--tied-embeddings-all" in cmd
    shape = ("--type", "--enc-type", "--enc-cell", "--dec-cell", "--dim-emb", "--dim-rnn")
    assert [value(flag) for flag in shape] == ["s2s", "bidirectional", "lstm", "lstm", "256", "512"]
    assert (value("--mini-batch"), value("--cpu-threads"), value("--after")) == ("64", "2", "500u")
    assert value("--train-sets") == str(tmp_path / "sp" / "train.de")


def test_marians_decoding_is_a_script_of_the_same_search_and_has_no_bf16(peers, tmp_path):
    model = tmp_path / "marian-bench" / "model.npz"
    cmd, out = peers.translate_command("marian", "/venv/bin/python", tmp_path, model, 5, precision="int8")
    compile(cmd[2], "MARIAN_DECODE", "exec")
    int8 = "packed8avx512" if peers.AVX512 else "packed8avx2"  # the kernels this CPU has
    assert cmd[3:7] == [str(model), str(model.parent / "vocab.yml"), "5", int8]
    assert "--max-length-factor 1.25" in cmd[2] and out.name == "model.test.beam5.int8.pieces"
    onmt, _ = peers.translate_command("onmt", "/venv/bin/python", tmp_path, model, 5, precision="int8")
    assert onmt[-2:] == ["-precision", "int8"]
    with pytest.raises(SystemExit, match="Marian has no bf16 on a CPU"):
        peers.translate_command("marian", "/venv/bin/python", tmp_path, model, 5, precision="bf16")


def test_the_matrix_alternates_the_order_and_runs_the_long_file_once(peers, monkeypatch):
    ran = []

    def translate(peer, python, work, model, beam, threads, src, precision):
        ran.append((src, beam, peer, precision))
        seconds = {"nmt": 2.0 if precision == "fp32" else 1.0, "onmt": 3.0}[peer]
        return {"process_s": seconds + len(ran) / 100, "peak_rss_mib": 400.0 + len(ran), "bleu": 36.5}

    monkeypatch.setattr(peers, "translate", translate)
    entrants = [
        peers.Entrant("nmt fp32", "nmt", "py", Path("run"), "fp32"),
        peers.Entrant("nmt auto", "nmt", "py", Path("run"), "auto"),
        peers.Entrant("OpenNMT-py", "onmt", "onmt-py", Path("ckpt"), "auto"),
    ]
    runs = peers.matrix(entrants, Path("work"), ["test", "big"], [1, 5], rounds=2, threads=2)
    first = [(peer, precision) for src, beam, peer, precision in ran[:6]]
    assert first == [
        ("nmt", "fp32"),
        ("nmt", "auto"),
        ("onmt", "auto"),
        ("onmt", "auto"),
        ("nmt", "auto"),
        ("nmt", "fp32"),
    ]
    assert len(ran) == 2 * 6 + 2 * 3  # test_2016: 2 rounds of 3 at each beam; the long file once
    assert list(runs) == [("test", 1), ("test", 5), ("big", 1), ("big", 5)]

    table = peers.matrix_table(runs).splitlines()
    assert table[0] == "| whole command | nmt fp32 | nmt auto | OpenNMT-py |"
    assert table[2] == (
        "| test_2016, greedy | 2.01 / 2.06 s, 406 MiB, BLEU 36.50 | 1.02 / 1.05 s, 405 MiB, BLEU 36.50 "
        "| 3.03 / 3.04 s, 404 MiB, BLEU 36.50 |"
    )
    assert "test_2016, greedy: nmt auto 2.93x OpenNMT-py's speed" in table  # medians 3.035 / 1.035
    assert "10,014 lines, beam 5: nmt fp32 1.47x OpenNMT-py's speed" in table  # 3.18 / 2.16


def test_the_training_matrix_alternates_and_keeps_opennmt_py_apart_from_a_20_minute_run(peers, monkeypatch):
    ran = []

    def bench_case(case, threads):
        ran.append((case, threads))
        return {"value": 1000.0 * threads + len(ran), "peak_rss_mib": 800.0}

    def train(peer, python, work, args):
        ran.append((peer, args.threads, args.tag, args.steps, args.report_every))
        return {"value": 900.0 * args.threads, "peak_rss_mib": 2000.0 + len(ran)}

    monkeypatch.setattr(peers, "bench_case", bench_case)
    monkeypatch.setattr(peers, "train", train)
    args = argparse.Namespace(steps=None, report_every=25, tag="bench", threads=2)
    runs = peers.train_matrix(["train-luong-general-if"], "onmt-py", Path("work"), args, [2, 1], rounds=2)
    assert ran[:4] == [
        ("train-luong-general-if", 2),
        ("onmt", 2, "tb2", 60, 10),
        ("onmt", 2, "tb2", 60, 10),
        ("train-luong-general-if", 2),
    ]
    table = peers.train_table(runs).splitlines()
    assert table[0] == "| threads | train-luong-general-if | OpenNMT-py |"
    assert (
        table[2] == "| 2 | 2,001 / 2,004 (median 2,002), 800 MiB | 1,800 / 1,800 (median 1,800), 2,003 MiB |"
    )
    assert "2 threads: train-luong-general-if 1.11x OpenNMT-py's target tokens/s" in table  # 2,002.5 / 1,800
    assert "1 thread: train-luong-general-if 1.12x OpenNMT-py's target tokens/s" in table  # 1,006.5 / 900
