"""The work each toolkit does, counted (scripts/opcount.py): the same figures on every machine.

    python scripts/counts.py train nmt --steps 20
    python scripts/counts.py train onmt --python ../peers/onmt/bin/python --steps 20
    python scripts/counts.py decode nmt --model CKPT --beam 5 [--src big] [--search default]
    python scripts/counts.py decode onmt --python ... --model CKPT --beam 5

Training: FLOPs, bytes touched and ops per trained target token, and bytes re-laid out per step,
on the bench shape (scripts/bench.py's batches for nmt; OpenNMT-py's own batches of the same
pieces, scripts/peers.py's config, its tokens read from its log). The batches' sources per target
token differ between the toolkits, so the FLOPs are also given at the training set's own ratio
(`flops_per_tgt_token_at_train_set_ratio`: what an epoch costs a target token). Decoding: per translated
sentence, decoder row-steps (rows through the decoder's recurrent product), output-layer rows,
FLOPs and ops, with the same search for both toolkits (scripts/peers.py's) or each one's
defaults. Each command prints one JSON object; docs/performance.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from peers import ONMT, peer_env, translate_command  # noqa: E402

HIDDEN, VOCAB = 512, 4000  # the bench decoder's size; no product but the output layer is this wide
# report_every 1: one step's source and target tokens
ONMT_TOKENS = re.compile(r"Step\s+(\d+)/.*?bsz:\s*(\d+)/\s*(\d+)/")


def per(counts: dict, total: float, what: str) -> dict:
    return {
        f"flops_per_{what}": round(counts["flops"] / total),
        f"touched_bytes_per_{what}": round(counts["touched_bytes"] / total),
        f"ops_per_{what}": round(counts["ops"] / total, 2),
    }


def sides(step_flops: list[int], step_tokens: list[tuple[int, int]]) -> tuple[float, float]:
    """(FLOPs per source token, FLOPs per target token), fitted to the steps by least squares.
    A step's work is the encoder's, which grows with its source tokens, and the decoder's, which
    grows with its target tokens; two toolkits' batches hold different sources per target token,
    so their FLOPs per target token differ even where each does the same work per token. Sources
    and targets of a batch grow together, so the two figures apart are uncertain; their sum at a
    ratio near the batches' is not (`trained`)."""
    import numpy as np

    flops = np.diff(np.asarray([0, *step_flops], dtype=np.float64))
    tokens = np.asarray(step_tokens, dtype=np.float64)
    if len(flops) != len(tokens):
        raise SystemExit(f"counts: {len(flops)} optimiser steps counted, {len(tokens)} steps' tokens read")
    (per_src, per_tgt), *_ = np.linalg.lstsq(tokens, flops, rcond=None)
    return float(per_src), float(per_tgt)


def train_set_ratio(work: Path, eos_in_source: bool) -> float:
    """Source tokens per target token over the whole training set, as a toolkit's encoder and
    loss see them: every target ends in EOS; a source does where the encoder reads one (nmt)."""
    counts = []
    for lang in ("de", "en"):
        with open(work / "sp" / f"train.{lang}", encoding="utf-8") as f:
            counts.append([len(line.split()) for line in f])
    src, tgt = (sum(side) + len(side) * extra for side, extra in zip(counts, (eos_in_source, 1), strict=True))
    return src / tgt


def trained(toolkit: str, step_tokens: list[tuple[int, int]], report: dict, ratio: float) -> dict:
    """Per target token of these steps, and at the training set's source/target `ratio`."""
    steps, tokens = len(step_tokens), sum(t for _, t in step_tokens)
    per_src, per_tgt = sides(report["step_flops"], step_tokens)
    return {
        "toolkit": toolkit,
        "steps": steps,
        "tgt_tokens": tokens,
        "src_per_tgt_token": round(sum(s for s, _ in step_tokens) / tokens, 3),
        **per(report, tokens, "tgt_token"),
        "train_set_src_per_tgt_token": round(ratio, 3),
        "flops_per_tgt_token_at_train_set_ratio": round(per_tgt + ratio * per_src),
        "relayout_bytes_per_step": round(report["relayout_bytes"] / steps),
        **{k: report[k] for k in ("flops_by_op", "relayout_bytes_by_op", "touched_bytes_by_op")},
    }


def train_nmt(work: Path, steps: int) -> dict:
    from bench import run_case
    from opcount import Counts

    counts = Counts(HIDDEN, VOCAB)
    result = run_case("train-luong-general-if", steps, warmup=2, measure=lambda: counts)
    return trained("nmt", result["step_tokens"], counts.report(), train_set_ratio(work, eos_in_source=True))


def train_onmt(python: str, work: Path, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run, out = Path(tmp), Path(tmp) / "counts.json"
        fields = dict(work=work, run=run, steps=steps, seed=1, report_every=1, save_every=10**7, workers=0,
                      onmt_attention="general")  # fmt: skip
        (run / "config.yaml").write_text(ONMT.format(**fields), encoding="utf-8")
        cmd = [python, str(ROOT / "scripts" / "opcount.py"), "--out", str(out), "--hidden", str(HIDDEN),
               "--vocab", str(VOCAB), "onmt.bin.train:main", "-config", str(run / "config.yaml")]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=peer_env(1), check=False)
        log = proc.stdout + proc.stderr
        if proc.returncode or not out.is_file():
            raise SystemExit(f"counts: OpenNMT-py failed:\n{log[-2000:]}")
        report = json.loads(out.read_text(encoding="utf-8"))
    step_tokens = [(int(m.group(2)), int(m.group(3))) for m in ONMT_TOKENS.finditer(log)]
    return trained("OpenNMT-py", step_tokens, report, train_set_ratio(work, eos_in_source=False))


ENTRIES = {"nmt": "nmt.cli:app", "onmt": "onmt.bin.translate:main"}


def decode(toolkit: str, python: str, work: Path, model: Path, beam: int, src: str, search: str) -> dict:
    cmd, out = translate_command(toolkit, python, work, model, beam, src, search=search)
    with tempfile.TemporaryDirectory() as tmp:
        counted = Path(tmp) / "counts.json"
        wrapped = [python, str(ROOT / "scripts" / "opcount.py"), "--out", str(counted),
                   "--hidden", str(HIDDEN), "--vocab", str(VOCAB), ENTRIES[toolkit], *cmd[1:]]  # fmt: skip
        env = peer_env(1) | {"NMT_ALLOCATOR": "system"}
        proc = subprocess.run(wrapped, capture_output=True, text=True, env=env, check=False)
        if proc.returncode or not counted.is_file():
            raise SystemExit(f"counts: {toolkit} failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
        report = json.loads(counted.read_text(encoding="utf-8"))
    lines = out.read_text(encoding="utf-8").splitlines()
    return {
        "toolkit": toolkit, "beam": beam, "src": src, "search": search, "sentences": len(lines),
        "decoder_row_steps_per_sentence": round(report["decoder_rows"] / len(lines), 1),
        "output_rows_per_sentence": round(report["output_rows"] / len(lines), 1),
        **per(report, len(lines), "sentence"),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["train", "decode"])
    ap.add_argument("toolkit", choices=["nmt", "onmt"])
    ap.add_argument("--python", default=sys.executable, help="onmt: the peer virtualenv's python")
    ap.add_argument(
        "--work", type=Path, default=ROOT.parent / "peers" / "work", help="scripts/peers.py prepare's"
    )
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--src", choices=["test", "big"], default="test")
    ap.add_argument("--search", choices=["same", "default"], default="same")
    args = ap.parse_args()
    work = args.work.resolve()
    if args.command == "decode":
        result = decode(
            args.toolkit, args.python, work, args.model.resolve(), args.beam, args.src, args.search
        )
    elif args.toolkit == "nmt":
        result = train_nmt(work, args.steps)
    else:
        result = train_onmt(args.python, work, args.steps)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
