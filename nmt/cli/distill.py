"""`nmt distill`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from nmt.cli.app import (
    MODEL,
    TRAINING,
    ConfigOption,
    DeviceOption,
    PluginOption,
    PrecisionOption,
    QuietOption,
    SetOption,
    TrustPluginOption,
    app,
    output_option,
    use_plugins,
    user_errors,
)
from nmt.cli.translate import BatchSizeOption, BeamOption, RowsOption

TeacherOption = Annotated[
    list[Path],
    typer.Option(
        metavar="RUN_OR_CKPT",
        help="The teacher: a run, checkpoint or release (twice or more: an ensemble).",
        rich_help_panel=MODEL,
    ),
]
StageOption = Annotated[
    Literal["all", "data", "train"],
    typer.Option(
        help="data: only the distilled corpus; train: only the student (on a corpus made before).",
        rich_help_panel=TRAINING,
    ),
]
ReferencesOption = Annotated[
    float,
    typer.Option(
        min=0.0,
        metavar="WEIGHT",
        help="Also train on the reference pairs, weighted against the distilled ones (1: as many).",
        rich_help_panel=TRAINING,
    ),
]
MaxRatioOption = Annotated[
    float,
    typer.Option(
        min=1.0, metavar="R", help="Drop outputs whose word count is over R times the source's or under 1/R."
    ),
]
MaxRepeatsOption = Annotated[
    int, typer.Option(min=1, metavar="N", help="Drop outputs holding a word trigram more than N times.")
]
ChunkOption = Annotated[
    int,
    typer.Option(min=1, metavar="LINES", help="Lines translated between two saves (a kill loses one chunk)."),
]


@app.command()
@user_errors
def distill(
    teacher: TeacherOption,
    config: ConfigOption,
    output: Annotated[Path, output_option("Folder of the distilled corpus, the student's config and run.")],
    set_: SetOption = None,
    stage: StageOption = "all",
    references: ReferencesOption = 0.0,
    max_ratio: MaxRatioOption = 3.0,
    max_repeats: MaxRepeatsOption = 2,
    chunk: ChunkOption = 5000,
    beam: BeamOption = None,
    batch_size: BatchSizeOption = None,
    rows: RowsOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
    quiet: QuietOption = False,
) -> None:
    """Sequence-level knowledge distillation: the teacher translates the student's training
    sources (beam 5 unless --beam), then the student trains on its outputs (nmt distill
    --teacher runs/m30k -c multi30k-small.yaml --set data.dir=data/multi30k -o runs/m30k-distilled)."""
    from nmt.commands.distill import Filters, Plan, StageStoppedError, run_distill
    from nmt.commands.translate import DecodeOptions

    use_plugins(plugin, trust_plugin)
    plan = Plan(
        teachers=teacher,
        config=config,
        overrides=set_ or [],
        out=output,
        decode=DecodeOptions(beam=beam, batch_size=batch_size, rows=rows),
        filters=Filters(max_ratio, max_repeats),
        references=references,
        chunk=chunk,
        device=device,
        precision=precision,
        plugins=plugin or [],
    )
    say = (lambda line: None) if quiet else (lambda line: typer.echo(line, err=True))
    try:
        typer.echo(run_distill(plan, stage, say, quiet))
    except StageStoppedError as stopped:
        typer.echo(str(stopped), err=True)
        raise typer.Exit(stopped.code) from None
