"""`nmt align`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from nmt.cli.app import (
    MODEL,
    OUTPUT,
    SEARCH,
    DeviceOption,
    PluginOption,
    SourceOption,
    TrustPluginOption,
    app,
    echo_written,
    model_option,
    output_option,
    use_plugins,
    user_errors,
)


@app.command()
@user_errors
def align(
    model: Annotated[
        list[Path],
        model_option("Checkpoint or run directory; repeat to ensemble."),
    ],
    src: SourceOption,
    output: Annotated[Path, output_option("Pharaoh file to write (i-j links, one line a sentence).")],
    ref: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="Align to these targets (forced decoding) instead of the output.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    gold: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="Gold links (i-j sure, i?j possible): print AER, precision, recall.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    method: Annotated[
        Literal["argmax", "threshold"],
        typer.Option(help="argmax: each target word to its best source word.", rich_help_panel=OUTPUT),
    ] = "argmax",
    threshold: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            metavar="FLOAT",
            help="Least weight of a link with --method threshold.",
            rich_help_panel=OUTPUT,
        ),
    ] = 0.3,
    beam: Annotated[
        int | None,
        typer.Option(min=1, metavar="INT", help="Beam size without --ref.", rich_help_panel=SEARCH),
    ] = None,
    device: DeviceOption = "auto",
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
) -> None:
    """Word alignments from attention, in Pharaoh format, and their AER against gold links
    (nmt align -m runs/toy --src test.human --ref test.iso --gold test.align -o test.out.align)."""
    from nmt.commands.align import run_align

    use_plugins(plugin, trust_plugin)
    summary = run_align(model, src, ref, gold, output, method, threshold, {"beam": beam}, device)
    echo_written(output)
    if summary:
        typer.echo(summary)
