"""`nmt train`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.app import OptionalConfigOption, QuietOption, SetOption, app, output_option, user_errors


@app.command()
@user_errors
def train(
    config: OptionalConfigOption = None,
    set_: SetOption = None,
    output: Annotated[Path | None, output_option("Run directory (default runs/CONFIG).")] = None,
    resume: Annotated[
        Path | None, typer.Option(metavar="RUN_DIR", help="Continue the run in this directory.")
    ] = None,
    quiet: QuietOption = False,
) -> None:
    """Train a model from a YAML config (nmt train -c toy-luong.yaml -o runs/toy)."""
    from nmt.train.signals import Interrupted

    try:
        from nmt.train.run import train as run_training  # torch: start-up has begun

        result = run_training(config, set_ or [], output, resume, quiet)
    except (Interrupted, KeyboardInterrupt) as stop:  # the latter while importing, before run_training
        stopped = stop if isinstance(stop, Interrupted) else Interrupted.starting(stop, resume)
        typer.echo(str(stopped), err=True)
        raise typer.Exit(stopped.exit_code) from None
    if result.rank == 0:
        typer.echo(result.summary())
