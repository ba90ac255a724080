"""`nmt train`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.app import (
    MODEL,
    OptionalConfigOption,
    PluginOption,
    QuietOption,
    SetOption,
    TrustPluginOption,
    app,
    output_option,
    use_plugins,
    user_errors,
)


@app.command()
@user_errors
def train(
    config: OptionalConfigOption = None,
    set_: SetOption = None,
    output: Annotated[Path | None, output_option("Run directory (default runs/CONFIG).")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(metavar="RUN_DIR", help="Continue the run in this directory.", rich_help_panel=MODEL),
    ] = None,
    init_from: Annotated[
        Path | None,
        typer.Option(
            metavar="CHECKPOINT",
            help="Fine-tune: start from this checkpoint or run (weights, tokenizers); "
            "without --config, under its own config and --set.",
            rich_help_panel=MODEL,
        ),
    ] = None,
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
    quiet: QuietOption = False,
) -> None:
    """Train a model from a YAML config (nmt train -c toy-luong.yaml -o runs/toy), or fine-tune
    one (nmt train --init-from runs/toy --set data.dir=new -o runs/toy-new)."""
    from nmt.train.signals import Interrupted

    try:
        from nmt.train.run import train as run_training  # torch: start-up has begun

        use_plugins(plugin, trust_plugin)
        result = run_training(config, set_ or [], output, resume, quiet, init_from, plugin)
    except (Interrupted, KeyboardInterrupt) as stop:  # the latter while importing, before run_training
        stopped = stop if isinstance(stop, Interrupted) else Interrupted.starting(stop, resume)
        typer.echo(str(stopped), err=True)
        raise typer.Exit(stopped.exit_code) from None
    if result.rank == 0:
        typer.echo(result.summary())
