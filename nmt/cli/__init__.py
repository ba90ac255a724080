"""The `nmt` command line: one module per command group, registered on one Typer app in the
order `nmt --help` lists them."""

# isort: off
from nmt.cli import train, translate, score, align, explore, serve, evaluate, compare, ship, data, plot, info  # noqa: F401  (each registers its commands)

# isort: on
from nmt.cli.app import app, data_app, plot_app

app.add_typer(data_app, name="data")
app.add_typer(plot_app, name="plot")

__all__ = ["app"]
