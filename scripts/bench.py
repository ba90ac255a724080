"""Training and decoding speed on one shared model shape, each case in its own process.

    python scripts/bench.py                      # the headline cases (`make bench`): a table
    python scripts/bench.py --all                # every attention x decoder style too
    python scripts/bench.py --case train-luong-general-if --steps 30 --json
    python scripts/bench.py --case decode-beam5-b64 --json [--model CKPT]

The "bench model": embeddings 256, 1-layer BiLSTM encoder with 256 units per direction, 1-layer
LSTM decoder with 512 units, a joint 8k SentencePiece vocabulary, batches of 64 sentences, Adam,
dropout 0.3. Data: Multi30k de-en from ../shared when present, otherwise the toy task. Every case
trains on the same seeded batches; the first `--warmup` steps are not timed. Decoding cases
translate the test split with a checkpoint of the bench shape (Luong general with input feeding)
trained for BENCH_MODEL_STEPS steps once and cached in .bench-cache/, unless --model is given.
"""

from __future__ import annotations

import argparse
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
]
BENCH_MODEL_STEPS = 400
DECODE_CASES = {
    "decode-greedy-b64": (1, 64),
    "decode-beam5-b64": (5, 64),
    "decode-greedy-b1": (1, 1),
    "decode-beam5-b1": (5, 1),
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


def run_case(name: str, steps: int, warmup: int) -> dict:
    start = time.perf_counter()
    import torch
    import torch.nn.functional as F

    from nmt.data.batching import collate, length_grouped_batches
    from nmt.data.prepare import prepare
    from nmt.data.tokenizer import PAD
    from nmt.model.seq2seq import Seq2Seq, count_parameters

    style, attention, feeding = CASES[name]
    directory, toy = data_dir()
    cfg = bench_config(style, attention, feeding, directory, toy)
    data = prepare(cfg, held_out=())  # the joint 8k tokenizer and encoded data, cached between runs
    tok, examples = data.tokenizers, data.train
    batches = length_grouped_batches(examples, 64, seed=1, epoch=0)[: warmup + steps]
    torch.manual_seed(1)
    model = Seq2Seq(cfg.model, len(tok.src), len(tok.tgt)).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens, first_step = 0, None
    for i, indices in enumerate(batches):
        if i == warmup:
            t0, tokens = time.perf_counter(), 0
        batch = collate(examples, indices)
        logits, _ = model(batch.src, batch.src_len, batch.tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        tokens += batch.n_tgt_tokens
        if first_step is None:
            first_step = time.perf_counter() - start
    seconds = time.perf_counter() - t0
    return {
        "case": name,
        "value": round(tokens / seconds, 1),
        "unit": "tgt_tokens/s",
        "peak_rss_mib": peak_rss_mib(),
        "parameters": count_parameters(model),
        "steps": steps,
        "time_to_first_step_s": round(first_step, 2),
        "data": "multi30k de-en" if not toy else "toy",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
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

    from nmt.train.trainer import Trainer, prepare_run_dir

    directory, toy = data_dir()
    cfg = bench_config("luong", "general", True, directory, toy)
    cfg.train.max_steps = cfg.train.valid_every = BENCH_MODEL_STEPS
    run = CACHE / "bench-model-run"
    shutil.rmtree(run, ignore_errors=True)
    prepare_run_dir(run, cfg)
    Trainer(cfg, run, quiet=True).train()
    shutil.copyfile(run / "checkpoints" / "last.pt", path)
    return path


def run_decode_case(name: str, model: Path, limit: int) -> dict:
    """Sentences/s of the decoding loop on the test split (checkpoint load and tokenising excluded)."""
    import torch

    from nmt.decode.translator import load_translator
    from nmt.fileio import read_lines

    beam, batch = DECODE_CASES[name]
    directory, toy = data_dir()
    source = directory / ("test.human" if toy else "test_2016_flickr.de")
    lines = read_lines(source)[:limit]
    translator = load_translator(
        [model], {"beam": beam, "batch_size": batch, "alpha": 0.6 if beam > 1 else 0.0}
    )
    translator.translate(lines[:8])  # warm-up
    start = time.perf_counter()
    out = translator.translate(lines)
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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=sorted(CASES | DECODE_CASES), help="run one case in this process")
    parser.add_argument(
        "--model", type=Path, help="checkpoint for the decode cases (default: the cached one)"
    )
    parser.add_argument(
        "--sentences", type=int, default=1000, help="decode cases: test sentences to translate"
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--all", action="store_true", help="every case, not only the headline ones")
    parser.add_argument("--json", action="store_true", help="print JSON (one object per case)")
    args = parser.parse_args()
    if args.case in DECODE_CASES:
        result = run_decode_case(args.case, args.model or bench_model(), args.sentences)
        print(json.dumps(result) if args.json else result)
        return
    if args.case:
        result = run_case(args.case, args.steps, args.warmup)
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
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        r = results[-1]
        data = "toy task" if data_dir()[1] else "Multi30k de-en"
        print(f"torch {r['torch']}, {r['threads']} threads, {data}")


if __name__ == "__main__":
    main()
