"""OpenNMT-py, JoeyNMT and Marian on the bench shape, measured the way scripts/bench.py measures nmt.

Not part of the test suite: the peers live in their own virtualenvs (they pin older torch
releases, so install them with --no-deps on top of torch 2.13), e.g.

    python3 -m venv ../peers/onmt && ../peers/onmt/bin/pip install torch==2.13.0
    ../peers/onmt/bin/pip install --no-deps OpenNMT-py==3.5.1
    ../peers/onmt/bin/pip install configargparse pyyaml sacrebleu rapidfuzz tensorboard sentencepiece \
        subword-nmt pyonmttok waitress flask six spacy pyahocorasick fasttext-wheel

    python3 -m venv ../peers/marian && ../peers/marian/bin/pip install pymarian==1.12.42

    python scripts/peers.py prepare --work ../peers/work
    python scripts/peers.py train onmt --python ../peers/onmt/bin/python --work ../peers/work --steps 150
    python scripts/peers.py train joey --python ../peers/joey/bin/python --work ../peers/work --steps 150
    python scripts/peers.py train marian --python ../peers/marian/bin/python --work ../peers/work --minutes 20
    python scripts/peers.py train onmt ... --minutes 20 --save-every 250   # the equal-budget run
    python scripts/peers.py translate onmt --python ... --work ... --model CKPT --beam 5 [--src big]
    python scripts/peers.py translate nmt --work ... --model RUN_OR_CKPT --beam 5 --threads 1 [--shortlist SL]
    python scripts/peers.py score onmt --python ... --work ...   # test BLEU of every saved checkpoint
    python scripts/peers.py score nmt --work ... --model RUN_DIR  # the same for an nmt run
    python scripts/peers.py plot --curves onmt.json nmt.json --labels OpenNMT-py nmt --out curve.png
    python scripts/peers.py matrix --model RUN --onmt CKPT --python ../peers/onmt/bin/python \
        [--marian MODEL --marian-python ../peers/marian/bin/python] [--src test big] [--rounds 2]
    python scripts/peers.py train-matrix --python ../peers/onmt/bin/python [--cases CASE ...] \
        [--threads-list 1 2] [--rounds 4]

`matrix` is issue 62's decoding table in one command: every toolkit's whole translate command on
each file, greedy and beam 5, the rounds alternating which toolkit runs first, each run's own
peak memory; it prints the table (median seconds, and each nmt precision's speed against
OpenNMT-py's) and then its JSON. `train-matrix` is its training table: scripts/bench.py's
training cases (30 steps) and OpenNMT-py on the bench shape (--steps, default 60, reported every
10), alternated, at each thread count: target tokens/s, peak memory, medians and their ratio.

Every peer reads the same SentencePiece pieces as nmt (the bench's joint 8k model, applied here),
so vocabularies and sequence lengths are equal (Marian builds its vocabulary from those pieces);
their outputs are decoded with the same model and
scored with sacreBLEU like nmt's. Each command prints one JSON object.
"""

from __future__ import annotations

import argparse
import compileall
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

import nmt
from nmt.fileio import read_lines

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}

# The bench shape: embeddings 256, BiLSTM 1x256 per direction, LSTM decoder 1x512, Luong general
# attention with input feeding, a linear bridge, dropout 0.3, Adam 1e-3, 64 sentences, clip 5.
ONMT = """\
save_data: {work}/onmt
src_vocab: {work}/onmt.vocab
share_vocab: true
src_vocab_size: 9000
tgt_vocab_size: 9000
src_seq_length: 80
tgt_seq_length: 80
data:
  corpus_1: {{path_src: {work}/sp/train.de, path_tgt: {work}/sp/train.en}}
  valid: {{path_src: {work}/sp/val.de, path_tgt: {work}/sp/val.en}}
save_model: {run}/model
encoder_type: brnn
decoder_type: rnn
rnn_type: LSTM
enc_layers: 1
dec_layers: 1
word_vec_size: 256
enc_hid_size: 512
dec_hid_size: 512
global_attention: {onmt_attention}
input_feed: 1
bridge: true
dropout: [0.3]
optim: adam
learning_rate: 0.001
max_grad_norm: 5
batch_size: 64
batch_type: sents
valid_batch_size: 64
train_steps: {steps}
valid_steps: 1000000
save_checkpoint_steps: {save_every}
keep_checkpoint: 1000
report_every: {report_every}
seed: {seed}
num_workers: {workers}
"""

JOEY = """\
name: bench
joeynmt_version: 2.3.0
data:
  train: {work}/sp/train
  dev: {work}/sp/val
  dataset_type: plain
  src: {{lang: de, level: word, lowercase: false, max_length: 80, voc_limit: 9000, voc_min_freq: 1}}
  trg: {{lang: en, level: word, lowercase: false, max_length: 80, voc_limit: 9000, voc_min_freq: 1}}
training:
  model_dir: {run}/model
  overwrite: true
  random_seed: {seed}
  optimizer: adam
  learning_rate: 0.001
  clip_grad_norm: 5.0
  scheduling: exponential  # with factor 1: a constant rate, as nmt's and OpenNMT-py's here
  decrease_factor: 1.0
  batch_size: 64
  batch_type: sentence
  epochs: 1000
  validation_freq: {save_every}
  logging_freq: {report_every}
  use_cuda: false
  num_workers: 0
  keep_best_ckpts: 1
testing: {{beam_size: 1, batch_size: 64, batch_type: sentence, max_output_length: 100}}
model:
  initializer: xavier_uniform
  encoder:
    type: recurrent
    rnn_type: lstm
    embeddings: {{embedding_dim: 256}}
    hidden_size: 256
    bidirectional: true
    dropout: 0.3
    num_layers: 1
  decoder:
    type: recurrent
    rnn_type: lstm
    embeddings: {{embedding_dim: 256}}
    hidden_size: 512
    dropout: 0.3
    hidden_dropout: 0.3
    num_layers: 1
    input_feeding: true
    init_hidden: bridge
    attention: {joey_attention}
"""
TOK_S = {  # the target-tokens-per-second figure in each peer's training log
    "onmt": re.compile(r"Step (\d+)/.*?(\d+)/\s*(\d+) tok/s"),
    "joey": re.compile(r"Step:\s+(\d+),.*Tokens per Sec:\s+(\d+)"),
    "marian": re.compile(r"Up\. ([\d,]+) :.*?: ([\d.,]+) words/s"),  # words: target labels
}


def marian_train_command(bin_dir: Path, work: Path, run: Path, steps: int, threads: int) -> list[str]:
    """Marian's s2s model closest to the bench shape: a 1-layer bidirectional LSTM encoder and a
    1-layer LSTM decoder (Marian's s2s decoder is Nematus's conditional one, two cells a step,
    attending between them), embeddings 256, states 512, tied embeddings, Adam 1e-3, dropout 0.3,
    64 sentences a step; SIGTERM saves and exits."""
    return [
        str(bin_dir / "pymarian"), "--type", "s2s", "--enc-type", "bidirectional", "--enc-cell", "lstm",
        "--dec-cell", "lstm", "--enc-depth", "1", "--dec-depth", "1", "--dim-emb", "256", "--dim-rnn", "512",
        "--tied-embeddings-all", "--train-sets", str(work / "sp" / "train.de"), str(work / "sp" / "train.en"),
        "--vocabs", str(run / "vocab.yml"), str(run / "vocab.yml"), "--dim-vocabs", "9000", "9000",
        "--mini-batch", "64", "--maxi-batch", "100", "--max-length", "80", "--optimizer", "adam",
        "--learn-rate", "0.001", "--dropout-rnn", "0.3", "--cpu-threads", str(threads), "--seed", "1",
        "--disp-freq", "100", "--save-freq", str(steps), "--after", f"{steps}u",
        "--model", str(run / "model.npz"), "--log", str(run / "train.log"), "--quiet",
    ]  # fmt: skip


# Marian's decoding, run by the peer's python: pieces in, pieces out, the length cap of the
# other toolkits (1.25 x the source), raw log-probability ranking (Marian's default)
MARIAN_DECODE = """
import os, sys, pymarian
model, vocab, beam, gemm, src, out = sys.argv[1:]
threads = os.environ.get("OMP_NUM_THREADS", "1")
options = f"-m {model} -v {vocab} {vocab} --beam-size {beam} --mini-batch 64 --maxi-batch 100"
options += f" --cpu-threads {threads} --max-length-factor 1.25 --gemm-type {gemm} --quiet"
lines = open(src, encoding="utf-8").read().splitlines()
open(out, "w", encoding="utf-8").write("\\n".join(pymarian.Translator(options).translate(lines)) + "\\n")
"""
# Marian's int8 (fbgemm, packed): its AVX-512 kernels where the CPU has them, else its AVX2 ones
AVX512 = (
    " avx512f " in Path("/proc/cpuinfo").read_text(errors="replace")
    if Path("/proc/cpuinfo").exists()
    else False
)
MARIAN_GEMM = {"auto": "float32", "fp32": "float32", "int8": "packed8avx512" if AVX512 else "packed8avx2"}


@functools.cache
def tokenizer():
    """The bench's joint 8k SentencePiece model (trained by scripts/bench.py on first use)."""
    import sentencepiece as spm
    from bench import CACHE, bench_config, data_dir

    from nmt.data.prepare import prepare

    directory, toy = data_dir()
    if toy:
        raise SystemExit("peers: needs Multi30k in ../shared/data/multi30k")
    prepare(bench_config("luong", "general", True, directory, toy), held_out=())
    (model,) = sorted(CACHE.glob("*/src.model"), key=lambda p: p.stat().st_mtime)[-1:]
    return spm.SentencePieceProcessor(model_file=str(model)), directory


BIG = "big10k"  # Multi30k val + test_2016 + the first 8,000 training sources: real, mixed lengths


def prepare(work: Path) -> dict:
    sp, directory = tokenizer()
    (work / "sp").mkdir(parents=True, exist_ok=True)
    (work / "raw").mkdir(parents=True, exist_ok=True)
    big = [
        *read_lines(directory / "val.de"),
        *read_lines(directory / "test_2016_flickr.de"),
        *read_lines(directory / "train.de")[:8000],
    ]
    (work / "raw" / f"{BIG}.de").write_text("\n".join(big) + "\n", encoding="utf-8")
    (work / "sp" / f"{BIG}.de").write_text(
        "\n".join(" ".join(p) for p in sp.encode(big, out_type=str)) + "\n", encoding="utf-8"
    )
    counts: Counter = Counter()
    for split in SPLITS.values():
        for lang in ("de", "en"):
            lines = read_lines(directory / f"{split}.{lang}")
            if lang == "de":
                (work / "raw" / f"{split}.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
            pieces = [" ".join(p) for p in sp.encode(lines, out_type=str)]
            (work / "sp" / f"{split}.{lang}").write_text("\n".join(pieces) + "\n", encoding="utf-8")
            if split == "train":
                counts.update(p for line in pieces for p in line.split())
    (work / "onmt.vocab").write_text(
        "".join(f"{p}\t{n}\n" for p, n in counts.most_common()), encoding="utf-8"
    )
    return {"work": str(work), "pieces": len(counts)}


def peer_env(threads: int) -> dict:
    # OpenNMT-py 3.5 checkpoints pickle an argparse.Namespace, which torch >= 2.6 refuses by default
    return os.environ | {
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
    }


def number(text: str) -> float:
    """A number as a peer's log writes it ("1,280", "330.22")."""
    value = float(text.replace(",", ""))
    return int(value) if value.is_integer() else value


def train(peer: str, python: str, work: Path, args) -> dict:
    run = work / f"{peer}-{args.tag}"
    run.mkdir(parents=True, exist_ok=True)
    steps = args.steps or 10**7
    fields = dict(
        work=work, run=run, steps=steps, seed=1, report_every=args.report_every,
        save_every=args.save_every or steps, workers=args.workers,
        onmt_attention="mlp" if args.additive else "general",
        joey_attention="bahdanau" if args.additive else "luong",
    )  # fmt: skip
    config = run / "config.yaml"
    bin_dir = Path(python).parent
    if peer == "marian":
        cmd = marian_train_command(bin_dir, work, run, steps, args.threads)
    else:
        config.write_text((ONMT if peer == "onmt" else JOEY).format(**fields), encoding="utf-8")
        cmd = (
            [str(bin_dir / "onmt_train"), "-config", str(config)]
            if peer == "onmt"
            else [python, "-m", "joeynmt", "train", str(config)]
        )
    start = time.perf_counter()
    log = (run / ("stdout.log" if peer == "marian" else "train.log")).open("w", encoding="utf-8")
    # A session of its own, so that stopping it also stops OpenNMT-py's DataLoader workers.
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=peer_env(args.threads), start_new_session=True
    )
    stop = functools.partial(os.killpg, proc.pid, signal.SIGTERM)
    timeline = []  # (seconds since start, step) at each logged report
    deadline = start + args.minutes * 60 if args.minutes else None
    pattern, train_log = TOK_S[peer], run / "train.log"
    usage = None  # the child's own resources, once it has ended (wait4: its peak memory alone)
    while usage is None:
        time.sleep(0.5)
        pid, status, ended = os.wait4(proc.pid, os.WNOHANG)
        if pid:  # reaped here, so Popen is told how it ended
            usage, proc.returncode = ended, os.waitstatus_to_exitcode(status)
        text = train_log.read_text(encoding="utf-8", errors="replace") if train_log.exists() else ""
        reached = [number(m.group(1)) for m in pattern.finditer(text)]
        if reached and (not timeline or reached[-1] != timeline[-1][1]):
            timeline.append((round(time.perf_counter() - start, 2), reached[-1]))
        # JoeyNMT counts epochs, not steps: it is stopped at --steps
        joey_done = peer == "joey" and reached and args.steps and reached[-1] >= args.steps
        if usage is None and (joey_done or (deadline and time.perf_counter() >= deadline)):
            stop()
    seconds = time.perf_counter() - start
    log.close()
    text = (run / "train.log").read_text(encoding="utf-8", errors="replace")
    rates = [number(m.group(m.lastindex)) for m in pattern.finditer(text)]
    if not rates:
        raise SystemExit(
            f"peers: {peer} logged no training step; the end of {run / 'train.log'}:\n{text[-2000:]}"
        )
    (run / "timeline.json").write_text(json.dumps(timeline) + "\n")
    return {
        "peer": peer,
        "case": (
            "train-s2s (Marian's conditional LSTM decoder)"
            if peer == "marian"
            else "train-additive-if (their bahdanau)"
            if args.additive
            else "train-luong-general-if"
        ),
        "value": statistics.median(rates[1:] or rates),
        # Sentences/s from our own clock (each log line seen within 0.5 s), after the first report:
        # unlike tokens, every toolkit counts sentences alike (64 per step).
        "sentences_per_s": (
            round(64 * (timeline[-1][1] - timeline[1][1]) / (timeline[-1][0] - timeline[1][0]), 1)
            if len(timeline) > 2
            else None
        ),
        "unit": "tgt_tokens/s (median of the peer's own log windows after the first)",
        "windows": len(rates),
        "wall_s": round(seconds, 1),
        "time_to_first_report_s": timeline[0][0] if timeline else None,
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "threads": args.threads,
        "run": str(run),
    }


def translate_command(
    peer: str,
    python: str,
    work: Path,
    model: Path,
    beam: int,
    src: str = "test",
    precision: str = "auto",
    search: str = "same",
    shortlist: Path | None = None,
) -> tuple[list[str], Path]:
    """The command that translates `src` (test: test_2016; big: the 10,000-line file) at batch 64,
    and the file it writes. search "same": both toolkits cap outputs at 1.25 x source length + 5
    (OpenNMT-py's default; nmt's source length counts EOS, so + 4 there) and rank by raw
    log-probability (OpenNMT-py's default); "default": nmt's own search (its recipe's ranking,
    cap and stop), OpenNMT-py's unchanged."""
    name = "test_2016_flickr" if src == "test" else BIG
    tag = (
        f"{src}.beam{beam}"
        + ("" if precision == "auto" else f".{precision}")
        + ("" if search == "same" else ".default")
        + ("" if shortlist is None else ".shortlist")
    )
    if peer == "onmt":
        out = model.with_suffix(f".{tag}.pieces")
        cmd = [
            str(Path(python).parent / "onmt_translate"), "-model", str(model),
            "-src", str(work / "sp" / f"{name}.de"), "-output", str(out), "-beam_size", str(beam),
            "-batch_size", "64", "-batch_type", "sents", "-max_length", "250",
            "-max_length_ratio", "1.25", "-report_time", "-gpu", "-1",
            *(["-precision", "int8"] if precision == "int8" else []),  # its torch dynamic quantisation
        ]  # fmt: skip
    elif peer == "marian":
        if precision not in MARIAN_GEMM:
            raise SystemExit(f"peers: Marian has no {precision} on a CPU (use {', '.join(MARIAN_GEMM)})")
        out = model.with_suffix(f".{tag}.pieces")
        vocab = model.parent / "vocab.yml"
        cmd = [python, "-c", MARIAN_DECODE, str(model), str(vocab), str(beam), MARIAN_GEMM[precision],
               str(work / "sp" / f"{name}.de"), str(out)]  # fmt: skip
    elif peer == "nmt":
        out = model.with_suffix(f".{tag}.txt")
        same = ["--alpha", "0", "--length-penalty", "none", "--max-len", "250", "--max-len-ratio", "1.25",
                "--max-len-add", "4"]  # fmt: skip
        cmd = [
            str(Path(sys.executable).parent / "nmt"), "translate", "-m", str(model),
            "-i", str(work / "raw" / f"{name}.de"), "-o", str(out), "--beam", str(beam),
            "--batch-size", "64", *(same if search == "same" else []), "--device", "cpu", "--quiet",
            "--precision", precision, *([] if shortlist is None else ["--shortlist", str(shortlist)]),
        ]  # fmt: skip
    else:
        out = model.with_suffix(f".{tag}.pieces")
        cfg = out.with_suffix(".yaml")
        testing = {"load_model": str(model), "beam_size": beam, "beam_alpha": 0.0, "batch_size": 64,
                   "batch_type": "sentence", "max_output_length": 100}  # fmt: skip
        raw = yaml.safe_load((model.parent / "config.yaml").read_text())
        cfg.write_text(yaml.safe_dump(raw | {"testing": testing}))
        cmd = [python, "-m", "joeynmt", "translate", str(cfg), "-o", str(out)]
    return cmd, out


@functools.cache
def nmt_bytecode() -> None:
    """nmt's modules compiled to bytecode once, as pip compiles an installed package (OpenNMT-py's
    and Marian's among them): an editable install run under PYTHONDONTWRITEBYTECODE=1 (as in many
    containers, and this workplace's shells) compiles its ~70 modules at every start instead,
    0.06 s of every whole nmt command on a Zen 4."""
    compileall.compile_dir(Path(nmt.__file__).parent, quiet=1)


def translate(
    peer: str,
    python: str,
    work: Path,
    model: Path,
    beam: int,
    threads: int,
    src: str = "test",
    precision: str = "auto",
    search: str = "same",
    shortlist: Path | None = None,
) -> dict:
    """Whole-process (and, for OpenNMT-py, decoding-loop) sentences/s at batch 64 on `src`, peak
    memory, output length and test BLEU (`translate_command` says which search)."""
    name = "test_2016_flickr" if src == "test" else BIG
    if shortlist is not None and peer != "nmt":
        raise SystemExit("peers: --shortlist is nmt's (nmt shortlist makes one)")
    cmd, out = translate_command(peer, python, work, model, beam, src, precision, search, shortlist)
    if peer == "nmt":
        nmt_bytecode()
    proc, seconds, peak_mib = run_measured(cmd, work / "sp" / f"{name}.de", peer_env(threads))
    if proc.returncode:
        raise SystemExit(f"peers: {cmd[0]} failed:\n{proc.stderr[-2000:]}")
    loop = re.search(r"Total translation time \(s\): ([\d.]+)", proc.stderr + proc.stdout)
    hyps = read_lines(out) if peer == "nmt" else decode_pieces(out)
    return {
        "peer": peer,
        "case": f"decode-{'greedy' if beam == 1 else f'beam{beam}'}-b64"
        + ("" if precision == "auto" else f"-{precision}")
        + ("" if shortlist is None else "-shortlist"),
        "src": name,
        "sentences": len(hyps),
        "loop_sent_per_s": round(len(hyps) / float(loop.group(1)), 1) if loop else None,
        "process_sent_per_s": round(len(hyps) / seconds, 1),
        "process_s": round(seconds, 2),
        "mean_output_words": round(statistics.mean(len(h.split()) for h in hyps), 2),
        "peak_rss_mib": round(peak_mib, 1),
        "bleu": bleu(hyps) if src == "test" else None,
        "threads": threads,
    }


def run_measured(cmd: list[str], stdin: Path, env: dict) -> tuple[subprocess.CompletedProcess, float, float]:
    """`cmd` run to its end on `stdin`: what it returned, its wall seconds and its own peak memory
    in MiB (wait4's figure for this child and what it waited for, where RUSAGE_CHILDREN would give
    the largest of every child so far)."""
    with stdin.open("rb") as source, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=source, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        text = []
        for stream in (out, err):
            stream.seek(0)
            text.append(stream.read().decode("utf-8", errors="replace"))
    return subprocess.CompletedProcess(cmd, proc.returncode, *text), seconds, usage.ru_maxrss / 1024


@dataclass(frozen=True)
class Entrant:
    """One column of the decoding matrix: a toolkit, its model and the precision it decodes in."""

    label: str
    peer: str
    python: str
    model: Path
    precision: str


Runs = dict[tuple[str, int], dict[str, list[dict]]]  # (file, beam) -> entrant -> its runs' results


def matrix(
    entrants: list[Entrant], work: Path, sources: list[str], beams: list[int], rounds: int, threads: int
) -> Runs:
    """Every entrant's whole translate command on each of `sources` at each beam, `rounds` times
    (once on the 10,000-line file), each round in the other order; the results by case."""
    runs: Runs = {}
    for src in sources:
        for beam in beams:
            case = runs.setdefault((src, beam), {e.label: [] for e in entrants})
            for r in range(rounds if src == "test" else 1):
                for e in entrants if r % 2 == 0 else entrants[::-1]:
                    result = translate(e.peer, e.python, work, e.model, beam, threads, src, e.precision)
                    case[e.label].append(result)
                    print(json.dumps({"entrant": e.label, **result}), file=sys.stderr, flush=True)
    return runs


def matrix_table(runs: Runs, against: str = "OpenNMT-py") -> str:
    """A markdown table: a row per file and search, a column per entrant with each run's seconds,
    its peak memory and BLEU; then each other entrant's speed against `against` (median seconds)."""
    labels = list(next(iter(runs.values())))
    lines = [f"| whole command | {' | '.join(labels)} |", "|---" + "|---:" * len(labels) + "|"]
    ratios = []
    for (src, beam), case in runs.items():
        search = "greedy" if beam == 1 else f"beam {beam}"
        name = f"{'test_2016' if src == 'test' else '10,014 lines'}, {search}"
        cells = []
        for label in labels:
            done = case[label]
            seconds = " / ".join(f"{r['process_s']:.2f}" for r in done)
            peak = max(r["peak_rss_mib"] for r in done)
            scored = f", BLEU {done[0]['bleu']:.2f}" if done[0]["bleu"] is not None else ""
            cells.append(f"{seconds} s, {peak:,.0f} MiB{scored}")
        lines.append(f"| {name} | {' | '.join(cells)} |")
        if against in case:
            base = statistics.median(r["process_s"] for r in case[against])
            for label in labels:
                if label != against:
                    mine = statistics.median(r["process_s"] for r in case[label])
                    ratios.append(f"{name}: {label} {base / mine:.2f}x {against}'s speed")
    return "\n".join(lines + [""] + ratios)


def bench_case(case: str, threads: int) -> dict:
    """scripts/bench.py's training `case` (its default 30 steps) in a process of `threads`."""
    cmd = [sys.executable, str(ROOT / "scripts" / "bench.py"), "--case", case, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=peer_env(threads), check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def train_matrix(cases: list[str], python: str, work: Path, args, threads: list[int], rounds: int) -> Runs:
    """Each nmt bench `case` and OpenNMT-py's training, `rounds` times at each thread count, each
    round in the other order; the results keyed ("train", threads). OpenNMT-py's runs go to
    WORK/onmt-tb{threads}, apart from a 20-minute run's folder."""
    runs: Runs = {}
    labels = [*cases, "OpenNMT-py"]
    for n in threads:
        row = runs.setdefault(("train", n), {label: [] for label in labels})
        settings = {"threads": n, "steps": args.steps or 60, "report_every": 10, "tag": f"tb{n}"}
        peer_args = argparse.Namespace(**vars(args) | settings)
        for r in range(rounds):
            for label in labels if r % 2 == 0 else labels[::-1]:
                result = (
                    train("onmt", python, work, peer_args) if label == "OpenNMT-py" else bench_case(label, n)
                )
                row[label].append(result)
                print(json.dumps({"entrant": label, **result}), file=sys.stderr, flush=True)
    return runs


def train_table(runs: Runs, against: str = "OpenNMT-py") -> str:
    """A markdown table: a row per thread count, a column per entrant with each run's target
    tokens/s, the median and the peak memory; then each entrant's median against `against`'s."""
    labels = list(next(iter(runs.values())))
    lines = [f"| threads | {' | '.join(labels)} |", "|---:" + "|---" * len(labels) + "|"]
    ratios = []
    for (_, threads), row in runs.items():
        medians = {label: statistics.median(r["value"] for r in row[label]) for label in labels}
        cells = [
            f"{' / '.join(format(r['value'], ',.0f') for r in row[label])} (median {medians[label]:,.0f}), "
            f"{max(r['peak_rss_mib'] for r in row[label]):,.0f} MiB"
            for label in labels
        ]
        lines.append(f"| {threads} | {' | '.join(cells)} |")
        ratios += [
            f"{threads} thread{'s' * (threads > 1)}: {label} {medians[label] / medians[against]:.2f}x "
            f"{against}'s target tokens/s"
            for label in labels
            if label != against
        ]
    return "\n".join(lines + [""] + ratios)


def decode_pieces(path: Path) -> list[str]:
    sp, _ = tokenizer()
    return [sp.decode(line.split()) for line in path.read_text(encoding="utf-8").splitlines()]


def bleu(hyps: list[str]) -> float:
    import sacrebleu
    from bench import MULTI30K

    refs = (MULTI30K / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)


def score_nmt(run: Path, beam: int) -> dict:
    """The same curve for an nmt run (train.keep_best large keeps every validation's step-N.pt)."""
    from bench import MULTI30K

    from nmt.rundir import read_metrics

    seconds = {m["step"]: m["time"] for m in read_metrics(run) if "valid_bleu" in m}
    curve = []
    for ckpt in sorted((run / "checkpoints").glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1])):
        step = int(ckpt.stem.split("-")[1])
        out = ckpt.with_suffix(f".beam{beam}.txt")
        nmt = [
            str(Path(sys.executable).parent / "nmt"),
            "translate",
            "--model",
            str(ckpt),
            "--beam",
            str(beam),
        ]
        subprocess.run(
            [*nmt, "--input", str(MULTI30K / "test_2016_flickr.de"), "--output", str(out)], check=True
        )
        curve.append({"step": step, "seconds": seconds.get(step), "bleu": bleu(out.read_text().splitlines())})
        print(json.dumps(curve[-1]), file=sys.stderr, flush=True)
    return {"peer": "nmt", "beam": beam, "curve": curve}


def score(peer: str, python: str, work: Path, tag: str, beam: int, threads: int) -> dict:
    """Test BLEU (beam) of every checkpoint the equal-budget run saved, against training time."""
    run = work / f"{peer}-{tag}"
    timeline = json.loads((run / "timeline.json").read_text())
    curve = []
    for ckpt in sorted(run.glob("model_step_*.pt"), key=lambda p: int(re.findall(r"\d+", p.stem)[-1])):
        step = int(re.findall(r"\d+", ckpt.stem)[-1])
        seconds = next((t for t, s in timeline if s >= step), None)
        result = translate(peer, python, work, ckpt, beam, threads)
        curve.append({"step": step, "seconds": seconds, "bleu": result["bleu"]})
        print(json.dumps(curve[-1]), file=sys.stderr, flush=True)
    return {"peer": peer, "beam": beam, "curve": curve}


def plot(curves: list[Path], labels: list[str], out: Path) -> dict:
    """Test BLEU against training time, one line per `score` result (issue 8's equal budget)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    for path, label in zip(curves, labels or [p.stem for p in curves], strict=True):
        points = [(c["seconds"] / 60, c["bleu"]) for c in json.loads(path.read_text())["curve"]]
        ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=label)
    ax.set(xlabel="training time (minutes)", ylabel="test_2016 BLEU (beam 5)", ylim=(0, None))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return {"plot": str(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "command", choices=["prepare", "train", "translate", "score", "plot", "matrix", "train-matrix"]
    )
    ap.add_argument("peer", nargs="?", choices=["onmt", "joey", "marian", "nmt"])
    ap.add_argument("--python", help="the peer virtualenv's python")
    ap.add_argument("--work", type=Path, default=Path("../peers/work"))
    ap.add_argument("--steps", type=int)
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--save-every", type=int)
    ap.add_argument("--report-every", type=int, default=25)
    ap.add_argument("--workers", type=int, default=2, help="OpenNMT-py DataLoader workers (its default: 2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tag", default="bench")
    ap.add_argument(
        "--additive",
        action="store_true",
        help="the additive score (their 'bahdanau': Luong order, input feeding)",
    )
    ap.add_argument("--model", type=Path)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "int8"],
        default="auto",
        help="translate: nmt's --precision",
    )
    ap.add_argument("--shortlist", type=Path, help="translate: nmt's --shortlist (from `nmt shortlist`)")
    ap.add_argument(
        "--src", choices=["test", "big"], nargs="+", default=["test"],
        help="translate: test_2016 or the 10k file; matrix: either or both",
    )  # fmt: skip
    ap.add_argument("--onmt", type=Path, help="matrix: OpenNMT-py's checkpoint (--python runs it)")
    ap.add_argument("--marian", type=Path, help="matrix: Marian's model.npz (--marian-python runs it)")
    ap.add_argument("--marian-python", help="matrix: the Marian virtualenv's python")
    ap.add_argument(
        "--precisions", nargs="+", default=["fp32", "auto"], help="matrix: nmt's precisions, a column each"
    )
    ap.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="matrix: the searches' beams")
    ap.add_argument("--rounds", type=int, default=2, help="(train-)matrix: runs of each case")
    ap.add_argument(
        "--cases",
        nargs="+",
        default=["train-luong-general-if"],
        help="train-matrix: scripts/bench.py's cases",
    )
    ap.add_argument("--threads-list", type=int, nargs="+", default=[2, 1], help="train-matrix: thread counts")
    ap.add_argument(
        "--search", choices=["same", "default"], default="same",
        help="translate: the same search for every toolkit, or each one's defaults",
    )  # fmt: skip
    ap.add_argument("--curves", type=Path, nargs="*", help="plot: `score` results (JSON files)")
    ap.add_argument("--labels", nargs="*", help="plot: one legend label per curve")
    ap.add_argument("--out", type=Path, help="plot: the PNG to write")
    args = ap.parse_args()
    work = args.work.resolve()
    if args.command == "plot":
        result = plot(args.curves, args.labels, args.out)
    elif args.command == "prepare":
        result = prepare(work)
    elif args.command == "train":
        result = train(args.peer, args.python, work, args)
    elif args.command == "translate":
        result = translate(
            args.peer, args.python, work, args.model, args.beam, args.threads, args.src[0], args.precision,
            args.search, args.shortlist,
        )  # fmt: skip
    elif args.command == "matrix":
        entrants = [Entrant(f"nmt {p}", "nmt", sys.executable, args.model, p) for p in args.precisions]
        entrants.append(Entrant("OpenNMT-py", "onmt", args.python, args.onmt, "auto"))
        if args.marian:  # its fastest CPU mode: int8, packed
            label = f"Marian {MARIAN_GEMM['int8']}"
            entrants.append(Entrant(label, "marian", args.marian_python, args.marian, "int8"))
        runs = matrix(entrants, work, args.src, args.beams, args.rounds, args.threads)
        print(matrix_table(runs))
        result = {f"{src} beam {beam}": case for (src, beam), case in runs.items()}
    elif args.command == "train-matrix":
        runs = train_matrix(args.cases, args.python, work, args, args.threads_list, args.rounds)
        print(train_table(runs))
        result = {f"{threads} threads": row for (_, threads), row in runs.items()}
    elif args.peer == "nmt":
        result = score_nmt(args.model, args.beam)  # --model: the nmt run directory
    else:
        result = score(args.peer, args.python, work, args.tag, args.beam, args.threads)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
