"""`nmt eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from nmt.cli.app import DeviceOption, app, model_option, user_errors

# sacreBLEU's tokenizers (sacrebleu.metrics.BLEU.TOKENIZERS; a test keeps the two in step)
Tokenizer = Literal[
    "13a", "intl", "zh", "char", "none", "ja-mecab", "ko-mecab", "spm", "flores101", "flores200", "spBLEU-1K"
]


@app.command("eval")
@user_errors
def eval_cmd(
    ref: Annotated[
        list[Path],
        typer.Option("--ref", "-r", metavar="PATH", help="Reference file; repeat for several references."),
    ],
    hyp: Annotated[
        list[Path] | None,
        typer.Option("--hyp", metavar="PATH", help="System output; repeat to compare systems."),
    ] = None,
    model: Annotated[
        list[Path] | None,
        model_option("Translate --src with this model (repeatable)."),
    ] = None,
    src: Annotated[
        Path | None,
        typer.Option("--src", metavar="PATH", help="Source sentences (for --model, --by src, details)."),
    ] = None,
    beam: Annotated[int | None, typer.Option(min=1, metavar="INT", help="Beam size with --model.")] = None,
    device: DeviceOption = "auto",
    tokenize: Annotated[
        Tokenizer,
        typer.Option(
            metavar="NAME",
            help="sacreBLEU's tokenizer for BLEU: 13a, intl, zh, char, none, ja-mecab, ko-mecab, spm, "
            "flores101, flores200 or spBLEU-1K.",
        ),
    ] = "13a",
    lowercase: Annotated[bool, typer.Option("--lowercase", help="Case-insensitive scores.")] = False,
    chrf_plus: Annotated[
        bool, typer.Option("--chrf++", help="chrF++ (word bigrams) instead of chrF.")
    ] = False,
    buckets: Annotated[
        str, typer.Option(metavar="INT,INT,...", help="Upper bounds of the length buckets, in words.")
    ] = "10,20,30,40,50",
    by: Annotated[
        Literal["ref", "src"], typer.Option(help="Which side's length puts a sentence in a bucket.")
    ] = "ref",
    bootstrap: Annotated[
        int, typer.Option(min=0, metavar="INT", help="Paired bootstrap resamples (0: no significance test).")
    ] = 1000,
    seed: Annotated[int, typer.Option(metavar="INT", help="Seed of the bootstrap.")] = 12345,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    plot: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Write a BLEU-by-length bar chart PNG here.")
    ] = None,
    details: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Write per-sentence scores here (TSV).")
    ] = None,
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
