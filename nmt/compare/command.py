"""`nmt compare` as a function: the options in, the runs trained, decoded, scored and reported, or
(`report_only`) the report redrawn from results.json."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from nmt.compare.decoding import DecodeSettings
from nmt.compare.plan import Plan, check_baseline
from nmt.compare.plan import plan as make_plan
from nmt.compare.report import write_report
from nmt.compare.results import Settings, collect, read_results, write_results
from nmt.compare.runner import train_all
from nmt.compare.sets import check_line, evaluation_sets, parse_extra, parse_join
from nmt.errors import NMTError

# the options that change the results: the command line written into them names each one given
RESULT_OPTIONS = (
    "seeds",
    "budget",
    "runs",
    "split",
    "checkpoint",
    "beam",
    "join",
    "heatmap",
    "baseline",
    "bootstrap",
)


@dataclass(frozen=True)
class CompareOptions:
    """Everything `nmt compare` takes, with the command line's defaults (see `nmt compare --help`)."""

    config: str | None = None  # the base config, a file or a built-in name
    output: Path = Path("compare")  # results.json, report.md, its figures, hyps/
    runs: Path | None = None  # where the runs train (None: output/runs)
    sets: Sequence[str] = ()  # --set overrides of every variant
    systems: Sequence[str] = ()  # 'NAME: KEY=V, KEY=V'
    vary: Sequence[str] = ()  # KEY=V1,V2
    seeds: str = "1"
    budget: str | None = None  # per run: 20m, 90s, 1.5h or 3000steps (None: the config's)
    jobs: int = 1  # runs trained at once
    threads: int | None = None  # per run (None: CPU cores / jobs)
    split: str = "test"
    checkpoint: str = "best"  # best, averaged or last
    join: str | None = None  # K,K: the split with every K lines joined, scored too
    extra: Sequence[str] = ()  # NAME=PREFIX file pairs, scored too
    heatmap: int | None = None  # the split's line every variant's attention is forced onto
    beam: int | None = None  # None: the config's
    baseline: str | None = None  # None: the first variant
    bootstrap: int = 1000  # resamples
    device: str = "auto"
    report_only: bool = False  # only redraw report.md and its figures from results.json
    plugins: Sequence[Path] = ()  # --plugin files of every run (a plugin system beside built-ins)


def run_compare(options: CompareOptions, say: Callable[[str], None]) -> dict:
    """The whole `nmt compare`; `say` gets every line to print. Returns the results (what
    results.json keeps)."""
    if options.report_only:
        results = read_results(options.output)
    else:
        results = train_and_score(options, say)
        say(f"wrote {write_results(results, options.output)}")
    say(f"wrote {write_report(results, options.output, results['command'])}")
    return results


def train_and_score(options: CompareOptions, say: Callable[[str], None]) -> dict:
    """Every input checked (configs, baseline, evaluation sets) before the first run trains; then
    the runs trained, decoded and scored, and the command that reproduces the results."""
    if options.config is None:
        raise NMTError("nmt compare needs the base config: -c FILE|NAME")
    runs_dir = options.runs or options.output / "runs"
    plan = make_plan(
        options.config,
        options.sets,
        options.systems,
        options.vary,
        options.seeds,
        options.budget,
        runs_dir,
        options.plugins,
    )
    baseline = check_baseline(plan, options.baseline)
    join, extra = parse_join(options.join), parse_extra(options.extra)
    sets = evaluation_sets(plan.run_config(plan.runs[0]), options.split, join, extra)
    check_line(sets[0], options.heatmap)
    train(plan, options.jobs, options.threads, say)
    decode = DecodeSettings(
        checkpoint=options.checkpoint, beam=options.beam, device=options.device, heatmap=options.heatmap
    )
    settings = Settings(decode=decode, bootstrap=options.bootstrap)
    results = collect(plan, sets, settings, baseline, options.output / "hyps", say)
    results["command"] = command_line(options)
    return results


def train(plan: Plan, jobs: int, threads: int | None, say: Callable[[str], None]) -> None:
    """Train every run, `jobs` at a time with `threads` each (None: the CPU cores shared out)."""
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    say(
        f"{len(plan.runs)} runs: {len(plan.variants)} variants x {len(plan.seeds)} seeds, "
        f"{jobs} at a time, {threads} threads each"
    )
    outcomes = train_all(plan, jobs, threads, say)
    failed = [o for o in outcomes if o.code != 0]
    if failed:
        raise NMTError(
            f"{len(failed)} of {len(outcomes)} runs failed (first: {failed[0].log}); "
            "fix the cause and run the same command again to resume"
        )


def command_line(options: CompareOptions) -> str:
    """The `nmt compare` command that reproduces the results: the config, every override and
    variant, and each option that changes the results and was given other than its default."""
    defaults = {f.name: f.default for f in fields(CompareOptions)}
    words = ["nmt", "compare", "-c", options.config, *(f"--set={s}" for s in options.sets)]
    words += [*(f"--system={s}" for s in options.systems), *(f"--vary={v}" for v in options.vary)]
    words += [*(f"--extra={e}" for e in options.extra), *(f"--plugin={p}" for p in options.plugins)]
    for name in RESULT_OPTIONS:
        value = getattr(options, name)
        if value is not None and value != defaults[name]:
            words += [f"--{name}", str(value)]
    return shlex.join([*words, "-o", str(options.output)])
