"""Training and decoding speed on one shared model shape, each case in its own process.

    python scripts/bench.py                      # the headline cases (`make bench`): a table
    python scripts/bench.py --all                # every attention x decoder style too
    python scripts/bench.py --case train-luong-general-if --steps 30 --json
    python scripts/bench.py --case decode-beam5-b64 --json [--model CKPT]
    python scripts/bench_scale.py                # memory and time against the size of the work

The "bench model": embeddings 256, 1-layer BiLSTM encoder with 256 units per direction, 1-layer
LSTM decoder with 512 units, a joint 8k SentencePiece vocabulary, batches of 64 sentences, Adam,
dropout 0.3. Data: Multi30k de-en from ../shared when present, otherwise the toy task. Like `nmt`,
every case runs on tcmalloc when the system has it (nmt/allocator.py). Every case
trains on the same seeded batches; the first `--warmup` steps are not timed, and the second of
them (once the optimiser's state exists) is the epoch's largest batch, so that peak memory is
the epoch's peak. Decoding cases translate the test split with a checkpoint of the bench shape
(Luong general with input feeding) trained for BENCH_MODEL_STEPS steps once and cached in
.bench-cache/, unless --model is given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
CACHE = ROOT / ".bench-cache"

ATTENTIONS = ["none", "dot", "scaled_dot", "general", "concat", "bahdanau", "local_m", "local_p", "multihead"]
CASES = {f"train-luong-{a}": ("luong", a, False) for a in ATTENTIONS}
CASES |= {f"train-luong-{a}-if": ("luong", a, True) for a in ATTENTIONS}
CASES |= {f"train-bahdanau-{a}": ("bahdanau", a, False) for a in ATTENTIONS}
CASES["train-bahdanau"] = ("bahdanau", "bahdanau", False)  # the paper's model
CASES["train-bahdanau-luong-order"] = ("luong", "bahdanau", False)  # what other toolkits call it
# the same, with bf16 products (nmt.model.linear; emulated, slowly, on a CPU without bf16 units)
CASES |= {f"{name}-bf16": CASES[name] for name in ("train-luong-general-if", "train-luong-general")}
HEADLINE = [
    "train-luong-general-if",
    "train-luong-general",
    "train-luong-dot",
    "train-bahdanau",
    "train-bahdanau-luong-order",
    "decode-greedy-b64",
    "decode-beam5-b64",
    "decode-greedy-b1",
    "decode-beam5-b1",
    "decode-greedy-b64-int8",
    "decode-beam5-b64-int8",
    "decode-greedy-b64-bf16",
    "decode-beam5-b64-bf16",
]
BENCH_MODEL_STEPS = 400
DECODE_CASES = {  # beam, batch, precision (fp32 named: auto would choose by machine)
    "decode-greedy-b64": (1, 64, "fp32"),
    "decode-beam5-b64": (5, 64, "fp32"),
    "decode-greedy-b1": (1, 1, "fp32"),
    "decode-beam5-b1": (5, 1, "fp32"),
    "decode-greedy-b64-int8": (1, 64, "int8"),
    "decode-beam5-b64-int8": (5, 64, "int8"),
    "decode-greedy-b64-bf16": (1, 64, "bf16"),
    "decode-beam5-b64-bf16": (5, 64, "bf16"),
}


def bench_config(style: str, attention: str, feeding: bool, data_dir: Path, toy: bool):
    from nmt.config import config_from_dict

    data = (
        {"src_lang": "human", "tgt_lang": "iso"}
        if toy
        else {"src_lang": "de", "tgt_lang": "en", "valid": "val"}
    )
    return config_from_dict(
        {
            "data": {**data, "dir": str(data_dir), "max_len": 80, "cache_dir": str(CACHE)},
            "tokenizer": {"vocab_size": 8000},
            "model": {
                "embedding": 256,
                "dropout": 0.3,
                "encoder": {"hidden": 256},
                "decoder": {
                    "style": style,
                    "hidden": 512,
                    "input_feeding": feeding,
                    "bridge": "backward" if style == "bahdanau" else "linear",
                },
                "attention": {"type": attention},
            },
            "train": {"batch_size": 64, "device": "cpu"},
        }
    )


def data_dir() -> tuple[Path, bool]:
    if (MULTI30K / "train.de").is_file():
        return MULTI30K, False
    from nmt.data.toy import write_toy_corpus

    toy = CACHE / "toy"
    if not (toy / "train.human").is_file():
        write_toy_corpus(toy)
    return toy, True


def run_case(name: str, steps: int, warmup: int, measure=contextlib.nullcontext) -> dict:
    """Trains `steps` timed steps after `warmup` untimed ones; `measure()` is entered around the
    timed ones (scripts/counts.py counts their work there)."""
    start = time.perf_counter()
    import torch

    from nmt.data.batching import collate, length_grouped_batches
    from nmt.data.prepare import prepare
    from nmt.model.linear import use_operands
    from nmt.model.seq2seq import Seq2Seq, count_parameters
    from nmt.train.backends import BackendChoices
    from nmt.train.loss import TokenLoss, batch_loss
    from nmt.train.precision import clip_gradients
    from nmt.train.schedule import build_optimizer

    BackendChoices().install()  # as the trainer does: each weight gradient's backend measured, cached
    style, attention, feeding = CASES[name]
    directory, toy = data_dir()
    cfg = bench_config(style, attention, feeding, directory, toy)
    data = prepare(cfg, held_out=())  # the joint 8k tokenizer and encoded data, cached between runs
    tok, examples = data.tokenizers, data.train
    epoch = list(length_grouped_batches(examples, 64, seed=1, epoch=0))
    # The epoch's largest batch (most padded target positions) goes second, untimed: the first
    # step creates the optimiser's state, which every later step holds, so the largest batch after
    # it meets the epoch's peak memory, not that of whichever batches the sample holds.
    largest = max(range(len(epoch)), key=lambda k: len(epoch[k]) * int(examples.tgt.lengths[epoch[k]].max()))
    rest, warmup = [b for k, b in enumerate(epoch) if k != largest], max(warmup, 2)
    batches = [rest[0], epoch[largest], *rest[1 : warmup - 1 + steps]]
    torch.manual_seed(1)
    model = Seq2Seq(cfg.model, len(tok.src), len(tok.tgt)).train()
    use_operands(model, torch.bfloat16 if name.endswith("-bf16") else torch.float32)
    opt = build_optimizer(model.parameters(), cfg.train)  # the trainer's: Adam 1e-3, fused
    objective, generator = TokenLoss(model, cfg.train), torch.Generator()  # the trainer's loss
    tokens, sentences, first_step = 0, 0, None
    step_tokens: list[tuple[int, int]] = []  # (source, target) tokens of each step

    def train_step(i: int, indices) -> None:
        nonlocal tokens, sentences, first_step
        batch = collate(examples, indices)
        sums = batch_loss(objective, batch, i, generator)
        (sums.objective / sums.tokens).backward()
        clip_gradients(model.parameters(), 5.0)  # the trainer's
        opt.step()
        opt.zero_grad(set_to_none=True)  # as the trainer does: no gradients held between steps
        tokens, sentences = tokens + sums.tokens, sentences + len(indices)
        step_tokens.append((int(batch.src_len.sum()), sums.tokens))
        if first_step is None:
            first_step = time.perf_counter() - start

    for i, indices in enumerate(batches[:warmup]):
        train_step(i, indices)
    t0, tokens, sentences = time.perf_counter(), 0, 0
    step_tokens.clear()
    with measure():
        for i, indices in enumerate(batches[warmup:], warmup):
            train_step(i, indices)
    seconds = time.perf_counter() - t0
    return {
        "case": name,
        "value": round(tokens / seconds, 1),
        "unit": "tgt_tokens/s",
        "tgt_tokens": tokens,
        "step_tokens": step_tokens,
        "sentences_per_s": round(sentences / seconds, 1),  # the unit every toolkit counts alike
        "peak_rss_mib": peak_rss_mib(),
        "parameters": count_parameters(model),
        "steps": steps,
        "time_to_first_step_s": round(first_step, 2),
        "data": "multi30k de-en" if not toy else "toy",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def forward_flops(cfg, batch) -> float:
    """FLOPs (2 per multiply-add) of the matrix products in one teacher-forced forward pass of
    `batch`, padding positions included where the model computes them (the decoder runs on the
    padded target; the packed encoder does not). Backward costs two more of the same."""
    m = cfg.model
    E, He, D, V = m.embedding, m.encoder.hidden, m.decoder.hidden, cfg.tokenizer.vocab_size
    M, B, S = 2 * He, batch.src.size(0), batch.src.size(1)
    positions = batch.tgt_in.numel()  # B x T decoder steps
    att, style = m.attention.type, m.decoder.style
    encoder = int(batch.src_len.sum()) * 2 * 2 * 4 * He * (E + He)
    bridge = B * 2 * He * D if m.decoder.bridge == "backward" else B * 2 * 2 * M * D  # h (and c)
    keys = B * S * 2 * M * D if att in ("general", "bahdanau") else 0  # projected once per batch
    per_step = 2 * S * (D + M)  # scores and context
    if att == "bahdanau":  # additive (dim D): v . tanh(...) in place of the scores product, same size
        per_step += 2 * D * D  # the query projection
    rnn_in = E + (D if m.decoder.input_feeding else 0) if style == "luong" else E + M
    per_step += 2 * 4 * D * (rnn_in + D)
    if style == "luong":
        per_step += 2 * (M + D) * D + 2 * D * V  # W_c and W_s
    else:
        per_step += 2 * (D + M + E) * E + 2 * E * V  # W_o and the output layer
    return encoder + bridge + keys + positions * per_step


def gemm_gflops(n: int, k: int, m: int, repeat: int = 20) -> float:
    """This machine's fp32 matmul speed for an (n, k) x (k, m) product."""
    import torch

    a, b = torch.randn(n, k), torch.randn(k, m)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeat):
        a @ b
    return 2 * n * k * m * repeat / (time.perf_counter() - start) / 1e9


ROOFLINE_CASES = ("train-luong-general-if", "train-luong-general", "train-bahdanau")


def print_roofline(roof: dict, measured: dict) -> None:
    peak = roof["gemm_gflops"]["square 2048"]
    print("\nmatmul speed here (GFLOP/s): " + ", ".join(f"{k} {v}" for k, v in roof["gemm_gflops"].items()))
    for name, mflop in roof["mflop_per_tgt_token"].items():
        if name in measured:
            achieved = measured[name] * mflop / 1e3
            print(
                f"{name:30} {mflop:5.1f} MFLOP/tgt token x {measured[name]:,.0f} tok/s = "
                f"{achieved:5.1f} GFLOP/s, {100 * achieved / peak:3.0f}% of the square-GEMM peak"
            )


def run_roofline() -> dict:
    """FLOPs per target token of the headline training cases, and the matmul speeds they are
    bound by: how close each case's measured tokens/s comes to the machine's limit."""
    import torch

    from nmt.data.batching import collate, length_grouped_batches
    from nmt.data.prepare import prepare

    directory, toy = data_dir()
    speeds = {
        "square 2048": gemm_gflops(2048, 2048, 2048, 5),
        "output layer 1000x512x8000": gemm_gflops(1000, 512, 8000, 5),
        "decoder step 64x1280x2048": gemm_gflops(64, 1280, 2048),
        "encoder 1000x512x1024": gemm_gflops(1000, 512, 1024),
    }
    # every case shares the data settings, so one set of batches serves them all
    data = prepare(bench_config(*CASES[ROOFLINE_CASES[0]], directory, toy), held_out=())
    plan = length_grouped_batches(data.train, 64, seed=1, epoch=0)
    batches = [collate(data.train, plan[k]) for k in range(min(200, len(plan)))]
    tokens = sum(b.n_tgt_tokens for b in batches)
    cases = {}
    for name in ROOFLINE_CASES:
        cfg = bench_config(*CASES[name], directory, toy)
        cases[name] = round(sum(3 * forward_flops(cfg, b) for b in batches) / tokens / 1e6, 1)
    return {
        "case": "roofline",
        "mflop_per_tgt_token": cases,  # forward + backward (3x the forward products)
        "gemm_gflops": {k: round(v, 1) for k, v in speeds.items()},
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def peak_rss_mib() -> float:
    """This process's peak resident memory. VmHWM belongs to the address space, so it starts
    afresh at exec; ru_maxrss would carry over the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def bench_model() -> Path:
    """The cached decoding checkpoint of the bench shape, trained on first use."""
    path = CACHE / f"bench-model-{BENCH_MODEL_STEPS}.pt"
    if path.is_file():
        return path
    import shutil

    from nmt.rundir import prepare_run_dir
    from nmt.train.trainer import Trainer

    directory, toy = data_dir()
    cfg = bench_config("luong", "general", True, directory, toy)
    cfg.train.max_steps = cfg.train.valid_every = BENCH_MODEL_STEPS
    run = CACHE / "bench-model-run"
    shutil.rmtree(run, ignore_errors=True)
    prepare_run_dir(run, cfg)
    Trainer(cfg, run, quiet=True).train()
    shutil.copyfile(run / "checkpoints" / "last.pt", path)
    return path


# OpenNMT-py 3.5's decoding defaults, for loops compared on equal terms (scripts/peers.py)
PEER_TERMS = {"alpha": 0.0, "length_penalty": "none", "max_len": 250, "max_len_ratio": 1.25, "max_len_add": 4}


def run_decode_case(
    name: str, model: Path, limit: int, source: Path | None = None, peer_terms: bool = False
) -> dict:
    """Sentences/s of the decoding loop on the test split or `source` (checkpoint load excluded)."""
    import torch

    from nmt.decode.translator import load_translator
    from nmt.fileio import read_lines

    beam, batch, precision = DECODE_CASES[name]
    directory, toy = data_dir()
    source = source or directory / ("test.human" if toy else "test_2016_flickr.de")
    lines = read_lines(source)[:limit]
    settings = {"beam": beam, "batch_size": batch, "alpha": 0.6 if beam > 1 else 0.0}
    translator = load_translator([model], settings | (PEER_TERMS if peer_terms else {}), "cpu", precision)
    translator.translate(lines[:8], attention=False)  # warm-up
    start = time.perf_counter()
    out = translator.translate(lines, attention=False)  # as `nmt translate` without attention outputs
    seconds = time.perf_counter() - start
    return {
        "case": name,
        "value": round(len(lines) / seconds, 1),
        "unit": "sentences/s",
        "peak_rss_mib": peak_rss_mib(),
        "sentences": len(lines),
        "mean_output_tokens": round(sum(len(t.hypotheses[0].tokens) for t in out) / len(out), 2),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    from nmt.allocator import restart_with_tcmalloc

    restart_with_tcmalloc()  # measure on the allocator `nmt` runs on (NMT_ALLOCATOR=system: glibc's)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--case",
        choices=sorted([*CASES, *DECODE_CASES, "roofline"]),
        help="run one case in this process",
    )
    parser.add_argument(
        "--model", type=Path, help="checkpoint for the decode cases (default: the cached one)"
    )
    parser.add_argument(
        "--sentences", type=int, default=1000, help="decode cases: test sentences to translate"
    )
    parser.add_argument("--source", type=Path, help="decode cases: translate this file instead")
    parser.add_argument(
        "--peer-terms", action="store_true", help="decode cases: OpenNMT-py's length cap and ranking"
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--all", action="store_true", help="every case, not only the headline ones")
    parser.add_argument("--json", action="store_true", help="print JSON (one object per case)")
    args = parser.parse_args()
    if args.case == "roofline":
        print(json.dumps(run_roofline()))
        return
    if args.case in DECODE_CASES:
        result = run_decode_case(
            args.case, args.model or bench_model(), args.sentences, args.source, args.peer_terms
        )
        print(json.dumps(result) if args.json else result)
        return
    if args.case:
        result = run_case(args.case, args.steps, args.warmup)
        del result["step_tokens"]  # scripts/counts.py's, not a speed figure
        print(json.dumps(result) if args.json else result)
        return
    names = [c for c in (list(CASES) + list(DECODE_CASES) if args.all else HEADLINE) if args.only in c]
    if any(n in DECODE_CASES for n in names) and not args.model:
        print(f"bench checkpoint: {bench_model()}", file=sys.stderr, flush=True)  # train it once, up front
    results = []
    for name in names:
        cmd = [
            sys.executable,
            __file__,
            "--case",
            name,
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--json",
        ]
        if name in DECODE_CASES:
            limit = args.sentences if name.endswith("b64") else min(args.sentences, 300)
            cmd += ["--sentences", str(limit)] + (["--model", str(args.model)] if args.model else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
        if not args.json:
            r = results[-1]
            extra = (
                f"{r['parameters']:>11,} params"
                if "parameters" in r
                else f"{r['mean_output_tokens']:>5} tokens/out"
            )
            print(
                f"{r['case']:30} {r['value']:9.1f} {r['unit']:15} {extra}  {r['peak_rss_mib']:7.0f} MiB",
                flush=True,
            )
    measured = {r["case"]: r["value"] for r in results}
    if any(name in measured for name in ROOFLINE_CASES):
        roof = json.loads(
            subprocess.run(
                [sys.executable, __file__, "--case", "roofline"], capture_output=True, text=True, check=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        results.append(roof)
        if not args.json:
            print_roofline(roof, measured)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        r = results[0]
        data = "toy task" if data_dir()[1] else "Multi30k de-en"
        print(f"torch {r['torch']}, {r['threads']} threads, {data}")


if __name__ == "__main__":
    main()
