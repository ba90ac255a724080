"""`nmt average`, `nmt release` and `nmt export`: from a training run to a model to ship."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.app import (
    MODEL,
    DeviceOption,
    PluginOption,
    TrustPluginOption,
    app,
    output_option,
    use_plugins,
    user_errors,
)


@app.command()
@user_errors
def average(
    inputs: Annotated[
        list[Path], typer.Argument(metavar="RUN_DIR|CKPT", help="A run directory, or checkpoint files.")
    ],
    output: Annotated[Path, output_option("The averaged checkpoint (.pt).")],
    last: Annotated[
        int | None, typer.Option(min=2, metavar="INT", help="With a run directory: its last K snapshots.")
    ] = None,
) -> None:
    """Average checkpoints' weights (nmt average runs/toy --last 5 -o avg.pt)."""
    from nmt.ship.average import average as average_checkpoints

    typer.echo(average_checkpoints(inputs, last, output))


@app.command()
@user_errors
def release(
    source: Annotated[Path, typer.Argument(metavar="RUN_OR_CKPT", help="A run directory or a checkpoint.")],
    output: Annotated[Path, output_option("The release directory to create.")],
    fp16: Annotated[bool, typer.Option("--fp16", help="Store the weights in half precision.")] = False,
    test_src: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Test sources for the model card's scores.")
    ] = None,
    test_ref: Annotated[Path | None, typer.Option(metavar="PATH", help="Test references.")] = None,
    device: DeviceOption = "cpu",
    shortlist: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="A shortlist built for it (nmt shortlist), stored beside it.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
) -> None:
    """Write a release: weights, config, tokenizers, model card and the plugins it needs
    (nmt release runs/toy -o toy)."""
    from nmt.ship.release import release as write_release

    use_plugins(plugin, trust_plugin)
    for line in write_release(source, output, fp16, test_src, test_ref, device, shortlist).lines():
        typer.echo(line)


@app.command()
@user_errors
def export(
    source: Annotated[
        str, typer.Argument(metavar="RUN_OR_RELEASE", help="A run, checkpoint, release or hf://user/repo.")
    ],
    output: Annotated[Path, output_option("The export directory to create.")],
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
) -> None:
    """Export to ONNX for the torch-free decoder (nmt export runs/toy -o toy-onnx)."""
    from nmt.ship.export import export as export_onnx

    use_plugins(plugin, trust_plugin)
    for line in export_onnx(source, output):
        typer.echo(line)
