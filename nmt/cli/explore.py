"""`nmt explore`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.app import DeviceOption, SourceOption, app, model_option, output_option, user_errors


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
        typer.Option(metavar="PATH", help="References: chrF, forced attention and alignment links."),
    ] = None,
    beam: Annotated[
        int | None, typer.Option(min=1, metavar="INT", help="Beam size (default from the model's config).")
    ] = None,
    nbest: Annotated[int, typer.Option(min=1, metavar="INT", help="Hypotheses shown per sentence.")] = 5,
    device: DeviceOption = "auto",
) -> None:
    """One HTML page to browse attention, n-best lists and alignments of one or more systems
    (nmt explore -m runs/a -m runs/b --src test.de --ref test.en -o explore.html)."""
    from nmt.explore.page import build_explorer

    typer.echo(build_explorer(model, src, ref, output, {"beam": beam}, nbest, device))
