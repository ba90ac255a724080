"""`nmt eval`, and `nmt precision` (what each CPU precision costs a model in BLEU)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from nmt.cli.app import MODEL, SEARCH, SPEED, DeviceOption, app, model_option, user_errors

# sacreBLEU's tokenizers (sacrebleu.metrics.BLEU.TOKENIZERS; a test keeps the two in step)
Tokenizer = Literal[
    "13a", "intl", "zh", "char", "none", "ja-mecab", "ko-mecab", "spm", "flores101", "flores200", "spBLEU-1K"
]


RefOption = Annotated[
    list[Path],
    typer.Option("--ref", "-r", metavar="PATH", help="Reference file; repeat for several references."),
]
HypOption = Annotated[
    list[Path] | None,
    typer.Option("--hyp", metavar="PATH", help="System output; repeat to compare systems."),
]
ModelsOption = Annotated[list[Path] | None, model_option("Translate --src with this model (repeatable).")]
SrcOption = Annotated[
    Path | None,
    typer.Option("--src", metavar="PATH", help="Source sentences (for --model, --by src, details)."),
]
BeamOption = Annotated[int | None, typer.Option(min=1, metavar="INT", help="Beam size with --model.")]
TokenizeOption = Annotated[
    Tokenizer,
    typer.Option(
        metavar="NAME",
        help="sacreBLEU's tokenizer for BLEU: 13a, intl, zh, char, none, ja-mecab, ko-mecab, spm, "
        "flores101, flores200 or spBLEU-1K.",
    ),
]
LowercaseOption = Annotated[bool, typer.Option("--lowercase", help="Case-insensitive scores.")]
ChrfPlusOption = Annotated[bool, typer.Option("--chrf++", help="chrF++ (word bigrams) instead of chrF.")]
BucketsOption = Annotated[
    str, typer.Option(metavar="INT,INT,...", help="Upper bounds of the length buckets, in words.")
]
ByOption = Annotated[
    Literal["ref", "src"], typer.Option(help="Which side's length puts a sentence in a bucket.")
]
BootstrapOption = Annotated[
    int, typer.Option(min=0, metavar="INT", help="Paired bootstrap resamples (0: no significance test).")
]
SeedOption = Annotated[int, typer.Option(metavar="INT", help="Seed of the bootstrap.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
PlotOption = Annotated[
    Path | None, typer.Option(metavar="PATH", help="Write a BLEU-by-length bar chart PNG here.")
]
DetailsOption = Annotated[
    Path | None, typer.Option(metavar="PATH", help="Write per-sentence scores here (TSV).")
]


@app.command("eval")
@user_errors
def eval_cmd(
    ref: RefOption,
    hyp: HypOption = None,
    model: ModelsOption = None,
    src: SrcOption = None,
    beam: BeamOption = None,
    device: DeviceOption = "auto",
    tokenize: TokenizeOption = "13a",
    lowercase: LowercaseOption = False,
    chrf_plus: ChrfPlusOption = False,
    buckets: BucketsOption = "10,20,30,40,50",
    by: ByOption = "ref",
    bootstrap: BootstrapOption = 1000,
    seed: SeedOption = 12345,
    as_json: JsonOption = False,
    plot: PlotOption = None,
    details: DetailsOption = None,
) -> None:
    """Score output with sacreBLEU, overall and by length (nmt eval --hyp out.txt --ref ref.txt)."""
    from nmt.commands.evaluate import run_eval
    from nmt.evaluate.scoring import EvalOptions, parse_buckets

    opts = EvalOptions(
        tokenize, lowercase, 2 if chrf_plus else 0, parse_buckets(buckets), by, bootstrap, seed
    )
    typer.echo(
        run_eval(ref, hyp or [], model or [], src, {"beam": beam}, device, opts, as_json, plot, details)
    )


RequiredModelOption = Annotated[Path, model_option("The model to check: a checkpoint, run or release.")]
CheckSrcOption = Annotated[
    Path | None,
    typer.Option(
        "--src",
        metavar="PATH",
        help="Source sentences to check on (default: the model's validation split).",
        rich_help_panel=MODEL,
    ),
]
CheckRefOption = Annotated[
    Path | None,
    typer.Option("--ref", "-r", metavar="PATH", help="Their references (with --src).", rich_help_panel=MODEL),
]
CheckBeamOption = Annotated[
    int | None,
    typer.Option(min=1, metavar="INT", help="Beam size (default: the model's).", rich_help_panel=SEARCH),
]
BatchOption = Annotated[
    int | None, typer.Option(min=1, metavar="INT", help="Sentences per batch.", rich_help_panel=SPEED)
]


@app.command()
@user_errors
def precision(
    model: RequiredModelOption,
    src: CheckSrcOption = None,
    ref: CheckRefOption = None,
    beam: CheckBeamOption = None,
    batch_size: BatchOption = None,
) -> None:
    """Decode a set in each precision this CPU runs (fp32, int8, bf16 where it has the units),
    score each, and keep the BLEU beside the model's weights, so `--precision auto` may take int8
    where it lost at most 0.2 BLEU and runs faster (nmt precision -m runs/toy)."""
    from nmt.commands.precision import run_precision

    typer.echo(run_precision(model, src, ref, {"beam": beam, "batch_size": batch_size}))
