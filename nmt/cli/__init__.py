"""The `nmt` command line: one module per command group, registered on one Typer app in the
order `nmt --help` lists them."""

# isort: off
# each registers its commands
from nmt.cli import train, translate, distill, score, align, explore, serve, evaluate  # noqa: F401
from nmt.cli import compare, ship, data, plot, info  # noqa: F401

# isort: on
from nmt.cli.app import app, data_app, plot_app

app.add_typer(data_app, name="data")
app.add_typer(plot_app, name="plot")

__all__ = ["app"]
