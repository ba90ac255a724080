"""How every cost grows with the work: `nmt data prepare`, training start-up and memory, and
decoding, at corpus sizes up to WMT14's (4.5M pairs) and input files up to 1M lines.

    python scripts/bench_scale.py                                 # every table (`make bench-scale`)
    python scripts/bench_scale.py --only prepare --pairs 29000 1000000
    python scripts/bench_scale.py --only decode --lines 1000 10000 --beams 5

Corpora: Multi30k de-en itself (29k pairs), and larger ones derived from it, each pair two
random Multi30k training pairs joined (seeded): every line is real text, nearly every line is
unique (so SentencePiece learns and encodes text as varied as a real corpus's), and lines
average 24 English words, as WMT14 en-de's do. They are written once into .bench-cache/scale/
(1.2 GB for 4.5M pairs). Decoding translates Multi30k's test_2016 repeated to each size with
the bench checkpoint (scripts/bench.py). Training trains the epoch's largest batch second
(once the optimiser's state exists), so its peak is the worst its corpus holds. Every
measurement is a process of its own, with its own peak resident memory; run on a quiet machine
(`uptime`) and compare figures from one session.
Everything runs as `nmt` does, on tcmalloc when the system has it (nmt/allocator.py).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import CACHE, MULTI30K, bench_model  # noqa: E402

SCALE = CACHE / "scale"
PAIRS = [29_000, 200_000, 1_000_000, 4_500_000]
LINES = [1_000, 10_000, 100_000, 1_000_000]
NMT = str(Path(sys.executable).parent / "nmt")
CONFIG = "multi30k-luong-dot.yaml"  # the 20-minute recipe's model: 8k joint pieces, Luong dot
TRAIN_STEPS = 300  # enough for training memory to settle (it grew for 300 steps on glibc's malloc)
# Runs a command and prints its peak RSS in MiB: each measurement gets a fresh peak of its own.
CHILD_PEAK = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
    "print(round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1))"
)


def corpus(pairs: int) -> Path:
    """A data folder with `pairs` training pairs (and Multi30k's validation and test splits)."""
    if pairs == 29_000:
        return MULTI30K
    folder = SCALE / f"{pairs}"
    if (folder / "train.en").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    de = (MULTI30K / "train.de").read_text(encoding="utf-8").splitlines()
    en = (MULTI30K / "train.en").read_text(encoding="utf-8").splitlines()
    rng = random.Random(pairs)
    with (
        open(folder / "train.de.tmp", "w", encoding="utf-8") as fde,
        open(folder / "train.en.tmp", "w", encoding="utf-8") as fen,
    ):
        for start in range(0, pairs, 10_000):
            picks = [
                (rng.randrange(len(de)), rng.randrange(len(de))) for _ in range(min(10_000, pairs - start))
            ]
            fde.write("".join(f"{de[i]} {de[j]}\n" for i, j in picks))
            fen.write("".join(f"{en[i]} {en[j]}\n" for i, j in picks))
    for split in ("val", "test_2016_flickr"):
        for lang in ("de", "en"):
            link = folder / f"{split}.{lang}"
            link.unlink(missing_ok=True)
            link.symlink_to(MULTI30K / f"{split}.{lang}")
    for lang in ("de", "en"):
        (folder / f"train.{lang}.tmp").replace(folder / f"train.{lang}")
    return folder


def measured(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of a command run to completion."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD_PEAK, *cmd], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return time.perf_counter() - start, float(out.stdout.split()[-1])


def settings(pairs: int, cache: Path) -> list[str]:
    return ["-c", CONFIG, "--set", f"data.dir={corpus(pairs)}", "--set", f"data.cache_dir={cache}"]


def prepare_row(pairs: int, work: Path) -> dict:
    """`nmt data prepare` from nothing, then again from its cache."""
    cache = work / f"cache-{pairs}"
    seconds, peak = measured([NMT, "data", "prepare", *settings(pairs, cache)])
    again, again_peak = measured([NMT, "data", "prepare", *settings(pairs, cache)])
    size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    return {"pairs": pairs, "seconds": round(seconds, 1), "peak_mib": peak, "cache_mib": round(size / 2**20),
            "cached_seconds": round(again, 2), "cached_peak_mib": again_peak}  # fmt: skip


def train_row(pairs: int, work: Path) -> dict:
    """`nmt train` for TRAIN_STEPS steps and a validation on the prepared cache, the epoch's
    largest batch second (`train_largest_second`): the start-up (process start to the first step,
    from train.log) and the peak memory."""
    run = work / f"run-{pairs}"
    steps = ["--set", f"train.max_steps={TRAIN_STEPS}", "--set", f"train.valid_every={TRAIN_STEPS}"]
    seconds, peak = measured(
        [
            sys.executable,
            __file__,
            "--train-largest-second",
            *settings(pairs, work / f"cache-{pairs}"),
            *steps,
            "-o",
            str(run),
            "-q",
        ]
    )
    startup = re.search(
        r"start-up: ([\d.]+) s to the first step \(the data ([\d.]+) s\)", (run / "train.log").read_text()
    )
    return {"pairs": pairs, "startup_seconds": float(startup[1]), "data_seconds": float(startup[2]),
            "seconds": round(seconds, 1), "peak_mib": peak}  # fmt: skip


def train_largest_second(arguments: list[str]) -> None:
    """`nmt train ARGUMENTS` with the epoch's largest batch (sentences x their longest source
    and target) trained second, after the first step has made the optimiser's state that every
    later step holds. Training's peak memory is that of the largest batch it has met, bounded by
    the batch size and the length filter; which batches 300 steps meet is chance (on the 4.5M
    corpus a 78/68-piece batch at step 29 added 230 MB), so every row meets the worst one, as
    scripts/bench.py's cases do."""
    import numpy as np

    from nmt.data.batching import EpochPlan
    from nmt.train.epochs import Epochs

    plan_epoch = Epochs.plan

    def largest_second(epochs: Epochs, epoch: int) -> EpochPlan:
        plan, corpus = plan_epoch(epochs, epoch), epochs.corpus
        src, tgt = (
            np.maximum.reduceat(side.lengths[plan.order], plan.starts[:-1])
            for side in (corpus.src, corpus.tgt)
        )
        cost = np.diff(plan.starts) * (src.astype(np.int64) + tgt)
        first = int(np.argmax(cost[plan.sequence]))  # its place in the training order
        rest = np.delete(plan.sequence, first)
        sequence = np.concatenate([rest[:1], plan.sequence[first : first + 1], rest[1:]])
        return EpochPlan(plan.order, plan.starts, sequence)

    Epochs.plan = largest_second
    from nmt.cli import app

    app(["train", *arguments])


def decode_row(lines: int, beam: int, model: Path, work: Path) -> dict:
    """`nmt translate` on test_2016 repeated to `lines` lines."""
    test = (MULTI30K / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    source = work / f"{lines}.de"
    if not source.is_file():
        with open(source, "w", encoding="utf-8") as f:
            for start in range(0, lines, len(test)):
                f.write("".join(line + "\n" for line in test[: min(len(test), lines - start)]))
    cmd = [NMT, "translate", "-m", str(model), "-i", str(source), "-o", str(work / "out.txt")]
    seconds, peak = measured([*cmd, "--beam", str(beam), "--device", "cpu", "--quiet"])
    rate = round(lines / seconds)
    return {
        "lines": lines,
        "beam": beam,
        "seconds": round(seconds, 1),
        "sentences_per_s": rate,
        "peak_mib": peak,
    }


def table(title: str, rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = [f"\n{title}", "| " + " | ".join(keys) + " |", "|" + "---:|" * len(keys)]
    lines += [
        "| " + " | ".join(f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]) for k in keys) + " |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    from nmt.allocator import restart_with_tcmalloc

    restart_with_tcmalloc()
    if sys.argv[1:2] == ["--train-largest-second"]:
        return train_largest_second(sys.argv[2:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", choices=["prepare", "train", "decode"], help="one table (train needs prepare's caches)"
    )
    parser.add_argument("--pairs", type=int, nargs="+", default=PAIRS)
    parser.add_argument("--lines", type=int, nargs="+", default=LINES)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--model", type=Path, help="decoding checkpoint (default: the bench's)")
    parser.add_argument("--work", type=Path, default=SCALE / "work", help="caches, runs and inputs (reused)")
    args = parser.parse_args()
    if not (MULTI30K / "train.de").is_file():
        raise SystemExit(f"Multi30k not found at {MULTI30K}: the scale corpora are made from it")
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    if args.only in (None, "prepare"):
        for pairs in args.pairs:  # a fresh cache each time
            subprocess.run(["rm", "-rf", str(args.work / f"cache-{pairs}")], check=True)
        results["prepare"] = [prepare_row(p, args.work) for p in args.pairs]
        print(table("nmt data prepare", results["prepare"]), flush=True)
    if args.only in (None, "train"):
        for pairs in args.pairs:
            subprocess.run(["rm", "-rf", str(args.work / f"run-{pairs}")], check=True)
        results["train"] = [train_row(p, args.work) for p in args.pairs]
        print(table(f"nmt train, {TRAIN_STEPS} steps", results["train"]), flush=True)
    if args.only in (None, "decode"):
        model = args.model or bench_model()
        results["decode"] = [decode_row(n, b, model, args.work) for b in args.beams for n in args.lines]
        print(table("nmt translate", results["decode"]), flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
