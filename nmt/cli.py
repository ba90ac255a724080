"""The `nmt` command line. Each command parses, calls one library function and prints.

Heavy packages (torch, datasets, sacrebleu, matplotlib) are imported inside the commands, so
`nmt --help` and tab completion stay instant.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated

import typer

from nmt import __version__
from nmt.errors import NMTError

app = typer.Typer(
    name="nmt",
    help="Attentional LSTM neural machine translation: data, training, decoding, evaluation.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="markdown",
)
data_app = typer.Typer(
    help="Get parallel text ready (nmt data toy --config toy-luong.yaml).", no_args_is_help=True
)
app.add_typer(data_app, name="data")

ConfigOption = Annotated[
    str, typer.Option("--config", "-c", help="YAML file, or the name of a built-in config.")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a config value: section.key=value (repeatable)."),
]


def user_errors(command):
    """Turn an NMTError into one line on stderr and exit code 2, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except NMTError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(code=2) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nmt {__version__}")
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
def train(
    config: Annotated[
        str | None, typer.Option("--config", "-c", help="YAML file or built-in config name.")
    ] = None,
    set_: SetOption = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Run directory (default runs/CONFIG).")
    ] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue the run in this directory.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or log lines.")] = False,
) -> None:
    """Train a model from a YAML config (nmt train -c toy-luong.yaml --out runs/toy)."""
    from nmt.train.trainer import train as run_training

    result = run_training(config, set_ or [], out, resume, quiet)
    typer.echo(
        f"trained {result.steps} steps; best valid BLEU {result.best_bleu:.2f}; "
        f"checkpoints in {result.run_dir / 'checkpoints'}"
    )


@app.command()
@user_errors
def translate(
    model: Annotated[
        list[Path], typer.Option("--model", "-m", help="Checkpoint or run directory; repeat to ensemble.")
    ],
    input: Annotated[Path | None, typer.Option("--input", "-i", help="Text file (default stdin).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Text file (default stdout).")] = None,
    beam: Annotated[
        int | None, typer.Option(min=1, help="Beam size (1 = greedy; default from the config).")
    ] = None,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Sentences (or tokens) per batch.")] = None,
    batch_type: Annotated[str | None, typer.Option(help="sentences or tokens.")] = None,
    alpha: Annotated[float | None, typer.Option(min=0, help="Length penalty exponent.")] = None,
    length_penalty: Annotated[str | None, typer.Option(help="none, avg or gnmt.")] = None,
    coverage: Annotated[float | None, typer.Option(min=0, help="GNMT coverage penalty beta.")] = None,
    min_len: Annotated[int | None, typer.Option(min=0, help="No EOS before this many tokens.")] = None,
    max_len: Annotated[int | None, typer.Option(min=1, help="Cap on output tokens.")] = None,
    no_repeat_ngram: Annotated[
        int | None, typer.Option(min=0, help="Never repeat an n-gram this long.")
    ] = None,
    no_unk: Annotated[bool, typer.Option("--no-unk", help="Never output the unknown token.")] = False,
    nbest: Annotated[
        int, typer.Option(min=1, help="Print K hypotheses a line: index, rank, score, text.")
    ] = 1,
    scores: Annotated[bool, typer.Option("--scores", help="Print 'score<TAB>text' lines.")] = False,
    attention: Annotated[Path | None, typer.Option(help="Write attention matrices here (JSONL).")] = None,
    plot_attention: Annotated[Path | None, typer.Option(help="Write attention heatmap PNGs here.")] = None,
    plot_first: Annotated[int, typer.Option(min=0, help="How many sentences to plot.")] = 5,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N, mps or auto.")] = "cpu",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Translate text with a trained model (nmt translate -m runs/toy -i in.txt -o out.txt)."""
    from nmt.decode.output import OutputOptions, translate_files
    from nmt.decode.translator import load_translator

    overrides = {
        "beam": beam,
        "batch_size": batch_size,
        "batch_type": batch_type,
        "alpha": alpha,
        "length_penalty": length_penalty,
        "coverage": coverage,
        "min_len": min_len,
        "max_len": max_len,
        "no_repeat_ngram": no_repeat_ngram,
        "allow_unk": False if no_unk else None,
    }
    translator = load_translator(model, overrides, device)
    opts = OutputOptions(nbest, scores, attention, plot_attention, plot_first)
    summary = translate_files(translator, input, output, opts, quiet)
    if summary:
        typer.echo(summary, err=True)


@app.command("eval")
@user_errors
def eval_cmd(
    ref: Annotated[Path, typer.Option("--ref", "-r", help="Reference translations, one a line.")],
    hyp: Annotated[Path | None, typer.Option("--hyp", help="System output to score.")] = None,
    model: Annotated[
        Path | None, typer.Option("--model", "-m", help="Translate --src with this model first.")
    ] = None,
    src: Annotated[Path | None, typer.Option("--src", help="Source sentences for --model.")] = None,
    beam: Annotated[int | None, typer.Option(min=1, help="Beam size with --model.")] = None,
    device: Annotated[str, typer.Option(help="Device with --model.")] = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Score output with sacreBLEU, overall and by length (nmt eval --hyp out.txt --ref ref.txt)."""
    from nmt.evaluate.scoring import score
    from nmt.fileio import read_lines

    refs = read_lines(ref)
    if (hyp is None) == (model is None):
        raise NMTError("eval: give either --hyp FILE, or --model CKPT with --src FILE")
    if model is not None:
        if src is None:
            raise NMTError("eval: --model needs --src FILE")
        from nmt.decode.translator import load_translator

        hyps = [t.text for t in load_translator([model], {"beam": beam}, device).translate(read_lines(src))]
    else:
        hyps = read_lines(hyp)
    report = score(hyps, refs)
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.table())


@app.command()
def configs() -> None:
    """List the built-in configs, usable by name in --config (nmt configs)."""
    from nmt.config import builtin_configs

    for path in builtin_configs():
        first = path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
        typer.echo(f"{path.name:32} {first}")


@data_app.command("toy")
@user_errors
def data_toy(
    config: Annotated[
        str | None, typer.Option("--config", "-c", help="Write into this config's data.dir.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Output directory (instead of --config).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Generator seed.")] = 1,
) -> None:
    """Write the toy dates corpus: human dates -> ISO (nmt data toy -c toy-luong.yaml)."""
    from nmt.config import load_config
    from nmt.data.toy import write_toy_corpus

    if (config is None) == (out is None):
        raise NMTError("data toy: give --config FILE or --out DIR")
    target = out if out is not None else Path(load_config(config).data.dir)
    sizes = write_toy_corpus(target, seed=seed)
    typer.echo(f"wrote {', '.join(f'{n} {split}' for split, n in sizes.items())} pairs to {target}")
