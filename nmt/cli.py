"""The `nmt` command line. Each command parses, calls one library function and prints.

Heavy packages (torch, datasets, sacrebleu, matplotlib) are imported inside the commands, so
`nmt --help` and tab completion stay instant.
"""

from __future__ import annotations

import functools
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
    if result.rank == 0:
        typer.echo(
            f"trained {result.steps} steps ({result.stopped}); best valid {result.metric} {result.best:.2f}; "
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
    ref: Annotated[
        list[Path], typer.Option("--ref", "-r", help="Reference file; repeat for several references.")
    ],
    hyp: Annotated[
        list[Path] | None, typer.Option("--hyp", help="System output; repeat to compare systems.")
    ] = None,
    model: Annotated[
        list[Path] | None, typer.Option("--model", "-m", help="Translate --src with this model.")
    ] = None,
    src: Annotated[
        Path | None, typer.Option("--src", help="Source sentences (for --model, --by src, details).")
    ] = None,
    beam: Annotated[int | None, typer.Option(min=1, help="Beam size with --model.")] = None,
    device: Annotated[str, typer.Option(help="Device with --model.")] = "cpu",
    tokenize: Annotated[
        str, typer.Option(help="sacreBLEU tokenizer: 13a, intl, zh, char, none, ...")
    ] = "13a",
    lowercase: Annotated[bool, typer.Option("--lowercase", help="Case-insensitive scores.")] = False,
    chrf_plus: Annotated[
        bool, typer.Option("--chrf++", help="chrF++ (word bigrams) instead of chrF.")
    ] = False,
    buckets: Annotated[str, typer.Option(help="Length bucket upper bounds.")] = "10,20,30,40,50",
    by: Annotated[str, typer.Option(help="Bucket by ref or src length.")] = "ref",
    bootstrap: Annotated[int, typer.Option(min=0, help="Paired bootstrap resamples (0: no test).")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 12345,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a BLEU-by-length bar chart PNG here.")] = None,
    details: Annotated[Path | None, typer.Option(help="Write per-sentence scores here (TSV).")] = None,
) -> None:
    """Score output with sacreBLEU, overall and by length (nmt eval --hyp out.txt --ref ref.txt)."""
    from nmt.evaluate.report import run_eval
    from nmt.evaluate.scoring import EvalOptions, parse_buckets

    if by not in ("ref", "src"):
        raise NMTError(f"--by {by}: expected ref or src")
    opts = EvalOptions(
        tokenize, lowercase, 2 if chrf_plus else 0, parse_buckets(buckets), by, bootstrap, seed
    )
    typer.echo(
        run_eval(ref, hyp or [], model or [], src, {"beam": beam}, device, opts, as_json, plot, details)
    )


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


plot_app = typer.Typer(
    help="Plots of attention and training (nmt plot curves runs/toy).", no_args_is_help=True
)
app.add_typer(plot_app, name="plot")


@plot_app.command("attention")
@user_errors
def plot_attention(
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write.")],
    attention: Annotated[
        Path | None, typer.Option(help="A JSONL file from nmt translate --attention.")
    ] = None,
    index: Annotated[int, typer.Option(min=1, help="Which sentence of the JSONL file (1-based).")] = 1,
    model: Annotated[Path | None, typer.Option("--model", "-m", help="Or: a checkpoint ...")] = None,
    sentence: Annotated[str | None, typer.Option(help="... and a sentence to translate.")] = None,
    beam: Annotated[int, typer.Option(min=1, help="Beam size with --model.")] = 1,
) -> None:
    """Attention heatmap of one sentence (nmt plot attention --attention att.jsonl -o a.png)."""
    from nmt.evaluate.report import plot_attention_of

    plot_attention_of(out, attention, index, model, sentence, beam)
    typer.echo(f"wrote {out}")


@plot_app.command("curves")
@user_errors
def plot_curves(
    runs: Annotated[list[Path], typer.Argument(help="Run directories to overlay.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write.")] = Path("curves.png"),
) -> None:
    """Loss, perplexity and BLEU vs step and wall time (nmt plot curves runs/a runs/b -o c.png)."""
    from nmt.plots import training_curves
    from nmt.rundir import read_metrics

    training_curves({str(run): read_metrics(run) for run in runs}, out)
    typer.echo(f"wrote {out}")


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
    plot: Annotated[Path | None, typer.Option(help="Write a length histogram PNG here.")] = None,
) -> None:
    """Sizes, length percentiles, unknown rates, padding efficiency (nmt data stats -c CFG)."""
    from nmt.config import load_config
    from nmt.data.stats import data_stats as stats

    typer.echo(stats(load_config(config, set_ or []), plot))
