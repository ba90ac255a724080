"""`nmt configs` and `nmt env`, and the `--version` flag: what a user asks before and when filing a bug."""

from __future__ import annotations

from typing import Annotated

import typer

from nmt.cli.app import PluginOption, app, builtin_config_names, user_errors
from nmt.version import VERSION


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nmt {VERSION}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    pass


@app.command()
@user_errors
def configs(
    show: Annotated[
        str | None,
        typer.Option(
            metavar="FILE|NAME",
            help="Print this config whole (its base merged), every default filled in, each key described.",
            autocompletion=builtin_config_names,
        ),
    ] = None,
    plugin: PluginOption = None,
) -> None:
    """List the built-in configs (not the `_*.yaml` bases they build on), or show one in full
    (nmt configs --show toy-luong.yaml), a plugin attention's options included."""
    from nmt.config import builtin_configs, describe_config, load_config

    if show is not None:
        typer.echo(describe_config(load_config(show, plugins=plugin)), nl=False)
        return
    for path in builtin_configs():
        first = path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
        typer.echo(f"{path.name:32} {first}")


@app.command()
def env(
    bench: Annotated[
        bool, typer.Option("--bench", help="also time the yardstick product (docs/performance.md)")
    ] = False,
) -> None:
    """Versions, devices and threads, to paste into a bug report (nmt env); with --bench, the CPU
    and its speed at the product every CPU figure in the docs is named by."""
    from nmt.device import environment_report
    from nmt.machine import bf16_line, int8_line

    typer.echo(environment_report())
    typer.echo(bf16_line())
    typer.echo(int8_line())
    if bench:
        from nmt.machine import yardstick_report
        from nmt.model.precision import report
        from nmt.train.backends import choices_report

        typer.echo(yardstick_report())
        for cached in filter(None, (choices_report(), report())):
            typer.echo(cached)
