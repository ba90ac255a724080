"""`nmt compare`."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated, Literal

import typer

from nmt.cli.app import (
    DeviceOption,
    OptionalConfigOption,
    SetOption,
    app,
    echo_written,
    output_option,
    user_errors,
)


@app.command()
@user_errors
def compare(
    config: OptionalConfigOption = None,
    output: Annotated[Path, output_option("Folder of the runs, results.json and report.md.")] = Path(
        "compare"
    ),
    set_: SetOption = None,
    system: Annotated[
        list[str] | None,
        typer.Option(
            metavar="'NAME: KEY=V, KEY=V'",
            help="A named variant of the config (repeatable), e.g. 'bahdanau: model.decoder.style=bahdanau, "
            "model.attention.type=bahdanau'.",
        ),
    ] = None,
    vary: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=V1,V2",
            help="Values to try for a key (repeatable; several --vary give every combination), e.g. "
            "model.attention.type=dot,general.",
        ),
    ] = None,
    seeds: Annotated[str, typer.Option(metavar="INT,INT", help="Training seeds of every variant.")] = "1",
    budget: Annotated[
        str | None,
        typer.Option(
            metavar="TIME|STEPS", help="Per run: 20m, 90s, 1.5h or 3000steps (default: the config's)."
        ),
    ] = None,
    jobs: Annotated[int, typer.Option(min=1, metavar="INT", help="Runs trained at once.")] = 1,
    threads: Annotated[
        int | None, typer.Option(min=1, metavar="INT", help="Threads per run (default: CPU cores / jobs).")
    ] = None,
    split: Annotated[str, typer.Option(metavar="NAME", help="The split to score: test or valid.")] = "test",
    checkpoint: Annotated[
        Literal["best", "averaged", "last"], typer.Option(help="Which checkpoint of each run decodes.")
    ] = "best",
    beam: Annotated[
        int | None, typer.Option(min=1, metavar="INT", help="Beam size (default: the config's).")
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="The variant the others are tested against (default: the first)."),
    ] = None,
    bootstrap: Annotated[int, typer.Option(min=1, metavar="INT", help="Paired bootstrap resamples.")] = 1000,
    device: DeviceOption = "auto",
    report_only: Annotated[
        bool, typer.Option("--report-only", help="Redraw report.md and its figures from results.json.")
    ] = False,
) -> None:
    """Train variants of one config under one budget and several seeds, then compare them fairly
    (nmt compare -c base.yaml --vary model.attention.type=dot,general --seeds 1,2,3 --budget 20m -o cmp)."""
    import json

    from nmt.compare.plan import plan as make_plan
    from nmt.compare.report import write_report
    from nmt.errors import NMTError

    if report_only:
        path = output / "results.json"
        if not path.is_file():
            raise NMTError(f"{path}: no results to report; run nmt compare without --report-only first")
        results = json.loads(path.read_text(encoding="utf-8"))
        echo_written(write_report(results, output, results["command"]))
        return
    if config is None:
        raise NMTError("nmt compare needs the base config: -c FILE|NAME")
    plan = make_plan(config, set_ or [], system or [], vary or [], seeds, budget, output)
    names = [v.name for v in plan.variants]
    if baseline is not None and baseline not in names:
        raise NMTError(
            f"--baseline {baseline!r}: not a variant; the variants are {', '.join(map(repr, names))}"
        )
    from nmt.compare.results import Settings, collect, write_results
    from nmt.compare.runner import train_all

    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    typer.echo(
        f"{len(plan.runs)} runs: {len(names)} variants x {len(plan.seeds)} seeds, "
        f"{jobs} at a time, {threads} threads each"
    )
    outcomes = train_all(plan, jobs, threads, typer.echo)
    failed = [o for o in outcomes if o.code != 0]
    if failed:
        raise NMTError(
            f"{len(failed)} of {len(outcomes)} runs failed (first: {failed[0].log}); "
            "fix the cause and run the same command again to resume"
        )
    settings = Settings(split=split, checkpoint=checkpoint, beam=beam, bootstrap=bootstrap, device=device)
    results = collect(plan, settings, baseline or names[0], typer.echo)
    words = ["nmt", "compare", "-c", config, *(f"--set={s}" for s in set_ or [])]
    words += [*(f"--system={s}" for s in system or []), *(f"--vary={v}" for v in vary or [])]
    words += ["--seeds", seeds, *(["--budget", budget] if budget else []), "-o", str(output)]
    results["command"] = shlex.join(words)
    echo_written(write_results(results, output))
    echo_written(write_report(results, output, results["command"]))
