"""Where a training step's time goes on a GPU: steps/s eager and with CUDA graphs, kernels and
host syncs per step (torch profiler), capture cost, and one validation's time.

    python scripts/gpu_step.py --data ../shared/data/multi30k --out /tmp/gpu-step

The bench model of scripts/gpu/side_by_side.sh (multi30k-luong-dot.yaml with general
attention, bf16). Prints one line a figure and writes the profiler tables to --out.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

from nmt.config import load_config
from nmt.rundir import prepare_run_dir
from nmt.train.trainer import Trainer

SYNCS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpyAsync",
)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def trainer_for(args, out: Path, batch: int, graphs: bool) -> Trainer:
    overrides = [
        f"data.dir={args.data}",
        "model.attention.type=general",
        f"train.device={args.device}",
        f"train.precision={args.precision}",
        f"train.batch_size={batch}",
        f"train.cuda_graphs={str(graphs).lower()}",
    ]
    cfg = load_config("multi30k-luong-dot.yaml", overrides)
    run = Path(tempfile.gettempdir()) / "gpu-step" / f"run-{batch}-{graphs}"
    shutil.rmtree(run, ignore_errors=True)
    prepare_run_dir(run, cfg).release()
    return Trainer(cfg, run, quiet=True)


def run_steps(trainer: Trainer, plan, start: int, n: int) -> int:
    """`n` optimiser steps from batch `start`; the target tokens they trained on."""
    tokens = 0
    for k in range(start, start + n):
        batches = trainer.epochs.batches([plan[k % len(plan)]])
        tokens += sum(b.n_tgt_tokens for b in batches)
        trainer.learner.step(batches, k, trainer.generator, trainer.last)
    return tokens


def measure(args, out: Path, batch: int, graphs: bool, report) -> Trainer:
    trainer = trainer_for(args, out, batch, graphs)
    plan = trainer.epochs.start(0)
    sync()
    started = time.perf_counter()
    run_steps(trainer, plan, 0, args.warmup)
    sync()
    warm = time.perf_counter() - started
    started = time.perf_counter()
    tokens = run_steps(trainer, plan, args.warmup, args.steps)
    sync()
    seconds = time.perf_counter() - started
    made = trainer.learner.objective.graphs
    report(
        f"batch {batch} graphs {graphs} {args.precision}: {1000 * seconds / args.steps:.2f} ms/step, "
        f"{tokens / seconds:.0f} target tokens/s over {args.steps} steps; warm-up {args.warmup} steps "
        f"{warm:.1f} s" + (f" ({len(made.graphs)} graphs captured)" if made else "")
    )
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        run_steps(trainer, plan, args.warmup + args.steps, 5)
        sync()
    events = prof.key_averages()
    kernels = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    syncs = {e.key: e.count for e in events if e.key in SYNCS}
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cudaGraphLaunch"))
    report(
        f"batch {batch} graphs {graphs}: per step {kernels / 5:.0f} GPU kernels/copies, "
        f"{launches / 5:.0f} launches, syncs and copies { ({k: v / 5 for k, v in syncs.items()}) }"
    )
    table = events.table(sort_by="self_cpu_time_total", row_limit=25)
    (out / f"profile-{batch}-{graphs}.txt").write_text(table)
    return trainer


def timed(fn) -> float:
    sync()
    started = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - started


def validation(trainer: Trainer, args, report) -> None:
    """One validation, its loss and its translations apart; then test_2016 through the search
    (beam 1 and 5, batch 64 and 256), with the host syncs it makes and where its time goes (the
    profiler's table of 256 lines, to --out)."""
    from nmt.decode.translator import Translator

    learner = trainer.learner
    whole = timed(trainer.evaluate_model)
    loss = timed(lambda: trainer.validator.loss(learner.objective, 0, trainer.generator))
    report(f"validation: {whole:.2f} s, of which the loss {loss:.2f} s (beam {trainer.cfg.decode.beam})")
    lines = (Path(args.data) / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    trainer.model.eval()
    for beam, size in ((1, 64), (5, 64), (5, 256)):
        overrides = {"beam": beam, "batch_size": size}
        model, device = trainer.model, trainer.device
        translator = Translator.from_config(model, trainer.tok, trainer.cfg, device, overrides)
        translate = translator.translate  # without attention outputs, as `nmt translate`
        translate(lines[:64], attention=False)
        seconds = timed(lambda translate=translate: translate(lines, attention=False))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            translate(lines[:256], attention=False)
        events = prof.key_averages()
        syncs = {e.key: e.count for e in events if e.key in SYNCS}
        report(f"test_2016 beam {beam} batch {size}: {seconds:.2f} s; 256 lines: {syncs}")
        table = events.table(sort_by="self_cpu_time_total", row_limit=30)
        (args.out / f"decode-profile-beam{beam}-batch{size}.txt").write_text(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of this script")
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--runs",
        default="64:eager,64:graphs,256:eager,256:graphs,64:graphs:fp16",
        help="batch:eager|graphs[:bf16|fp16|fp32], comma-separated",
    )
    parser.add_argument("--decode", default="", help="after this run: one validation and test_2016 decoding")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = []

    def report(line: str) -> None:
        print(line, flush=True)
        lines.append(line)
        (args.out / "summary.txt").write_text("\n".join(lines) + "\n")

    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    report(f"# {name} torch {torch.__version__}")
    for run in args.runs.split(","):
        batch, mode, precision = (run.split(":") + ["bf16"])[:3]
        args.precision = precision
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        trainer = measure(args, args.out, int(batch), mode == "graphs", report)
        if args.device == "cuda":
            report(f"{run}: peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
        if args.decode and run == args.decode:
            validation(trainer, args, report)
        del trainer
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
