"""What shipping a trained run gives: sizes, averaging, and the ONNX decoder against torch.

    python scripts/ship_bench.py RUN_DIR --src test.src --ref test.ref [--last 4] [--beam 5] [--lines N]

For RUN_DIR it writes, into a temporary folder: the average of the last k snapshots, an fp32 and
an fp16 release, and an ONNX export. It prints (as a Markdown table) their sizes against the
training checkpoint, test BLEU of best.pt against the average, how many lines the onnx engine
translates differently from torch (greedy and beam), and decoding speed in sentences/s of both
engines on the same sentences (model loading excluded, one warm-up pass not timed), plus the
installed size of the packages each engine needs.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import tempfile
import time
from pathlib import Path


def package_bytes(name: str) -> int:
    dist = metadata.distribution(name)
    return sum(
        Path(dist.locate_file(f)).stat().st_size
        for f in dist.files or []
        if Path(dist.locate_file(f)).is_file()
    )


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def timed(translator, lines: list[str]) -> tuple[list[str], float]:
    translator.translate(lines[:50])  # warm-up: sessions, allocator, thread pools
    start = time.perf_counter()
    out = [t.text for t in translator.translate(lines)]
    return out, len(lines) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", type=Path)
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--ref", type=Path, required=True)
    parser.add_argument("--last", type=int, default=4, help="snapshots to average (0: skip averaging)")
    parser.add_argument("--lines", type=int, default=0, help="use only the first N test lines (0: all)")
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args()

    from nmt.checkpoint import resolve_checkpoint
    from nmt.decode.translator import load_translator
    from nmt.evaluate.scoring import EvalOptions, evaluate
    from nmt.fileio import read_lines
    from nmt.runtime.translator import load_onnx_translator
    from nmt.ship.average import average
    from nmt.ship.export import export
    from nmt.ship.release import release

    src, ref = read_lines(args.src), read_lines(args.ref)
    if args.lines:
        src, ref = src[: args.lines], ref[: args.lines]
    work = Path(tempfile.mkdtemp(prefix="ship-bench-"))
    checkpoint = resolve_checkpoint(args.run)

    def bleu(hyps: list[str]) -> float:
        return evaluate({"x": hyps}, [ref], EvalOptions(bootstrap=0)).systems[0].scores["BLEU"]

    if args.last:
        print(average([args.run], args.last, work / "avg.pt"))
    fp32 = release(args.run, work / "release", test_src=args.src, test_ref=args.ref)
    fp16 = release(args.run, work / "release-fp16", fp16=True)
    print(*export(args.run, work / "onnx"), sep="\n")
    onnx_bytes = sum(p.stat().st_size for p in (work / "onnx").iterdir() if p.suffix == ".onnx")

    print("\n| artefact | size |\n|---|---:|")
    print(f"| training checkpoint ({checkpoint.name}) | {mb(checkpoint.stat().st_size)} |")
    print(f"| release fp32 (all files) | {mb(fp32.release_bytes)} |")
    print(f"| release fp16 (all files) | {mb(fp16.release_bytes)} |")
    print(f"| ONNX graphs (encoder + decoder step) | {mb(onnx_bytes)} |")

    rows = []
    for beam in (1, args.beam):
        torch_out, torch_speed = timed(load_translator([args.run], {"beam": beam}), src)
        onnx_out, onnx_speed = timed(load_onnx_translator([work / "onnx"], {"beam": beam}), src)
        differ = sum(a != b for a, b in zip(torch_out, onnx_out, strict=True))
        rows.append((beam, differ, torch_speed, onnx_speed, bleu(torch_out), bleu(onnx_out)))
    print(f"\n| search ({len(src)} sentences) | lines differing | torch sent/s | onnxruntime sent/s", end="")
    print(" | BLEU torch | BLEU onnx |")
    print("|---|---:|---:|---:|---:|---:|")
    for beam, differ, ts, os_, bt, bo in rows:
        name = "greedy" if beam == 1 else f"beam {beam}"
        print(f"| {name} | {differ} | {ts:.0f} | {os_:.0f} | {bt:.2f} | {bo:.2f} |")

    if args.last:
        best = [t.text for t in load_translator([args.run], {}).translate(src)]
        averaged = [t.text for t in load_translator([work / "avg.pt"], {}).translate(src)]
        print(f"\ntest BLEU (the config's decode settings): best.pt {bleu(best):.2f}, ", end="")
        print(f"average of the last {args.last} snapshots {bleu(averaged):.2f}")

    torch_env = package_bytes("torch")
    onnx_env = sum(
        package_bytes(p) for p in ("onnxruntime", "numpy", "sentencepiece", "protobuf", "flatbuffers")
    )
    print(f"installed: torch {mb(torch_env)}; ", end="")
    print(f"onnxruntime + numpy + sentencepiece + protobuf + flatbuffers {mb(onnx_env)}")
    print(f"(files in {work})")


if __name__ == "__main__":
    main()
