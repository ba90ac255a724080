"""`nmt explore`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
    model_option,
    output_option,
    use_plugins,
    user_errors,
)


@app.command()
@user_errors
def explore(
    model: Annotated[
        list[Path],
        model_option("Checkpoint or run directory; repeat to compare systems."),
    ],
    src: SourceOption,
    output: Annotated[Path, output_option("HTML file to write (self-contained, opens offline).")],
    ref: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="References: chrF, forced attention and alignment links.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    beam: Annotated[
        int | None,
        typer.Option(
            min=1, metavar="INT", help="Beam size (default from the model's config).", rich_help_panel=SEARCH
        ),
    ] = None,
    nbest: Annotated[
        int, typer.Option(min=1, metavar="INT", help="Hypotheses shown per sentence.", rich_help_panel=OUTPUT)
    ] = 5,
    device: DeviceOption = "auto",
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
) -> None:
    """One HTML page to browse attention, n-best lists and alignments of one or more systems
    (nmt explore -m runs/a -m runs/b --src test.de --ref test.en -o explore.html)."""
    from nmt.explore.page import build_explorer

    use_plugins(plugin, trust_plugin)
    typer.echo(build_explorer(model, src, ref, output, {"beam": beam}, nbest, device))
