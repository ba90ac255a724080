"""`nmt eval` as a function: read files, decode if asked, score, write."""

from __future__ import annotations

import json
from pathlib import Path

from nmt.errors import NMTError
from nmt.evaluate.scoring import EvalOptions, evaluate, format_table, metrics, sentence_details
from nmt.fileio import atomic_write_text, check_outputs, read_lines


def _unique(name: str, taken: dict) -> str:
    candidate, k = name, 2
    while candidate in taken:
        candidate, k = f"{name}#{k}", k + 1
    return candidate


def run_eval(
    refs: list[Path],
    hyps: list[Path],
    models: list[Path],
    src: Path | None,
    decode_overrides: dict,
    device: str,
    opts: EvalOptions,
    as_json: bool = False,
    plot: Path | None = None,
    details: Path | None = None,
) -> str:
    """Score every --hyp file and every --model's translation of --src; returns what to print."""
    if not hyps and not models:
        raise NMTError("eval: give --hyp FILE (one or more), or --model CKPT with --src FILE")
    if models and src is None:
        raise NMTError("eval: --model needs --src FILE")
    inputs = {f"--ref {p}": p for p in refs} | {f"--hyp {p}": p for p in hyps} | {"--src": src}
    check_outputs({"--plot": plot, "--details": details}, inputs | {f"-m {p}": p for p in models})
    metrics(opts)  # sacreBLEU's tokenizer loads now, before files are read and models decode
    references = [read_lines(path) for path in refs]
    src_lines = read_lines(src) if src else None
    systems: dict[str, list[str]] = {}
    for path in hyps:
        systems[_unique(str(path), systems)] = read_lines(path)
    if models:
        from nmt.decode.translator import load_translator

        for path in models:
            translator = load_translator([path], decode_overrides, device)
            systems[_unique(str(path), systems)] = [
                t.text for t in translator.translate(src_lines, attention=False)
            ]
    report = evaluate(systems, references, opts, src_lines)
    if plot:
        from nmt.plots import bleu_by_length_chart

        bleu_by_length_chart(report, plot)
    if details:
        atomic_write_text(details, sentence_details(systems, references, src_lines, opts))
    return json.dumps(report.to_dict(), indent=2) if as_json else format_table(report)
