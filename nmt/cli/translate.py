"""`nmt translate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from nmt.cli.app import DeviceOption, QuietOption, app, model_option, output_option, user_errors


@app.command()
@user_errors
def translate(
    model: Annotated[
        list[Path],
        model_option("Checkpoint, run or release directory, or hf://user/repo; repeat to ensemble."),
    ],
    input: Annotated[
        Path | None, typer.Option("--input", "-i", metavar="PATH", help="Text file (default stdin).")
    ] = None,
    output: Annotated[Path | None, output_option("Text file (default stdout).")] = None,
    beam: Annotated[
        int | None,
        typer.Option(min=1, metavar="INT", help="Beam size (1 = greedy; default from the config)."),
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(min=1, metavar="INT", help="Sentences (or tokens) per batch.")
    ] = None,
    batch_type: Annotated[
        Literal["sentences", "tokens"] | None, typer.Option(help="What --batch-size counts.")
    ] = None,
    alpha: Annotated[
        float | None, typer.Option(min=0, metavar="FLOAT", help="Length penalty exponent.")
    ] = None,
    length_penalty: Annotated[
        Literal["none", "avg", "gnmt"] | None, typer.Option(help="Length penalty formula.")
    ] = None,
    coverage: Annotated[
        float | None, typer.Option(min=0, metavar="FLOAT", help="GNMT coverage penalty beta.")
    ] = None,
    min_len: Annotated[
        int | None, typer.Option(min=0, metavar="INT", help="No EOS before this many tokens.")
    ] = None,
    max_len: Annotated[int | None, typer.Option(min=1, metavar="INT", help="Cap on output tokens.")] = None,
    max_len_ratio: Annotated[
        float | None,
        typer.Option(min=0, metavar="FLOAT", help="And at most this x source length + --max-len-add."),
    ] = None,
    max_len_add: Annotated[
        int | None, typer.Option(min=0, metavar="INT", help="See --max-len-ratio.")
    ] = None,
    no_repeat_ngram: Annotated[
        int | None, typer.Option(min=0, metavar="INT", help="Never repeat an n-gram this long.")
    ] = None,
    no_unk: Annotated[bool, typer.Option("--no-unk", help="Never output the unknown token.")] = False,
    nbest: Annotated[
        int,
        typer.Option(
            min=1, metavar="INT", help="Print K hypotheses a sentence, as TSV: index, rank, score, text."
        ),
    ] = 1,
    scores: Annotated[
        bool, typer.Option("--scores", help="Print each score before its translation, separated by a tab.")
    ] = False,
    attention: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Write attention matrices here (JSONL).")
    ] = None,
    plot_attention: Annotated[
        Path | None, typer.Option(metavar="DIR", help="Write attention heatmap PNGs into this folder.")
    ] = None,
    plot_first: Annotated[int, typer.Option(min=0, metavar="INT", help="How many sentences to plot.")] = 5,
    pieces: Annotated[
        bool, typer.Option("--pieces", help="Attention over subword pieces instead of words (export, plots).")
    ] = False,
    dpi: Annotated[int, typer.Option(min=10, metavar="INT", help="Resolution of the heatmap PNGs.")] = 100,
    device: DeviceOption = "auto",
    quantize: Annotated[
        Literal["none", "int8"],
        typer.Option(help="int8: an int8 decoder for CPU decoding; faster, outputs change slightly."),
    ] = "none",
    engine: Annotated[
        Literal["torch", "onnx"],
        typer.Option(help="torch, or onnxruntime with an nmt export directory as --model."),
    ] = "torch",
    quiet: QuietOption = False,
) -> None:
    """Translate text with a trained model (nmt translate -m runs/toy -i in.txt -o out.txt)."""
    from nmt.commands.translate import OutputOptions, translate_files
    from nmt.errors import NMTError
    from nmt.fileio import check_outputs

    models = {f"-m {path}": path for path in model}
    check_outputs({"-o": output, "--attention": attention}, {"-i": input, **models})

    overrides = {
        "beam": beam,
        "batch_size": batch_size,
        "batch_type": batch_type,
        "alpha": alpha,
        "length_penalty": length_penalty,
        "coverage": coverage,
        "min_len": min_len,
        "max_len": max_len,
        "max_len_ratio": max_len_ratio,
        "max_len_add": max_len_add,
        "no_repeat_ngram": no_repeat_ngram,
        "allow_unk": False if no_unk else None,
    }
    if engine == "onnx":
        if quantize != "none":
            raise NMTError("--quantize is for the torch engine; leave it out with --engine onnx")
        from nmt.runtime.translator import load_onnx_translator

        translator = load_onnx_translator(model, overrides)
    else:
        from nmt.decode.translator import load_translator

        translator = load_translator(model, overrides, device, quantize)
    model_name = " + ".join(map(str, model))
    opts = OutputOptions(nbest, scores, attention, plot_attention, plot_first, pieces, dpi, model_name)
    summary = translate_files(translator, input, output, opts, quiet)
    if summary:
        typer.echo(summary, err=True)
