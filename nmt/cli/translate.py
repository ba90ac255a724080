"""`nmt translate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from nmt.cli.app import (
    MODEL,
    OUTPUT,
    SAMPLING,
    SEARCH,
    SPEED,
    STEERING,
    DeviceOption,
    PluginOption,
    PrecisionOption,
    QuietOption,
    TrustPluginOption,
    app,
    model_option,
    output_option,
    use_plugins,
    user_errors,
)

ModelsOption = Annotated[
    list[Path],
    model_option("Checkpoint, run or release directory, or hf://user/repo; repeat to ensemble."),
]
InputOption = Annotated[
    Path | None,
    typer.Option("--input", "-i", metavar="PATH", help="Text file (default stdin).", rich_help_panel=MODEL),
]
OutputOption = Annotated[Path | None, output_option("Text file (default stdout).")]
BeamOption = Annotated[
    int | None,
    typer.Option(
        min=1, metavar="INT", help="Beam size (1 = greedy; default from the config).", rich_help_panel=SEARCH
    ),
]
BatchSizeOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        metavar="INT",
        help="Sentences (or tokens) per batch. On a GPU count sentences (fixed rows need them); "
        "a wide batch, 256, costs a step little more than 64 there.",
        rich_help_panel=SPEED,
    ),
]
BatchTypeOption = Annotated[
    Literal["sentences", "tokens"] | None,
    typer.Option(help="What --batch-size counts.", rich_help_panel=SPEED),
]
RowsOption = Annotated[
    Literal["auto", "fixed", "pooled"] | None,
    typer.Option(
        help="fixed: read the device every 8 steps, CUDA graphs on a GPU (auto: on a GPU).",
        rich_help_panel=SPEED,
    ),
]
AlphaOption = Annotated[
    float | None,
    typer.Option(min=0, metavar="FLOAT", help="Length penalty exponent.", rich_help_panel=SEARCH),
]
LengthPenaltyOption = Annotated[
    Literal["none", "avg", "gnmt"] | None,
    typer.Option(help="Length penalty formula.", rich_help_panel=SEARCH),
]
CoverageOption = Annotated[
    float | None,
    typer.Option(min=0, metavar="FLOAT", help="GNMT coverage penalty beta.", rich_help_panel=SEARCH),
]
MinLenOption = Annotated[
    int | None,
    typer.Option(min=0, metavar="INT", help="No EOS before this many tokens.", rich_help_panel=SEARCH),
]
MaxLenOption = Annotated[
    int | None, typer.Option(min=1, metavar="INT", help="Cap on output tokens.", rich_help_panel=SEARCH)
]
MaxLenRatioOption = Annotated[
    float | None,
    typer.Option(
        min=0,
        metavar="FLOAT",
        help="And at most this x source length + --max-len-add.",
        rich_help_panel=SEARCH,
    ),
]
MaxLenAddOption = Annotated[
    int | None, typer.Option(min=0, metavar="INT", help="See --max-len-ratio.", rich_help_panel=SEARCH)
]
NoRepeatNgramOption = Annotated[
    int | None,
    typer.Option(min=0, metavar="INT", help="Never repeat an n-gram this long.", rich_help_panel=SEARCH),
]
NoUnkOption = Annotated[
    bool, typer.Option("--no-unk", help="Never output the unknown token.", rich_help_panel=SEARCH)
]
NbestOption = Annotated[
    int,
    typer.Option(
        min=1,
        metavar="INT",
        help="Print K hypotheses (with --sample: K samples) a sentence, as TSV: index, rank, score, text.",
        rich_help_panel=OUTPUT,
    ),
]
SampleOption = Annotated[
    bool | None,
    typer.Option(
        "--sample/--search",
        help="Draw each token from the model instead of searching.",
        rich_help_panel=SAMPLING,
    ),
]
TemperatureOption = Annotated[
    float | None,
    typer.Option(
        metavar="FLOAT",
        help="Sampling: divides the logits (< 1 sharper; 0.001-100).",
        rich_help_panel=SAMPLING,
    ),
]
TopKOption = Annotated[
    int | None,
    typer.Option(
        metavar="INT",
        help="Sampling: only from the K most probable tokens (0: all).",
        rich_help_panel=SAMPLING,
    ),
]
TopPOption = Annotated[
    float | None,
    typer.Option(
        metavar="FLOAT",
        help="Sampling: only from the fewest tokens holding this probability.",
        rich_help_panel=SAMPLING,
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        metavar="INT",
        help="Sampling: the same seed, text and K give the same samples.",
        rich_help_panel=SAMPLING,
    ),
]
ScoresOption = Annotated[
    bool,
    typer.Option(
        "--scores",
        help="Print each score before its translation, separated by a tab.",
        rich_help_panel=OUTPUT,
    ),
]
AttentionOption = Annotated[
    Path | None,
    typer.Option(metavar="PATH", help="Write attention matrices here (JSONL).", rich_help_panel=OUTPUT),
]
PlotAttentionOption = Annotated[
    Path | None,
    typer.Option(
        metavar="DIR", help="Write attention heatmap PNGs into this folder.", rich_help_panel=OUTPUT
    ),
]
PlotFirstOption = Annotated[
    int, typer.Option(min=0, metavar="INT", help="How many sentences to plot.", rich_help_panel=OUTPUT)
]
PiecesOption = Annotated[
    bool,
    typer.Option(
        "--pieces",
        help="Attention over subword pieces instead of words (export, plots).",
        rich_help_panel=OUTPUT,
    ),
]
DpiOption = Annotated[
    int, typer.Option(min=10, metavar="INT", help="Resolution of the heatmap PNGs.", rich_help_panel=OUTPUT)
]
QuantizeOption = Annotated[
    Literal["none", "int8"] | None,
    typer.Option(hidden=True, help="The old spelling of --precision int8.", rich_help_panel=SPEED),
]
PrefixesOption = Annotated[
    Path | None,
    typer.Option(
        metavar="PATH",
        help="Target prefixes, one a line beside the input's ('' for none).",
        rich_help_panel=STEERING,
    ),
]
ConstraintsOption = Annotated[
    Path | None,
    typer.Option(
        metavar="PATH",
        help='Lexical constraints, a JSON line per input line: {"constraints": [...], "avoid": [...]}.',
        rich_help_panel=STEERING,
    ),
]
MarkupOption = Annotated[
    bool,
    typer.Option(
        "--markup",
        help="The input holds inline tags (<b>..</b>, <br/>, {0}): put them into the output.",
        rich_help_panel=STEERING,
    ),
]
ShortlistOption = Annotated[
    Path | None,
    typer.Option(
        metavar="PATH",
        help="A lexical shortlist (nmt shortlist): faster, outputs may change.",
        rich_help_panel=SPEED,
    ),
]
InputFormatOption = Annotated[
    Literal["text", "jsonl", "tsv"],
    typer.Option(
        help='jsonl: {"text": ..., "constraints": [...], "avoid": [...]} a line; tsv: the text, then '
        "a tab before each phrase to include.",
        rich_help_panel=STEERING,
    ),
]
EngineOption = Annotated[
    Literal["torch", "onnx"],
    typer.Option(
        help="torch, or onnxruntime with an nmt export directory as --model.", rich_help_panel=SPEED
    ),
]


@app.command()
@user_errors
def translate(
    model: ModelsOption,
    input: InputOption = None,
    output: OutputOption = None,
    beam: BeamOption = None,
    batch_size: BatchSizeOption = None,
    batch_type: BatchTypeOption = None,
    rows: RowsOption = None,
    alpha: AlphaOption = None,
    length_penalty: LengthPenaltyOption = None,
    coverage: CoverageOption = None,
    min_len: MinLenOption = None,
    max_len: MaxLenOption = None,
    max_len_ratio: MaxLenRatioOption = None,
    max_len_add: MaxLenAddOption = None,
    no_repeat_ngram: NoRepeatNgramOption = None,
    no_unk: NoUnkOption = False,
    sample: SampleOption = None,
    temperature: TemperatureOption = None,
    top_k: TopKOption = None,
    top_p: TopPOption = None,
    seed: SeedOption = None,
    nbest: NbestOption = 1,
    scores: ScoresOption = False,
    attention: AttentionOption = None,
    plot_attention: PlotAttentionOption = None,
    plot_first: PlotFirstOption = 5,
    pieces: PiecesOption = False,
    dpi: DpiOption = 100,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    quantize: QuantizeOption = None,
    engine: EngineOption = "torch",
    prefixes: PrefixesOption = None,
    constraints: ConstraintsOption = None,
    markup: MarkupOption = False,
    shortlist: ShortlistOption = None,
    input_format: InputFormatOption = "text",
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
    quiet: QuietOption = False,
) -> None:
    """Translate text with a trained model (nmt translate -m runs/toy -i in.txt -o out.txt)."""
    from dataclasses import fields

    from nmt.commands.translate import DecodeOptions, OutputOptions, Steering, run_translate
    from nmt.decode.translator import renamed_quantize

    use_plugins(plugin, trust_plugin)
    given = locals()  # each option is the field of the same name of DecodeOptions or OutputOptions
    decode = DecodeOptions(**{f.name: given[f.name] for f in fields(DecodeOptions)})
    opts = OutputOptions(**{f.name: given[f.name] for f in fields(OutputOptions) if f.name in given})
    steering = Steering(prefixes, constraints, markup, shortlist, input_format)
    precision, renamed = renamed_quantize(quantize, precision)
    if renamed:
        typer.echo(renamed, err=True)
    summary = run_translate(model, input, output, decode, opts, device, precision, engine, quiet, steering)
    if summary:
        typer.echo(summary, err=True)


@app.command()
@user_errors
def backtranslate(
    model: Annotated[Path, model_option("The reverse model: it translates the monolingual text.")],
    mono: Annotated[
        Path,
        typer.Option(
            metavar="PATH",
            help="Monolingual text in the reverse model's source language.",
            rich_help_panel=MODEL,
        ),
    ],
    output: Annotated[Path, output_option("New folder for the synthetic corpus.")],
    parallel: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="Also copy this corpus folder's splits, the synthetic pairs after its own."
        ),
    ] = None,
    split: Annotated[str, typer.Option(metavar="NAME", help="The training split's name.")] = "train",
    tag: Annotated[
        str, typer.Option(metavar="TAG", help="Put before each synthetic source ('' for none).")
    ] = "<BT>",
    beam: BeamOption = None,
    batch_size: BatchSizeOption = None,
    rows: RowsOption = None,
    sample: SampleOption = None,
    temperature: TemperatureOption = None,
    top_k: TopKOption = None,
    top_p: TopPOption = None,
    seed: SeedOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
    quiet: QuietOption = False,
) -> None:
    """Back-translate monolingual text into a tagged synthetic corpus
    (nmt backtranslate -m runs/en-de --mono mono.en --sample --parallel data/m30k -o data/m30k-bt)."""
    from nmt.commands.backtranslate import run_backtranslate
    from nmt.commands.translate import DecodeOptions

    use_plugins(plugin, trust_plugin)
    decode = DecodeOptions(
        beam=beam,
        batch_size=batch_size,
        rows=rows,
        sample=sample,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )
    summary = run_backtranslate(model, mono, output, decode, tag, parallel, split, device, quiet, precision)
    typer.echo(summary, err=True)


@app.command()
@user_errors
def shortlist(
    model: Annotated[Path, model_option("The model the shortlist is for (its vocabularies).")],
    src: Annotated[Path, typer.Option(metavar="PATH", help="Training sources, one a line.")],
    tgt: Annotated[Path, typer.Option(metavar="PATH", help="Their translations, line-aligned.")],
    output: Annotated[Path, output_option("The shortlist file to write (.npz).")],
    best: Annotated[
        int, typer.Option(min=1, metavar="INT", help="Target pieces kept per source piece, likeliest first.")
    ] = 20,
    frequent: Annotated[
        int, typer.Option(min=0, metavar="INT", help="The most frequent target pieces, always allowed.")
    ] = 100,
    iterations: Annotated[int, typer.Option(min=1, metavar="INT", help="IBM Model 1 EM iterations.")] = 5,
    max_lines: Annotated[
        int, typer.Option(min=1, metavar="INT", help="Read at most this many pairs (memory grows with them).")
    ] = 500_000,
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
) -> None:
    """Build a lexical shortlist for fast decoding, from parallel text
    (nmt shortlist -m runs/m30k --src train.de --tgt train.en -o runs/m30k/shortlist.npz)."""
    from nmt.commands.shortlist import run_shortlist

    use_plugins(plugin, trust_plugin)
    typer.echo(run_shortlist(model, src, tgt, output, best, frequent, iterations, max_lines))
