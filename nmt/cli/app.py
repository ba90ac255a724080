"""The Typer application, its sub-groups, and the options every command shares.

Each command module registers its commands here and holds no logic of its own: it parses,
calls one library function and prints. Heavy packages (torch, datasets, sacrebleu, matplotlib)
are imported inside the commands, so `nmt --help` and tab completion stay instant.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
from typer import _click as click  # typer >= 0.29 vendors click
from typer.core import TyperArgument, TyperCommand, TyperGroup

from nmt.errors import NMTError
from nmt.fileio import describe_os_error, os_error_in


def _argument_type(self: TyperArgument, ctx) -> str | None:
    """A positional argument with a metavar (RUN_DIR...) shows it alone, as click does; typer 0.29
    adds the Python type (`<list[Path]>`) after it."""
    return None if self.metavar else TyperArgument.display_type(self, ctx)


TyperArgument.display_type_rich = _argument_type


class OneLineErrors(TyperGroup):
    """Usage errors (an unknown option, a bad choice, a missing value) as one line on stderr with
    exit code 2, like every other error a user can make, instead of click's usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:  # `nmt` or `nmt data` alone: the help
            click.echo(e.ctx.get_help())
            sys.exit(0)
        except click.exceptions.UsageError as e:
            where = e.ctx.command_path if e.ctx else "nmt"
            click.echo(f"error: {where}: {e.format_message()} (see {where} --help)", err=True)
            sys.exit(2)
        except click.exceptions.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except typer.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except Exception:  # a bug in nmt: show it, and say where to report it
            import traceback

            traceback.print_exc()
            click.echo(
                "nmt hit an internal error (a bug, not a problem with your input); please report it "
                "with the traceback above and the output of `nmt env`",
                err=True,
            )
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


# The panels of a command's help, so a newcomer finds an option by what it is for (nmt translate
# has about 40); the options of no panel come last, under "Options"
MODEL, SEARCH, SAMPLING, STEERING, OUTPUT, SPEED = (
    "Model and input",
    "Search",
    "Sampling",
    "Steering",
    "Output",
    "Speed",
)
TRAINING = "Training"
PANELS = (MODEL, TRAINING, SEARCH, SAMPLING, STEERING, OUTPUT, SPEED)


class PanelledCommand(TyperCommand):
    """Plain help (no boxes: it reads like other tools' and fits 80 columns) with the options in
    sections by their `rich_help_panel`, in the order of `PANELS`."""

    def format_options(self, ctx, formatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        arguments = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                sections.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        order = {title: i for i, title in enumerate((*PANELS, "Options"))}
        for title, records in sorted(sections.items(), key=lambda item: order.get(item[0], len(order))):
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


class Commands(typer.Typer):
    """Every command's help in panels (`PanelledCommand`)."""

    def command(self, *args, cls=PanelledCommand, **kwargs):
        return super().command(*args, cls=cls, **kwargs)


app = Commands(
    cls=OneLineErrors,
    name="nmt",
    help="Attentional LSTM neural machine translation: data, training, decoding, evaluation.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help that reads like other tools' and fits 80 columns
    pretty_exceptions_show_locals=False,
)
data_app = Commands(help="Get parallel text ready (nmt data toy --output data/toy).", no_args_is_help=True)
plot_app = Commands(help="Plots of attention and training (nmt plot curves runs/toy).", no_args_is_help=True)


def builtin_config_names(incomplete: str = "") -> list[str]:
    """Shell completion for --config: the built-in configs whose name starts with `incomplete`."""
    from nmt.config import builtin_configs

    return [p.name for p in builtin_configs() if p.name.startswith(incomplete)]


def _config_option() -> typer.models.OptionInfo:
    return typer.Option(
        "--config",
        "-c",
        metavar="FILE|NAME",
        help="YAML file, or the name of a built-in config (nmt configs).",
        autocompletion=builtin_config_names,
        rich_help_panel=MODEL,
    )


ConfigOption = Annotated[str, _config_option()]
OptionalConfigOption = Annotated[str | None, _config_option()]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="KEY=VALUE",
        help="Override a config value, e.g. model.attention.type=bahdanau (repeatable).",
        rich_help_panel=MODEL,
    ),
]
PrecisionOption = Annotated[
    Literal["auto", "fp32", "bf16", "int8"] | None,
    typer.Option(
        help="CPU products: auto (default) takes bf16 where this CPU runs the model's at least 1.5x "
        "faster in it, else fp32, and int8 where it is 1.5x faster still and `nmt precision` found it "
        "within 0.2 BLEU; int8: an int8 decoder. bf16 and int8 change outputs slightly.",
        rich_help_panel=SPEED,
    ),
]
DeviceOption = Annotated[
    str,
    typer.Option(
        metavar="[auto|cpu|cuda|cuda:N|mps]",
        help="Where to run; auto takes CUDA, then MPS, then the CPU.",
        autocompletion=lambda incomplete: [
            d for d in ("auto", "cpu", "cuda", "mps") if d.startswith(incomplete)
        ],
        rich_help_panel=SPEED,
    ),
]
SourceOption = Annotated[
    Path, typer.Option(metavar="PATH", help="Source text, one sentence a line.", rich_help_panel=MODEL)
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar or log lines.", rich_help_panel=OUTPUT)
]
PluginOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--plugin",
        metavar="FILE",
        help="A Python file of your own classes (an attention, ...) to import first (repeatable).",
        rich_help_panel=MODEL,
    ),
]
TrustPluginOption = Annotated[
    bool,
    typer.Option(
        "--trust-plugin",
        help="Run the plugin source a model recorded, where no --plugin file matches: "
        "only for a model you trust.",
        rich_help_panel=MODEL,
    ),
]


def use_plugins(files: list[Path] | None, trust: bool = False) -> None:
    """--plugin and --trust-plugin: the files imported now, before any config or model is read
    (`nmt.plugins`)."""
    from nmt.plugins import load_files
    from nmt.plugins import trust as trusting

    trusting(trust)
    load_files(files or [])


def model_option(help: str, metavar: str = "PATH") -> typer.models.OptionInfo:
    """The one spelling of the model option across commands: -m / --model PATH (repeatable
    where the parameter is a list); every command loads it through `nmt.checkpoint.load_model`."""
    return typer.Option("--model", "-m", metavar=metavar, help=help, rich_help_panel=MODEL)


def output_option(help: str) -> typer.models.OptionInfo:
    """The one spelling of an output option across commands: -o / --output PATH."""
    return typer.Option("--output", "-o", metavar="PATH", help=help, rich_help_panel=OUTPUT)


def user_errors(command):
    """Turn what a user can cause or meet into one line on stderr and exit code 2: an NMTError,
    or an OS error at the boundary (permission denied, a full disk, a folder where a file was
    expected), named by its path, also when a library wrapped it in an error of its own (torch's
    writer raises a RuntimeError while handling the EFBIG or ENOSPC of its file). Anything else
    is a bug and keeps its traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except NMTError as e:
            message = str(e)
        except OSError as e:
            message = describe_os_error(e)
        except Exception as e:
            wrapped = None if isinstance(e, typer.Exit | typer.Abort) else os_error_in(e)
            if wrapped is None:
                raise
            message = describe_os_error(wrapped)
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(code=2)

    return wrapper


def echo_written(path: Path) -> None:
    typer.echo(f"wrote {path}")
