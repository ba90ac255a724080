"""Lexical constraints measured: inclusion, exclusion, BLEU and speed against plain beam search.

    python scripts/constraints_bench.py -m RUN --src test.de --ref test.en [--runs 2] [--out DIR]

Constraints are drawn from the references, seeded: for each sentence, one word of the reference
(at least 4 letters) to include, and one word of the unconstrained translation that the reference
lacks (at least 4 letters) to avoid; a sentence without such a word gets none of that kind. Both
decodings run as whole `nmt translate` commands at batch 64, beam 5, alternated `--runs` times;
the figures are the fastest of each. Inclusion and exclusion are counted on the output text.
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

WORD = re.compile(r"[^\W\d_]{4,}")  # a word of at least 4 letters


def draw(references: list[str], plain: list[str], seed: int) -> list[dict]:
    """Per sentence: a reference word to include, a word of the plain output to avoid."""
    rng = random.Random(seed)
    drawn = []
    for ref, hyp in zip(references, plain, strict=True):
        ref_words = WORD.findall(ref)
        wrong = sorted({w for w in WORD.findall(hyp) if w.lower() not in ref.lower()})
        guide = {}
        if ref_words:
            guide["constraints"] = [rng.choice(ref_words)]
        if wrong:
            guide["avoid"] = [rng.choice(wrong)]
        drawn.append(guide)
    return drawn


def translate(model: str, src: Path, out: Path, *extra: str) -> float:
    """Seconds of one whole `nmt translate` command."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "nmt", "translate", "-m", model, "-i", str(src), "-o", str(out), "-q"]
    subprocess.run([*command, "--beam", "5", "--batch-size", "64", *extra], check=True)
    return time.perf_counter() - started


def main() -> None:
    import sacrebleu

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--ref", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("constraints-bench"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    plain_out, steered_out = args.out / "plain.txt", args.out / "constrained.txt"
    guides_path = args.out / "constraints.jsonl"
    references = args.ref.read_text(encoding="utf-8").splitlines()
    translate(args.model, args.src, plain_out)
    plain = plain_out.read_text(encoding="utf-8").splitlines()
    guides = draw(references, plain, args.seed)
    guides_path.write_text(
        "".join(json.dumps(g, ensure_ascii=False) + "\n" for g in guides), encoding="utf-8"
    )
    times: dict[str, list[float]] = {"plain": [], "constrained": []}
    for _ in range(args.runs):
        times["plain"].append(translate(args.model, args.src, plain_out))
        times["constrained"].append(
            translate(args.model, args.src, steered_out, "--constraints", str(guides_path))
        )
    steered = steered_out.read_text(encoding="utf-8").splitlines()
    included = [(w in out) for g, out in zip(guides, steered, strict=True) for w in g.get("constraints", [])]
    avoided = [(w not in out) for g, out in zip(guides, steered, strict=True) for w in g.get("avoid", [])]
    bleu = {
        name: sacrebleu.corpus_bleu(outs, [references]).score
        for name, outs in (("plain", plain), ("constrained", steered))
    }
    fastest = {name: min(seconds) for name, seconds in times.items()}
    print(f"sentences {len(references)}; constraints to include {len(included)}, to avoid {len(avoided)}")
    print(f"included {sum(included)}/{len(included)} ({sum(included) / max(1, len(included)):.1%})")
    print(f"avoided {sum(avoided)}/{len(avoided)} ({sum(avoided) / max(1, len(avoided)):.1%})")
    print(f"BLEU plain {bleu['plain']:.2f}, constrained {bleu['constrained']:.2f}")
    runs = ", ".join(f"{name} {' / '.join(f'{s:.1f}' for s in seconds)} s" for name, seconds in times.items())
    print(
        f"whole commands (batch 64, beam 5): {runs}; ratio {fastest['constrained'] / fastest['plain']:.2f}x"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
