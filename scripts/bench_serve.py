"""Benchmark `nmt serve` against `nmt translate` on the same sentences, in one run.

1. `nmt translate -i FILE` on the sentences (a subprocess, timed whole), and the same decoding
   in process (`Translator.translate` on the whole list: the decoding-only file throughput);
2. each sentence alone in process (the in-process latency of one greedy sentence);
3. `nmt serve` on the checkpoint, driven with one sentence per request at bounded concurrency
   (1, 8, 32 clients, each with its own keep-alive connection): sentences/s, p50/p99 latency,
   and a check that every answer equals the file translation's line.

Targets (issue 19): at concurrency 32 at least 70% of the file throughput; at concurrency 1 a
p50 latency within 1.5x of the in-process time of a sentence. The model is --model, or a
Multi30k de->en model trained for --train-minutes (cached in .bench-cache/), or the toy task's
when Multi30k is absent. Decoding is greedy (--beam to change it).

    python scripts/bench_serve.py [--model CKPT] [--sentences 1000] [--concurrency 1,8,32]
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".bench-cache"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
NMT = [sys.executable, "-m", "nmt"]


def bench_model(minutes: float) -> tuple[Path, Path]:
    """(checkpoint, test source file): a Multi30k de->en model trained for `minutes` once and
    cached, or the toy task's when Multi30k is absent."""
    import nmt

    if (MULTI30K / "train.de").is_file():
        config, data, source = "multi30k-luong-dot.yaml", MULTI30K, MULTI30K / "test_2016_flickr.de"
    else:
        from nmt.data.toy import write_toy_corpus

        config, data = "toy-luong.yaml", CACHE / "toy"
        if not (data / "test.human").is_file():
            write_toy_corpus(data, seed=1)
        source = data / "test.human"
    run = CACHE / f"serve-{Path(config).stem}-{minutes:g}min"
    checkpoint = run / "checkpoints" / "last.pt"
    if not checkpoint.is_file():
        print(f"training {config} for {minutes:g} min into {run}", file=sys.stderr, flush=True)
        overrides = {
            "data.dir": str(data),
            "data.cache_dir": str(CACHE / "data"),
            "train.max_time": minutes * 60,
            "train.valid_every": 10**9,
        }
        nmt.train(config, overrides=overrides, output=run, quiet=True)
    return checkpoint, source


def ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.1f}" if seconds is not None else ""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def start_server(
    model: Path, log: Path, max_batch: int, max_wait_ms: float
) -> tuple[subprocess.Popen, str, int]:
    options = ["--max-batch", str(max_batch), "--max-wait-ms", str(max_wait_ms), "--queue-size", "4096"]
    command = [*NMT, "serve", "-m", str(model), "--port", "0", "--device", "cpu", *options]
    with open(log, "w") as err:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
    while not (found := re.search(r"on http://([\d.]+):(\d+) ", log.read_text())):
        if process.poll() is not None:
            raise SystemExit(f"the server did not start:\n{log.read_text()}")
        time.sleep(0.1)
    return process, found.group(1), int(found.group(2))


def drive(
    host: str, port: int, lines: list[str], concurrency: int, beam: int
) -> tuple[float, list[float], list[str]]:
    """(wall seconds, per-request latencies, texts): every line one request, `concurrency`
    clients at a time, each client on its own keep-alive connection."""
    local = threading.local()

    def one(line: str) -> tuple[float, str]:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection(host, port, timeout=120)
        body = json.dumps({"text": line, "beam": beam})
        start = time.perf_counter()
        local.connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
        response = local.connection.getresponse()
        answer = json.loads(response.read())
        elapsed = time.perf_counter() - start
        if response.status != 200:
            raise SystemExit(f"HTTP {response.status}: {answer}")
        return elapsed, answer["translations"][0]["text"]

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, lines))
    return time.perf_counter() - start, [r[0] for r in results], [r[1] for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=Path, help="checkpoint or run directory (default: trained and cached)"
    )
    parser.add_argument("--input", type=Path, help="one sentence a line (default: the model's test split)")
    parser.add_argument("--sentences", type=int, default=1000, help="how many lines of the input")
    parser.add_argument("--concurrency", default="1,8,32", help="client counts, comma-separated")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--latency-sentences", type=int, default=200, help="sentences timed alone")
    parser.add_argument("--train-minutes", type=float, default=3.0)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    args = parser.parse_args()

    import torch

    from nmt import Translator

    if args.model and not args.input:
        parser.error("--model needs --input (the sentences to translate)")
    model, source = (args.model, args.input) if args.model else bench_model(args.train_minutes)
    source = args.input or source
    lines = source.read_text(encoding="utf-8").splitlines()[: args.sentences]
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    (tmp / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(
        f"model {model}; {len(lines)} sentences of {source}; beam {args.beam}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads",
        flush=True,
    )

    start = time.perf_counter()
    cli = [*NMT, "translate", "-m", str(model), "-i", str(tmp / "in.txt"), "-o", str(tmp / "out.txt")]
    subprocess.run([*cli, "--beam", str(args.beam), "--device", "cpu", "-q"], check=True)
    cli_seconds = time.perf_counter() - start
    reference = (tmp / "out.txt").read_text(encoding="utf-8").splitlines()

    translator = Translator.load(model, device="cpu", beam=args.beam)
    translator.translate(lines[:16])  # warm-up
    start = time.perf_counter()
    in_process = [t.text for t in translator.translate(lines)]
    file_seconds = time.perf_counter() - start
    narrow = translator.configured(batch_size=args.max_batch)  # the same model, the server's width
    start = time.perf_counter()
    narrow.translate(lines)
    narrow_seconds = time.perf_counter() - start
    alone = []
    for line in lines[: args.latency_sentences]:
        start = time.perf_counter()
        translator.translate([line])
        alone.append(time.perf_counter() - start)
    assert in_process == reference, "in-process decoding differs from nmt translate"

    rows = [
        ("`nmt translate -i FILE` (whole process)", len(lines) / cli_seconds, None, None, ""),
        ("file, decoding only (in process)", len(lines) / file_seconds, None, None, ""),
        (
            f"file at the server's width, {args.max_batch} sentences (in process)",
            len(lines) / narrow_seconds,
            None,
            None,
            "",
        ),
        (
            "one sentence at a time (in process)",
            len(alone) / sum(alone),
            statistics.median(alone),
            percentile(alone, 99),
            "",
        ),
    ]
    process, host, port = start_server(model, tmp / "serve.log", args.max_batch, args.max_wait_ms)
    try:
        drive(host, port, lines[:32], 8, args.beam)  # warm-up
        for concurrency in [int(c) for c in args.concurrency.split(",")]:
            n = args.latency_sentences if concurrency == 1 else len(lines)
            seconds, latencies, texts = drive(host, port, lines[:n], concurrency, args.beam)
            same = sum(a == b for a, b in zip(texts, reference, strict=False))
            rows.append(
                (
                    f"`nmt serve`, {concurrency} clients",
                    n / seconds,
                    statistics.median(latencies),
                    percentile(latencies, 99),
                    f"{same}/{n}",
                )
            )
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    print("\n| how | sentences/s | p50 ms | p99 ms | same as file |\n|---|---:|---:|---:|---:|")
    for how, rate, p50, p99, same in rows:
        print(f"| {how} | {rate:.1f} | {ms(p50)} | {ms(p99)} | {same} |")
    file_rate, narrow_rate, serve = rows[1][1], rows[2][1], {r[0]: r for r in rows[4:]}
    top = serve.get("`nmt serve`, 32 clients")
    one = serve.get("`nmt serve`, 1 clients")
    print()
    if top:
        print(
            f"32 clients: {top[1] / file_rate:.0%} of the file throughput (target >= 70%), "
            f"{top[1] / narrow_rate:.0%} of the decoder's at the server's width"
        )
    if one:
        print(f"1 client: p50 {one[2] / rows[3][2]:.2f}x the in-process time of a sentence (target <= 1.5x)")
    print(f"server exit code after SIGTERM: {code}")


if __name__ == "__main__":
    main()
