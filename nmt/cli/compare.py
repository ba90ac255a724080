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
    output: Annotated[
        Path, output_option("Folder of results.json, report.md, its figures and the translations (hyps/).")
    ] = Path("compare"),
    runs: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Where the runs train, one folder each (default: OUTPUT/runs)."),
    ] = None,
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
    split: Annotated[
        Literal["test", "valid"], typer.Option(help="The split of the config to score.")
    ] = "test",
    checkpoint: Annotated[
        Literal["best", "averaged", "last"], typer.Option(help="Which checkpoint of each run decodes.")
    ] = "best",
    join: Annotated[
        str | None,
        typer.Option(
            metavar="K,K",
            help="Length stress test: also score the split with every K consecutive lines joined into one.",
        ),
    ] = None,
    extra: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME=PREFIX",
            help="Also score the parallel files PREFIX.<src_lang> and PREFIX.<tgt_lang> (repeatable), "
            "e.g. iwslt=data/iwslt14/valid.",
        ),
    ] = None,
    heatmap: Annotated[
        int | None,
        typer.Option(
            min=1, metavar="LINE", help="Draw every variant's attention forced onto this line's reference."
        ),
    ] = None,
    beam: Annotated[
        int | None, typer.Option(min=1, metavar="INT", help="Beam size (default: the config's).")
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="The variant the others are tested against (default: the first)."),
    ] = None,
    bootstrap: Annotated[
        int,
        typer.Option(
            min=40, metavar="INT", help="Bootstrap resamples, for the paired tests and the 95% intervals."
        ),
    ] = 1000,
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
    from nmt.compare.results import FORMAT
    from nmt.errors import NMTError

    if report_only:
        path = output / "results.json"
        if not path.is_file():
            raise NMTError(f"{path}: no results to report; run nmt compare without --report-only first")
        results = json.loads(path.read_text(encoding="utf-8"))
        if results.get("format") != FORMAT:
            raise NMTError(f"{path}: written by an older nmt compare; run nmt compare again to rebuild it")
        echo_written(write_report(results, output, results["command"]))
        return
    if config is None:
        raise NMTError("nmt compare needs the base config: -c FILE|NAME")
    from nmt.compare.sets import check_line, evaluation_sets, parse_extra, parse_join

    plan = make_plan(config, set_ or [], system or [], vary or [], seeds, budget, runs or output / "runs")
    names = [v.name for v in plan.variants]
    if baseline is not None and baseline not in names:
        raise NMTError(
            f"--baseline {baseline!r}: not a variant; the variants are {', '.join(map(repr, names))}"
        )
    sets = evaluation_sets(plan.run_config(plan.runs[0]), split, parse_join(join), parse_extra(extra or []))
    check_line(sets[0], heatmap)
    from nmt.compare.decoding import DecodeSettings
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
    decode = DecodeSettings(checkpoint=checkpoint, beam=beam, device=device, heatmap=heatmap)
    settings = Settings(decode=decode, bootstrap=bootstrap)
    results = collect(plan, sets, settings, baseline or names[0], output / "hyps", typer.echo)
    given = {  # what changes the results, as given (None or a default: left out)
        "--seeds": seeds,
        "--budget": budget,
        "--runs": runs,
        "--split": split,
        "--checkpoint": checkpoint,
        "--beam": beam,
        "--join": join,
        "--heatmap": heatmap,
        "--baseline": baseline,
        "--bootstrap": bootstrap,
    }
    defaults = {"--seeds": "1", "--split": "test", "--checkpoint": "best", "--bootstrap": 1000}
    words = ["nmt", "compare", "-c", config, *(f"--set={s}" for s in set_ or [])]
    words += [*(f"--system={s}" for s in system or []), *(f"--vary={v}" for v in vary or [])]
    words += [*(f"--extra={e}" for e in extra or [])]
    for flag, value in given.items():
        if value is not None and value != defaults.get(flag):
            words += [flag, str(value)]
    results["command"] = shlex.join([*words, "-o", str(output)])
    echo_written(write_results(results, output))
    echo_written(write_report(results, output, results["command"]))
