"""`nmt data toy | download | prepare | stats`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.app import ConfigOption, OptionalConfigOption, SetOption, data_app, output_option, user_errors
from nmt.errors import NMTError


@data_app.command("toy")
@user_errors
def data_toy(
    config: OptionalConfigOption = None,
    output: Annotated[Path | None, output_option("Output directory (instead of --config).")] = None,
    seed: Annotated[int, typer.Option(metavar="INT", help="Generator seed.")] = 1,
) -> None:
    """Write the toy dates corpus: human dates -> ISO (nmt data toy -o data/toy)."""
    from nmt.config import load_config
    from nmt.data.toy import write_toy_corpus

    if (config is None) == (output is None):
        raise NMTError("data toy: give --config FILE or --output DIR")
    target = output if output is not None else Path(load_config(config).data.dir)
    sizes = write_toy_corpus(target, seed=seed)
    written = ", ".join(f"{n} {split}" for split, n in sizes.items())
    typer.echo(f"wrote {written} pairs to {target} (.human, .iso, and gold word alignments .align)")


@data_app.command("download")
@user_errors
def data_download(config: ConfigOption, set_: SetOption = None) -> None:
    """Write the splits as plain text into data.dir (nmt data download -c iwslt-luong-dot.yaml)."""
    from nmt.config import load_config
    from nmt.data.sources import download

    typer.echo(download(load_config(config, set_ or []).data))


@data_app.command("prepare")
@user_errors
def data_prepare(config: ConfigOption, set_: SetOption = None) -> None:
    """Train the tokenizer(s) and encode every split into the cache (nmt data prepare -c CFG)."""
    from nmt.config import load_config
    from nmt.data.prepare import prepare_report

    typer.echo(prepare_report(load_config(config, set_ or [])))


@data_app.command("stats")
@user_errors
def data_stats(
    config: ConfigOption,
    set_: SetOption = None,
    plot: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Write a length histogram PNG here.")
    ] = None,
) -> None:
    """Sizes, length percentiles, unknown rates, padding efficiency (nmt data stats -c CFG)."""
    from nmt.config import load_config
    from nmt.data.stats import data_stats as stats

    typer.echo(stats(load_config(config, set_ or []), plot))
