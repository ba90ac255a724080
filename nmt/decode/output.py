"""`nmt translate` as a function: read lines, translate, write text / scores / n-best / attention."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from nmt.decode.text import TextTranslator, Translation
from nmt.fileio import atomic_write_text, decode_lines, read_lines


@dataclass
class OutputOptions:
    nbest: int = 1  # > 1: TSV lines "index<TAB>rank<TAB>score<TAB>text"
    scores: bool = False  # "score<TAB>text" lines
    attention: Path | None = None  # JSONL: one object per sentence
    plot_attention: Path | None = None  # heatmap PNGs of the first `plot_first` sentences
    plot_first: int = 5


def format_translation(index: int, t: Translation, opts: OutputOptions) -> str:
    if opts.nbest > 1 and not t.hypotheses:  # an empty input line: one empty row, still in place
        return f"{index}\t1\t0.0000\t\n"
    if opts.nbest > 1:
        return "".join(
            f"{index}\t{rank}\t{h.score:.4f}\t{text}\n"
            for rank, (h, text) in enumerate(zip(t.hypotheses, t.texts, strict=True), 1)
        )
    if opts.scores:
        score = t.hypotheses[0].score if t.hypotheses else 0.0
        return f"{score:.4f}\t{t.text}\n"
    return t.text + "\n"


def attention_record(index: int, t: Translation) -> dict:
    weights = t.hypotheses[0].attention[:, : len(t.src_pieces)] if t.hypotheses else []
    return {
        "index": index,
        "source": t.src_pieces,
        "target": t.tgt_pieces,
        "weights": [[round(float(w), 5) for w in row] for row in weights],
    }


def translate_stream(
    translator: TextTranslator, lines: list[str], opts: OutputOptions, out: TextIO | None, quiet: bool
) -> list[Translation]:
    """Translate `lines`, writing each result to `out` as soon as its turn comes (None: keep)."""
    from tqdm.auto import tqdm

    results = []
    with tqdm(total=len(lines), unit="sent", disable=quiet or None, file=sys.stderr, mininterval=0.5) as bar:
        for index, t in enumerate(translator.iter_translate(lines, opts.nbest, progress=bar.update), 1):
            results.append(t)
            if out is not None:
                out.write(format_translation(index, t, opts))
                out.flush()
    return results


def translate_files(
    translator: TextTranslator, input: Path | None, output: Path | None, opts: OutputOptions, quiet: bool
) -> str:
    """The whole `nmt translate`; returns a summary line for stderr ('' when nothing to say)."""
    if input is None and sys.stdin.isatty() and output is None:
        interactive(translator, opts)
        return ""
    lines = read_lines(input) if input else decode_lines(sys.stdin.buffer.read(), "<stdin>")
    stream = None if output else sys.stdout
    results = translate_stream(translator, lines, opts, stream, quiet)
    truncated = sum(t.truncated for t in results)
    if output:
        atomic_write_text(output, "".join(format_translation(i, t, opts) for i, t in enumerate(results, 1)))
    if opts.attention:
        records = (
            json.dumps(attention_record(i, t), ensure_ascii=False) + "\n" for i, t in enumerate(results, 1)
        )
        atomic_write_text(opts.attention, "".join(records))
    if opts.plot_attention:
        from nmt.plots import attention_heatmap

        for i, t in enumerate(results[: opts.plot_first], 1):
            if t.hypotheses:
                path = opts.plot_attention / f"attention-{i}.png"
                attention_heatmap(t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces, path)
    notes = []
    if truncated:
        notes.append(
            f"warning: {truncated} input lines were longer than the model's limit and were "
            "translated truncated"
        )
    if opts.plot_attention:
        notes.append(f"attention heatmaps in {opts.plot_attention}")
    return "\n".join(notes)


def interactive(translator: TextTranslator, opts: OutputOptions) -> None:
    """A prompt: one sentence in, its translation out, until end of input (Ctrl-D)."""
    print("Type a sentence and press Enter; Ctrl-D quits.", file=sys.stderr)
    index = 0
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return
        index += 1
        (t,) = translator.translate([line], opts.nbest)
        sys.stdout.write(format_translation(index, t, opts))
        sys.stdout.flush()
