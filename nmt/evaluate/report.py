"""`nmt eval` and `nmt plot attention` as functions: read files, decode if asked, score, write."""

from __future__ import annotations

import json
from pathlib import Path

from nmt.errors import NMTError
from nmt.evaluate.scoring import EvalOptions, evaluate, format_table, sentence_details
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
    references = [read_lines(path) for path in refs]
    src_lines = read_lines(src) if src else None
    systems: dict[str, list[str]] = {}
    for path in hyps:
        systems[_unique(str(path), systems)] = read_lines(path)
    if models:
        from nmt.decode.translator import load_translator

        for path in models:
            translator = load_translator([path], decode_overrides, device)
            systems[_unique(str(path), systems)] = [t.text for t in translator.translate(src_lines)]
    report = evaluate(systems, references, opts, src_lines)
    if plot:
        from nmt.plots import bleu_by_length_chart

        bleu_by_length_chart(report, plot)
    if details:
        atomic_write_text(details, sentence_details(systems, references, src_lines, opts))
    return json.dumps(report.to_dict(), indent=2) if as_json else format_table(report)


def plot_attention_of(
    out: Path, attention: Path | None, index: int, model: Path | None, sentence: str | None, beam: int
) -> None:
    """Heatmap of one sentence, from a `translate --attention` JSONL file or from a checkpoint."""
    from nmt.plots import attention_heatmap

    check_outputs({"-o": out}, {"--attention": attention, "-m": model})
    if (attention is None) == (model is None):
        raise NMTError("plot attention: give --attention FILE, or --model CKPT with --sentence TEXT")
    if attention is not None:
        lines = read_lines(attention)
        if not 1 <= index <= len(lines):
            raise NMTError(f"{attention}: has {len(lines)} sentences, no sentence {index}")
        try:
            record = json.loads(lines[index - 1])
            weights, source, target = record["weights"], record["source"], record["target"]
        except (json.JSONDecodeError, KeyError) as e:
            raise NMTError(f"{attention}: line {index} is not an attention record ({e})") from None
        if not weights:
            raise NMTError(f"{attention}: sentence {index} is empty, nothing to plot")
        attention_heatmap(weights, source, target, out)
        return
    if not sentence:
        raise NMTError("plot attention: --model needs --sentence TEXT")
    from nmt.decode.translator import load_translator

    (t,) = load_translator([model], {"beam": beam}).translate([sentence])
    attention_heatmap(t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces, out)
