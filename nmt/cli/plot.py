"""`nmt plot attention | curves`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.app import echo_written, model_option, output_option, plot_app, user_errors


@plot_app.command("attention")
@user_errors
def plot_attention(
    output: Annotated[Path, output_option("Image to write: .png, .svg or .pdf.")],
    attention: Annotated[
        Path | None, typer.Option(metavar="PATH", help="A JSONL file from nmt translate --attention.")
    ] = None,
    index: Annotated[
        int, typer.Option(min=1, metavar="INT", help="Which sentence of the JSONL file (1-based).")
    ] = 1,
    model: Annotated[Path | None, model_option("Or: a checkpoint ...")] = None,
    sentence: Annotated[
        str | None, typer.Option(metavar="TEXT", help="... and a sentence to translate.")
    ] = None,
    beam: Annotated[
        int | None,
        typer.Option(min=1, metavar="INT", help="Beam size with --model (default from its config)."),
    ] = None,
    pieces: Annotated[
        bool, typer.Option("--pieces", help="Subword pieces on the axes instead of words.")
    ] = False,
    dpi: Annotated[int, typer.Option(min=10, metavar="INT", help="Resolution of a PNG.")] = 100,
) -> None:
    """Attention heatmap of one sentence (nmt plot attention --attention att.jsonl -o a.png)."""
    from nmt.commands.plot import plot_attention_of

    plot_attention_of(output, attention, index, model, sentence, beam, pieces, dpi)
    echo_written(output)


@plot_app.command("curves")
@user_errors
def plot_curves(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR", help="Run directories to overlay.")],
    output: Annotated[Path, output_option("PNG file to write.")] = Path("curves.png"),
) -> None:
    """Loss, perplexity and BLEU vs step and wall time (nmt plot curves runs/a runs/b -o c.png)."""
    from nmt.fileio import check_outputs
    from nmt.plots import training_curves
    from nmt.rundir import read_metrics

    check_outputs({"-o": output}, {f"run {run}": run for run in runs})

    training_curves({str(run): read_metrics(run) for run in runs}, output)
    echo_written(output)
