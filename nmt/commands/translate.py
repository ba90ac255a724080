"""`nmt translate` as a function: read lines, translate, write text / scores / n-best / attention."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, fields, replace
from pathlib import Path

from nmt.errors import NMTError
from nmt.fileio import (
    atomic_text,
    check_outputs,
    count_lines,
    iter_lines,
    line_chunks,
)
from nmt.text.constraints import Constraints
from nmt.text.translation import TextTranslator, Translation
from nmt.words import attention_view


@dataclass(frozen=True)
class DecodeOptions:
    """The decode settings `nmt translate` may override; None (and `no_unk` False): the config's."""

    beam: int | None = None
    batch_size: int | None = None
    batch_type: str | None = None  # sentences or tokens
    rows: str | None = None  # auto, fixed or pooled (nmt.decode.rows)
    alpha: float | None = None
    length_penalty: str | None = None  # none, avg or gnmt
    coverage: float | None = None
    min_len: int | None = None
    max_len: int | None = None
    max_len_ratio: float | None = None
    max_len_add: int | None = None
    no_repeat_ngram: int | None = None
    no_unk: bool = False  # never output the unknown token
    sample: bool | None = None  # draw tokens instead of searching (nmt.decode.sampling)
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def overrides(self) -> dict:
        """The decode config's keys and their values (None: keep the config's)."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "no_unk"}
        return given | {"allow_unk": False if self.no_unk else None}


@dataclass
class OutputOptions:
    nbest: int = 1  # > 1: TSV lines "index<TAB>rank<TAB>score<TAB>text"
    scores: bool = False  # "score<TAB>text" lines
    attention: Path | None = None  # JSONL: one object per sentence
    plot_attention: Path | None = None  # heatmap PNGs of the first `plot_first` sentences
    plot_first: int = 5
    pieces: bool = False  # export and plot subword pieces instead of words (nmt.words)
    dpi: int = 100
    model_name: str = ""  # for the plots' titles


@dataclass(frozen=True)
class Steering:
    """What steers each line's translation: files read beside the input, its markup, and the
    shortlist of the target pieces it may write."""

    prefixes: Path | None = None  # a target prefix a line ('' for none)
    constraints: Path | None = None  # a JSON line a line: phrases to include and avoid
    markup: bool = False  # the lines hold inline tags, carried to the output (nmt.text.markup)
    shortlist: Path | None = None  # a lexical shortlist (nmt.text.shortlist)
    input_format: str = "text"  # jsonl or tsv: each input line carries its own constraints

    def inputs(self) -> dict[str, Path | None]:
        return {"--prefixes": self.prefixes, "--constraints": self.constraints, "--shortlist": self.shortlist}


def format_translation(index: int, t: Translation, opts: OutputOptions) -> str:
    if opts.nbest > 1 and not t.hypotheses:  # an empty input line: one row, empty or its tags alone
        return f"{index}\t1\t0.0000\t{t.text}\n"
    if opts.nbest > 1:
        return "".join(
            f"{index}\t{rank}\t{h.score:.4f}\t{text}\n"
            for rank, (h, text) in enumerate(zip(t.hypotheses, t.texts, strict=True), 1)
        )
    if opts.scores:
        return f"{t.score:.4f}\t{t.text}\n"
    return t.text + "\n"


def attention_record(index: int, t: Translation, pieces: bool = False) -> dict:
    """One sentence's attention over words (see nmt.words), or over pieces with `pieces`."""
    weights, source, target = [], [], []  # an empty input line
    if t.hypotheses:
        weights, source, target = attention_view(
            t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces, pieces
        )
    if pieces:
        source, target = t.src_pieces, t.tgt_pieces  # the pieces as SentencePiece spells them
    return {
        "index": index,
        "unit": "pieces" if pieces else "words",
        "source": source,
        "target": target,
        "weights": [[round(float(w), 5) for w in row] for row in weights],
    }


def run_translate(
    models: list[Path],
    input: Path | None,
    output: Path | None,
    decode: DecodeOptions,
    opts: OutputOptions,
    device: str = "auto",
    precision: str | None = None,
    engine: str = "torch",
    quiet: bool = False,
    steering: Steering = Steering(),
) -> str:
    """The whole `nmt translate`: the outputs checked, the models loaded on `engine` (torch or
    onnx), the input translated as `steering` says; returns a summary line for stderr ('' when
    nothing to say)."""
    if steering.input_format != "text" and steering.constraints:
        raise NMTError(
            f"--constraints and --input-format {steering.input_format} both give constraints; use one"
        )
    inputs = {"-i": input, **steering.inputs(), **{f"-m {m}": m for m in models}}
    folders = {"--plot-attention": opts.plot_attention}
    check_outputs({"-o": output, "--attention": opts.attention}, inputs, folders)
    translator = load_engine(models, decode.overrides(), device, precision, engine, not steering.shortlist)
    from nmt.machine import choose_threads  # torch: loaded with the engine, not with the command line

    threads = "" if engine == "onnx" else choose_threads()[1]  # on a busy machine: the free cores
    chosen = getattr(translator, "precision", None)  # the torch engine's
    if steering.shortlist:
        if chosen and chosen.name == "int8":
            raise NMTError(
                "--shortlist cuts the output layer, which --precision int8 replaces; use one of them"
            )
        translator = translator.shortlisted(steering.shortlist)
    opts = replace(opts, model_name=opts.model_name or " + ".join(map(str, models)))
    summary = translate_files(translator, input, output, opts, quiet, steering)
    said = (threads, chosen.why if chosen else "") if not quiet else ()
    return "\n".join(line for line in (*said, summary) if line)


def load_engine(
    models: list[Path], overrides: dict, device: str, precision: str | None, engine: str, int8: bool = True
) -> TextTranslator:
    """The torch translator (on `device`, in `precision`; `int8`: whether auto may take it), or
    onnxruntime's of an export directory."""
    if engine == "onnx":
        if precision is not None:
            raise NMTError("--precision is for the torch engine; leave it out with --engine onnx")
        from nmt.runtime.translator import load_onnx_translator

        return load_onnx_translator(models, overrides)
    from nmt.decode.translator import load_translator

    return load_translator(models, overrides, device, precision, int8)


def translate_files(
    translator: TextTranslator,
    input: Path | None,
    output: Path | None,
    opts: OutputOptions,
    quiet: bool,
    steering: Steering = Steering(),
) -> str:
    """The input translated, its results written; returns a summary line for stderr ('' when
    nothing to say).

    Results are written as they come, in input order (through temp files renamed at the end),
    so memory stays flat in the number of input lines; attention is kept only when an output
    asks for it."""
    from tqdm.auto import tqdm

    if input is None and sys.stdin.isatty() and output is None:
        interactive(translator, opts)
        return ""
    # read as decoding goes, so memory does not grow with the input
    lines = iter_lines(input) if input else _stdin_lines()
    guides = read_constraints(steering.constraints) if steering.constraints else None
    if steering.input_format != "text":
        lines, guides = split_input(lines, steering.input_format, str(input or "<stdin>"))
    truncated, unmet, to_plot = 0, [], []
    with ExitStack() as files:
        out = files.enter_context(atomic_text(output)) if output else sys.stdout
        records = files.enter_context(atomic_text(opts.attention)) if opts.attention else None
        total = count_lines(input) if input else None
        bar = files.enter_context(
            tqdm(total=total, unit="sent", disable=quiet or None, file=sys.stderr, mininterval=0.5)
        )
        keep_attention = bool(opts.attention or opts.plot_attention)
        results = translator.iter_translate(
            lines,
            opts.nbest,
            progress=bar.update,
            attention=keep_attention,
            prefixes=iter_lines(steering.prefixes) if steering.prefixes else None,
            constraints=guides,
            markup=steering.markup,
        )
        for index, t in enumerate(results, 1):
            out.write(format_translation(index, t, opts))
            if output is None:
                out.flush()  # a pipe reader sees each line as soon as its turn comes
            if records:
                records.write(json.dumps(attention_record(index, t, opts.pieces), ensure_ascii=False) + "\n")
            if opts.plot_attention and index <= opts.plot_first:
                to_plot.append(t)
            truncated += t.truncated
            if t.hypotheses and t.hypotheses[0].unmet:
                unmet.append(index)
    if opts.plot_attention:
        plot_heatmaps(to_plot, opts)
    return closing_notes(truncated, opts, unmet)


def read_constraints(path: Path) -> Iterator[Constraints]:
    """The lexical constraints of each input line, from a file of JSON lines read as it goes."""
    for number, line in enumerate(iter_lines(path), 1):
        yield Constraints.from_json(line, f"{path}:{number}")


def split_input(lines: Iterator[str], form: str, name: str) -> tuple[Iterator[str], Iterator[Constraints]]:
    """The texts and the constraints of input lines that carry both (`Constraints.from_input`),
    as two streams read in step."""
    pairs = (Constraints.from_input(line, form, f"{name}:{n}") for n, line in enumerate(lines, 1))
    texts, guides = itertools.tee(pairs)
    return (text for text, _ in texts), (guide for _, guide in guides)


def plot_heatmaps(translations: list[Translation], opts: OutputOptions) -> None:
    """A heatmap PNG of each translation's attention in `opts.plot_attention`."""
    from nmt.plots import attention_heatmap

    for i, t in enumerate(translations, 1):
        if t.hypotheses:
            path = opts.plot_attention / f"attention-{i}.png"
            title = f"sentence {i}" + (f" \u2014 {opts.model_name}" if opts.model_name else "")
            attention_heatmap(
                t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces, path, title, opts.pieces, opts.dpi
            )


def closing_notes(truncated: int, opts: OutputOptions, unmet: list[int] | None = None) -> str:
    """What `nmt translate` says on stderr at the end: truncated lines, lines whose constraints
    could not all be met, where the plots are."""
    notes = []
    if unmet:
        shown = ", ".join(map(str, unmet[:10])) + (", ..." if len(unmet) > 10 else "")
        notes.append(
            f"warning: {len(unmet)} lines could not meet all their constraints within the output "
            f"length cap and got the hypothesis meeting the most (lines {shown})"
        )
    if truncated:
        notes.append(
            f"warning: {truncated} input lines were longer than the model's limit and were "
            "translated truncated"
        )
    if opts.plot_attention:
        notes.append(f"attention heatmaps in {opts.plot_attention}")
    return "\n".join(notes)


def _stdin_lines() -> Iterator[str]:
    for _, lines in line_chunks(sys.stdin.buffer, "<stdin>", 10_000):
        yield from lines


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
