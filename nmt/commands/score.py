"""`nmt score` as a function: forced decoding of references, one JSON record per pair and model."""

from __future__ import annotations

import json
import math
from pathlib import Path

from nmt.decode.forced import ForcedScore
from nmt.fileio import atomic_write_text, check_outputs, check_same_length, read_lines


def score_record(index: int, model: str, s: ForcedScore) -> dict:
    """One pair of `nmt score`: total, per piece and per word log-probabilities, perplexity."""
    return {
        "index": index,
        "model": model,
        "log_prob": round(s.log_prob, 5),
        "length": s.length,
        "ppl": round(s.ppl, 5),
        "pieces": [[p, round(lp, 5)] for p, lp in zip(s.tgt_pieces, s.token_log_probs, strict=True)],
        "words": [[w, round(lp, 5)] for w, lp in s.word_log_probs()],
    }


def corpus_summary(model: str, scores: list[ForcedScore]) -> str:
    """The corpus line: summed log-probability, and NLL per token (the validation loss's unit)."""
    log_prob = sum(s.log_prob for s in scores)
    tokens = sum(s.length for s in scores)
    nll = -log_prob / max(1, tokens)
    return (
        f"{model}: {len(scores)} pairs, {tokens} tokens, log-prob {log_prob:.4f}, "
        f"NLL/token {nll:.4f}, ppl {math.exp(min(nll, 50)):.4f}"
    )


def score_files(
    models: list[Path], src: Path, ref: Path, output: Path | None, ensemble: bool, device: str
) -> tuple[str, str]:
    """The whole `nmt score`: JSONL records (one per pair and model) and the summary lines."""
    from nmt.decode.translator import load_translator

    check_outputs({"-o": output}, {"--src": src, "--ref": ref})
    sources, targets = read_lines(src), read_lines(ref)
    check_same_length({src: sources, ref: targets})
    systems = [(" + ".join(map(str, models)), models)] if ensemble else [(str(m), [m]) for m in models]
    records, summary = [], []
    for name, paths in systems:
        scores = load_translator(paths, {}, device).score(sources, targets)
        records += [
            json.dumps(score_record(i, name, s), ensure_ascii=False) + "\n" for i, s in enumerate(scores, 1)
        ]
        summary.append(corpus_summary(name, scores))
    text = "".join(records)
    if output:
        atomic_write_text(output, text)
        text = ""
    return text, "\n".join(summary)
