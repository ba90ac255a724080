"""`nmt compare`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from nmt.cli.app import (
    DeviceOption,
    OptionalConfigOption,
    PluginOption,
    SetOption,
    app,
    output_option,
    use_plugins,
    user_errors,
)

OutputOption = Annotated[
    Path, output_option("Folder of results.json, report.md, its figures and the translations (hyps/).")
]
RunsOption = Annotated[
    Path | None,
    typer.Option(metavar="DIR", help="Where the runs train, one folder each (default: OUTPUT/runs)."),
]
SystemOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="'NAME: KEY=V, KEY=V'",
        help="A named variant of the config (repeatable), e.g. 'bahdanau: model.decoder.style=bahdanau, "
        "model.attention.type=bahdanau'.",
    ),
]
VaryOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="KEY=V1,V2",
        help="Values to try for a key (repeatable; several --vary give every combination), e.g. "
        "model.attention.type=dot,general.",
    ),
]
SeedsOption = Annotated[str, typer.Option(metavar="INT,INT", help="Training seeds of every variant.")]
BudgetOption = Annotated[
    str | None,
    typer.Option(metavar="TIME|STEPS", help="Per run: 20m, 90s, 1.5h or 3000steps (default: the config's)."),
]
JobsOption = Annotated[int, typer.Option(min=1, metavar="INT", help="Runs trained at once.")]
ThreadsOption = Annotated[
    int | None, typer.Option(min=1, metavar="INT", help="Threads per run (default: CPU cores / jobs).")
]
SplitOption = Annotated[Literal["test", "valid"], typer.Option(help="The split of the config to score.")]
CheckpointOption = Annotated[
    Literal["best", "averaged", "last"], typer.Option(help="Which checkpoint of each run decodes.")
]
JoinOption = Annotated[
    str | None,
    typer.Option(
        metavar="K,K",
        help="Length stress test: also score the split with every K consecutive lines joined into one.",
    ),
]
ExtraOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="NAME=PREFIX",
        help="Also score the parallel files PREFIX.<src_lang> and PREFIX.<tgt_lang> (repeatable), "
        "e.g. iwslt=data/iwslt14/valid.",
    ),
]
HeatmapOption = Annotated[
    int | None,
    typer.Option(
        min=1, metavar="LINE", help="Draw every variant's attention forced onto this line's reference."
    ),
]
BeamOption = Annotated[
    int | None, typer.Option(min=1, metavar="INT", help="Beam size (default: the config's).")
]
BaselineOption = Annotated[
    str | None,
    typer.Option(metavar="NAME", help="The variant the others are tested against (default: the first)."),
]
BootstrapOption = Annotated[
    int,
    typer.Option(
        min=40, metavar="INT", help="Bootstrap resamples, for the paired tests and the 95% intervals."
    ),
]
ReportOnlyOption = Annotated[
    bool, typer.Option("--report-only", help="Redraw report.md and its figures from results.json.")
]


@app.command()
@user_errors
def compare(
    config: OptionalConfigOption = None,
    output: OutputOption = Path("compare"),
    runs: RunsOption = None,
    set_: SetOption = None,
    system: SystemOption = None,
    vary: VaryOption = None,
    seeds: SeedsOption = "1",
    budget: BudgetOption = None,
    jobs: JobsOption = 1,
    threads: ThreadsOption = None,
    split: SplitOption = "test",
    checkpoint: CheckpointOption = "best",
    join: JoinOption = None,
    extra: ExtraOption = None,
    heatmap: HeatmapOption = None,
    beam: BeamOption = None,
    baseline: BaselineOption = None,
    bootstrap: BootstrapOption = 1000,
    device: DeviceOption = "auto",
    report_only: ReportOnlyOption = False,
    plugin: PluginOption = None,
) -> None:
    """Train variants of one config under one budget and several seeds, then compare them fairly
    (nmt compare -c base.yaml --vary model.attention.type=dot,general --seeds 1,2,3 --budget 20m -o cmp)."""
    from nmt.compare.command import CompareOptions, run_compare

    use_plugins(plugin)
    options = CompareOptions(
        config=config,
        output=output,
        runs=runs,
        sets=set_ or (),
        systems=system or (),
        vary=vary or (),
        seeds=seeds,
        budget=budget,
        jobs=jobs,
        threads=threads,
        split=split,
        checkpoint=checkpoint,
        join=join,
        extra=extra or (),
        heatmap=heatmap,
        beam=beam,
        baseline=baseline,
        bootstrap=bootstrap,
        device=device,
        report_only=report_only,
        plugins=tuple(plugin or ()),
    )
    run_compare(options, typer.echo)
