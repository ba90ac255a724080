"""`nmt score`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.app import (
    MODEL,
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
def score(
    model: Annotated[
        list[Path],
        model_option("Checkpoint or run directory; repeat to score each."),
    ],
    src: SourceOption,
    ref: Annotated[
        Path, typer.Option(metavar="PATH", help="The targets to score, one a line.", rich_help_panel=MODEL)
    ],
    output: Annotated[Path | None, output_option("JSONL file (default stdout).")] = None,
    ensemble: Annotated[
        bool,
        typer.Option(
            "--ensemble", help="Score the -m models as one ensemble instead of each.", rich_help_panel=MODEL
        ),
    ] = False,
    device: DeviceOption = "auto",
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
) -> None:
    """Forced decoding: log-probability, perplexity, per-token scores of given targets
    (nmt score -m runs/toy --src test.human --ref test.iso -o scores.jsonl)."""
    from nmt.commands.score import score_files

    use_plugins(plugin, trust_plugin)
    records, summary = score_files(model, src, ref, output, ensemble, device)
    typer.echo(records, nl=False)
    typer.echo(summary, err=True)
