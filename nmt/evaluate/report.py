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


def plot_attention_of(
    out: Path,
    attention: Path | None,
    index: int,
    model: Path | None,
    sentence: str | None,
    beam: int,
    pieces: bool = False,
    dpi: int = 100,
) -> None:
    """Heatmap of one sentence, from a `translate --attention` JSONL file or from a checkpoint."""
    from nmt.plots import attention_heatmap, check_plot_path, draw_heatmaps

    check_outputs({"-o": out}, {"--attention": attention, "-m": model})
    if (attention is None) == (model is None):
        raise NMTError("plot attention: give --attention FILE, or --model CKPT with --sentence TEXT")
    check_plot_path(out)
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
        title = f"sentence {index} \u2014 {attention.name}"
        if record.get("unit") == "words":  # already merged
            if pieces:
                raise NMTError(
                    f"{attention}: holds words; export it with nmt translate --pieces to plot pieces"
                )
            draw_heatmaps([(title, weights, source, target)], out, dpi=dpi)
            return
        attention_heatmap(weights, source, target, out, title, pieces, dpi)
        return
    if not sentence:
        raise NMTError("plot attention: --model needs --sentence TEXT")
    from nmt.decode.translator import load_translator

    (t,) = load_translator([model], {"beam": beam}).translate([sentence])
    attention_heatmap(t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces, out, str(model), pieces, dpi)


def run_align(
    models: list[Path],
    src: Path,
    ref: Path | None,
    gold: Path | None,
    output: Path,
    how: str,
    threshold: float,
    decode_overrides: dict,
    device: str,
) -> str:
    """The whole `nmt align`: Pharaoh links from the attention of free decoding, or of forced
    decoding on --ref; with --gold, the AER line. Everything is checked before anything is written."""
    from nmt.decode.output import check_same_length
    from nmt.decode.translator import load_translator
    from nmt.evaluate.alignment import align, alignment_error_rate, format_pharaoh, method, parse_pharaoh
    from nmt.words import text_words

    chosen = method(how, threshold)
    check_outputs({"-o": output}, {"--src": src, "--ref": ref, "--gold": gold})
    sources = read_lines(src)
    targets = read_lines(ref) if ref else None
    gold_lines = read_lines(gold) if gold else None
    check_same_length({src: sources, ref: targets, gold: gold_lines})
    gold_links = []
    for n, line in enumerate(gold_lines or [], 1):
        sure, possible = parse_pharaoh(line, f"{gold}:{n}")
        n_src = len(text_words(sources[n - 1]))
        n_tgt = len(text_words(targets[n - 1])) if targets else None
        for i, j in sorted(possible):
            if i >= n_src or (n_tgt is not None and j >= n_tgt):
                raise NMTError(
                    f"{gold}:{n}: link {i}-{j} is outside the sentence ({n_src} source words"
                    + (f", {n_tgt} target words" if n_tgt is not None else "")
                    + "; indices are 0-based)"
                )
        gold_links.append((sure, possible))
    translator = load_translator(models, decode_overrides, device)
    if targets is not None:
        decoded = [(s.attention, s.src_pieces, s.tgt_pieces) for s in translator.score(sources, targets)]
    else:
        decoded = [
            (t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces) if t.hypotheses else None
            for t in translator.translate(sources)
        ]
    links = [
        set() if item is None or not line.strip() else align(*item, chosen)
        for item, line in zip(decoded, sources, strict=True)
    ]
    atomic_write_text(output, "".join(format_pharaoh(a) + "\n" for a in links))
    if gold_links:
        mode = "forced on the reference" if targets is not None else "free decoding"
        return f"{how} ({mode}): " + alignment_error_rate(links, gold_links).line()
    return ""
