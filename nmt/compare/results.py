"""Decode and score a comparison's runs, then compare the variants two ways: by the spread across
training seeds (does every seed of one beat every seed of the other?) and by the paired bootstrap
over test sentences, seed by seed. A difference both agree on is one to report; a bootstrap
p-value alone says nothing about how much another training run would move the score.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from nmt.compare.decoding import DecodeSettings, decode_run
from nmt.compare.plan import Plan, Run, Variant
from nmt.compare.runner import read_peak
from nmt.compare.sets import EvalSet, length_groups
from nmt.errors import NMTError
from nmt.evaluate.scoring import (
    DEFAULT_BUCKETS,
    EvalOptions,
    bleu_interval,
    bucket_indices,
    bucket_labels,
    metrics,
    paired_p_values,
)
from nmt.fileio import atomic_write_text
from nmt.jsonvalues import NUMBER, check_value, read_json
from nmt.rundir import read_metrics

SIGNIFICANT = 0.05
SET_METRICS = ("BLEU", "chrF", "length_ratio")  # per evaluation set, spread over seeds
FORMAT = 3  # of results.json: what `report` reads; older files are rebuilt by running nmt compare
REBUILD = "run nmt compare again to rebuild it"
# What `report` reads of results.json (`nmt.jsonvalues` shapes): a hand-edited file is refused in
# one line before a figure is drawn.
OPTIONAL = (*NUMBER, type(None))
SPREAD = {"mean": NUMBER, "sd": OPTIONAL, "min": NUMBER, "max": NUMBER}
FACTS = {"steps": int, "train_seconds": NUMBER, "train_tokens_per_s": OPTIONAL, "train_peak_mib": OPTIONAL}
SHAPE = {
    "command": str,
    "config": str,
    "common_overrides": [str],
    "seeds": [int],
    "split": str,
    "sentences": int,
    "checkpoint": str,
    "sets": [{"name": str, "origin": str, "sentences": int, "source_words": NUMBER}],
    "lengths": {str: {"sets": [str], "labels": [str], "sentences": [int]}},
    "variants": [
        {
            "name": str,
            "parameters": int,
            "BLEU": SPREAD,
            "chrF": SPREAD,
            "scores": {str: dict.fromkeys(SET_METRICS, SPREAD)},
            "lengths": {str: [{"bleu": OPTIONAL, "ci": OPTIONAL}]},
            **FACTS,
            "decode_sentences_per_s": NUMBER,
        }
    ],
    "comparisons": [
        {
            "variant": str,
            "bleu_difference": NUMBER,
            "seed_ranges_apart": (bool, type(None)),
            "p_values": {str: NUMBER},
            "verdict": str,
        }
    ],
    "bootstrap": {"resamples": int, "significance_level": NUMBER},
    "heatmaps": [
        {
            "variant": str,
            "line": int,
            "source": str,
            "reference": str,
            "matrix": [[NUMBER]],
            "source_words": [str],
            "target_words": [str],
        }
    ],
    "runs": [
        {
            "variant": str,
            "seed": int,
            "BLEU": NUMBER,
            "chrF": NUMBER,
            **FACTS,
            "best_valid_bleu": OPTIONAL,
            "threads": int,
            "curve": [{"seconds": NUMBER, "step": NUMBER, "valid_bleu": NUMBER}],
        }
    ],
    "baseline": str,
}


@dataclass(frozen=True)
class Settings:
    decode: DecodeSettings = DecodeSettings()
    buckets: tuple[int, ...] = DEFAULT_BUCKETS  # by source words
    bootstrap: int = 1000  # resamples, for the paired tests and each bucket's interval


def training_facts(run: Run) -> dict:
    """Steps, training time, speed and validation curve of a run, from its metrics.jsonl."""
    entries = read_metrics(run.dir)
    valid = [(m["time"], m["step"], m["valid_bleu"]) for m in entries if "valid_bleu" in m and "time" in m]
    speeds = [m["tgt_tokens_per_s"] for m in entries if "tgt_tokens_per_s" in m]
    return {
        "steps": max((m["step"] for m in entries), default=0),
        "train_seconds": max((m["time"] for m in entries if "time" in m), default=0.0),
        "train_tokens_per_s": round(statistics.median(speeds)) if speeds else None,
        "best_valid_bleu": max((b for _, _, b in valid), default=None),
        "curve": [{"seconds": t, "step": s, "valid_bleu": round(b, 2)} for t, s, b in valid],
    }


def spread(values: list[float]) -> dict:
    return {
        "mean": round(statistics.mean(values), 2),
        "sd": round(statistics.stdev(values), 2) if len(values) > 1 else None,
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def verdict(separated: bool | None, significant: int, seeds: int) -> str:
    """How far a difference can be trusted, in words the report prints."""
    everywhere = seeds > 0 and significant == seeds
    if separated is None:
        return "bootstrap only (one seed: no spread)" if everywhere else "not significant (one seed)"
    if separated and everywhere:
        return "survives both"
    if separated:
        return "seeds only"
    return "bootstrap only" if everywhere else "neither"


def compare_to(baseline: dict, other: dict, runs: dict, refs: list[str], opts: EvalOptions) -> dict:
    """The other variant against the baseline: the mean difference, whether their seed ranges
    are apart, and the paired bootstrap p-value of BLEU for each seed both have."""
    base, mine = baseline["BLEU"], other["BLEU"]
    separated = None
    if len(baseline["seeds"]) > 1 and len(other["seeds"]) > 1:
        separated = mine["min"] > base["max"] or mine["max"] < base["min"]
    p_values = {}
    for seed in sorted(set(baseline["seeds"]) & set(other["seeds"])):
        pair = {"baseline": runs[baseline["name"], seed]["hyps"], "other": runs[other["name"], seed]["hyps"]}
        p_values[str(seed)] = round(
            paired_p_values(pair, [refs], {"BLEU": metrics(opts)["BLEU"]}, opts)["other"]["BLEU"], 4
        )
    significant = sum(p < SIGNIFICANT for p in p_values.values())
    return {
        "variant": other["name"],
        "baseline": baseline["name"],
        "bleu_difference": round(mine["mean"] - base["mean"], 2),
        "seed_ranges_apart": separated,
        "p_values": p_values,
        "verdict": verdict(separated, significant, len(p_values)),
    }


def group_lines(members: list[EvalSet], hyps: dict[str, list[str]] | None = None) -> tuple[list, list, list]:
    """A length group's sources, references and (with `hyps`) translations, set after set."""
    return (
        [line for s in members for line in s.sources],
        [line for s in members for line in s.refs],
        [line for s in members for line in hyps[s.name]] if hyps else [],
    )


def score_run(hyps: dict[str, list[str]], sets: list[EvalSet], opts: EvalOptions) -> dict:
    """Corpus BLEU, chrF and the length ratio (output / reference tokens, as BLEU counts them:
    below 1 a model stops early) on every set, and per length group the BLEU of each
    source-length bucket with the half-width of its 95% bootstrap interval over lines."""
    chosen = metrics(opts)
    bleu, chrf = chosen["BLEU"], chosen["chrF"]
    scores = {}
    for s in sets:
        corpus = bleu.corpus_score(hyps[s.name], [s.refs])
        scores[s.name] = {
            "BLEU": round(corpus.score, 2),
            "chrF": round(chrf.corpus_score(hyps[s.name], [s.refs]).score, 2),
            "length_ratio": round(corpus.sys_len / max(1, corpus.ref_len), 3),
        }
    lengths = {}
    for group, members in length_groups(sets).items():
        src, refs, out = group_lines(members, hyps)
        cells = []
        for idx in bucket_indices(src, opts.buckets):
            sub_out, sub_refs = [out[i] for i in idx], [[refs[i] for i in idx]]
            cells.append(
                {
                    "bleu": round(bleu.corpus_score(sub_out, sub_refs).score, 2),
                    "ci": round(bleu_interval(sub_out, sub_refs, opts.bootstrap, opts), 2),
                }
                if idx
                else {"bleu": None, "ci": None}
            )
        lengths[group] = cells
    return {"scores": scores, "lengths": lengths}


def length_summary(sets: list[EvalSet], bounds: tuple[int, ...]) -> dict:
    """Each length group's sets, bucket labels and line counts (the same for every run)."""
    return {
        group: {
            "sets": [s.name for s in members],
            "labels": bucket_labels(bounds),
            "sentences": [len(idx) for idx in bucket_indices(group_lines(members)[0], bounds)],
        }
        for group, members in length_groups(sets).items()
    }


def mean_lengths(runs: list[dict], group: str) -> list[dict]:
    """A variant's BLEU per bucket and its interval's half-width, each the mean over seeds."""
    cells = []
    for seeds in zip(*(r["lengths"][group] for r in runs), strict=True):
        bleus, cis = [c["bleu"] for c in seeds], [c["ci"] for c in seeds]
        cells.append(
            {
                "bleu": None if None in bleus else round(statistics.mean(bleus), 2),
                "ci": None if None in cis else round(statistics.mean(cis), 2),
            }
        )
    return cells


def heatmaps(plan: Plan, runs: dict) -> list[dict]:
    """The first seed's forced attention of every variant that has attention weights."""
    panels = []
    for variant in plan.variants:
        view = runs[variant.name, plan.seeds[0]].get("heatmap")
        if view and any(any(row) for row in view["matrix"]):
            panels.append({"variant": variant.name, **view})
    return panels


def collect(
    plan: Plan,
    sets: list[EvalSet],
    settings: Settings,
    baseline: str,
    hyps_dir: Path,
    say: Callable[[str], None],
) -> dict:
    """Decode and score every run on every set and compare the variants; the dict `report`
    renders and `results.json` keeps. Translations are cached in `hyps_dir`, one folder per run;
    the forced attention is the first seed's."""
    main = sets[0]
    opts = EvalOptions(buckets=settings.buckets, bootstrap=settings.bootstrap)
    runs: dict[tuple[str, int], dict] = {}
    for run in plan.runs:
        decode = settings.decode if run.seed == plan.seeds[0] else replace(settings.decode, heatmap=None)
        cache = hyps_dir / run.variant.slug / f"seed{run.seed}"
        runs[run.variant.name, run.seed] = entry = run_entry(run, sets, decode, cache, opts)
        say(
            f"{run.variant.name}, seed {run.seed}: "
            + ", ".join(f"{k} {v['BLEU']:.2f}" for k, v in entry["scores"].items())
        )
    variants = [
        variant_entry(variant, [runs[variant.name, seed] for seed in plan.seeds], plan.seeds, sets)
        for variant in plan.variants
    ]
    base = next((v for v in variants if v["name"] == baseline), variants[0])
    return {
        "format": FORMAT,
        "config": plan.config,
        "common_overrides": list(plan.common),
        "seeds": list(plan.seeds),
        "split": main.name,
        "sentences": len(main.refs),
        "checkpoint": settings.decode.checkpoint,
        "sets": [set_entry(s) for s in sets],
        "lengths": length_summary(sets, settings.buckets),
        "variants": variants,
        "comparisons": [compare_to(base, v, runs, main.refs, opts) for v in variants if v is not base],
        "bootstrap": {"resamples": settings.bootstrap, "seed": opts.seed, "significance_level": SIGNIFICANT},
        "heatmaps": heatmaps(plan, runs),
        "runs": [{k: v for k, v in r.items() if k not in ("hyps", "heatmap")} for r in runs.values()],
        "baseline": base["name"],
    }


def run_entry(run: Run, sets: list[EvalSet], decode: DecodeSettings, cache: Path, opts: EvalOptions) -> dict:
    """One run decoded (translations cached in `cache`) and scored: its scores on every set, its
    decoding and training facts, its forced attention, and its translations of the split."""
    main = sets[0]
    hyps, facts = decode_run(run, sets, decode, cache)
    scored = score_run(hyps, sets, opts)
    return {
        "variant": run.variant.name,
        "seed": run.seed,
        "dir": str(run.dir),
        **scored["scores"][main.name],
        **scored,
        "parameters": facts["parameters"],
        "beam": facts["beam"],
        "threads": facts["threads"],
        "device": facts["device"],
        "decode_sentences_per_s": facts["sets"][main.name]["sentences_per_s"],
        "heatmap": facts.get("heatmap"),
        "train_peak_mib": read_peak(run),
        **training_facts(run),
        "hyps": hyps[main.name],
    }


def variant_entry(variant: Variant, mine: list[dict], seeds: tuple[int, ...], sets: list[EvalSet]) -> dict:
    """A variant over its runs (`mine`, one per seed): scores spread over seeds, the mean BLEU by
    length, training and decoding facts."""
    speeds = [r["train_tokens_per_s"] for r in mine if r["train_tokens_per_s"]]
    peaks = [r["train_peak_mib"] for r in mine if r["train_peak_mib"]]
    return {
        "name": variant.name,
        "overrides": list(variant.overrides),
        "seeds": list(seeds),
        "parameters": mine[0]["parameters"],
        "BLEU": spread([r["BLEU"] for r in mine]),
        "chrF": spread([r["chrF"] for r in mine]),
        "scores": {
            s.name: {m: spread([r["scores"][s.name][m] for r in mine]) for m in SET_METRICS} for s in sets
        },
        "lengths": {group: mean_lengths(mine, group) for group in mine[0]["lengths"]},
        "steps": round(statistics.mean(r["steps"] for r in mine)),
        "train_seconds": round(statistics.mean(r["train_seconds"] for r in mine), 1),
        "train_tokens_per_s": round(statistics.mean(speeds)) if speeds else None,
        "train_peak_mib": round(max(peaks)) if peaks else None,
        "decode_sentences_per_s": round(statistics.mean(r["decode_sentences_per_s"] for r in mine), 1),
    }


def set_entry(s: EvalSet) -> dict:
    """An evaluation set as the report describes it."""
    return {
        "name": s.name,
        "origin": s.origin,
        "sentences": len(s.sources),
        "source_words": round(statistics.mean(len(x.split()) for x in s.sources), 1),
    }


def read_results(out: Path) -> dict:
    """results.json of the comparison in `out`, as this version of nmt compare writes it: JSON of
    the shape `report` reads, naming what it looks up by name and position."""
    path = out / "results.json"
    if not path.is_file():
        raise NMTError(f"{path}: no results to report; run nmt compare without --report-only first")
    results = read_json(path, fix=REBUILD)
    if results.get("format") != FORMAT:
        raise NMTError(f"{path}: written by an older nmt compare; {REBUILD}")
    check_value(results, str(path), SHAPE, fix=REBUILD)
    if problem := next(_unmatched(results), None):
        raise NMTError(f"{path}: {problem}; {REBUILD}")
    return results


def _unmatched(results: dict) -> Iterator[str]:
    """What `report` would look up by name or position in results of the right shape and not
    find: the first seed, a length group, a run's variant, a variant's cells and scores, a
    heatmap's weight for each pair of words."""
    if not results["seeds"]:
        yield "seeds: none listed"
    if not results["lengths"]:
        yield "lengths: no length group"
    names = {v["name"] for v in results["variants"]}
    for i, run in enumerate(results["runs"]):
        if run["variant"] not in names:
            yield f"runs[{i}].variant: no variant named {run['variant']!r}"
    for group, info in results["lengths"].items():
        if len(info["sentences"]) != len(info["labels"]):
            yield f"lengths[{group!r}]: {len(info['labels'])} labels but {len(info['sentences'])} counts"
        for i, variant in enumerate(results["variants"]):
            if len(variant["lengths"].get(group, [])) != len(info["labels"]):
                yield f"variants[{i}].lengths: not {len(info['labels'])} cells for {group!r}"
    for i, variant in enumerate(results["variants"]):
        for name in (s["name"] for s in results["sets"] if s["name"] not in variant["scores"]):
            yield f"variants[{i}].scores: none for the set {name!r}"
    for i, view in enumerate(results["heatmaps"]):
        rows, columns = len(view["target_words"]), len(view["source_words"])
        if not rows or not columns or [len(row) for row in view["matrix"]] != [columns] * rows:
            yield f"heatmaps[{i}].matrix: not {rows} rows of {columns} weights, one per pair of words"


def write_results(results: dict, out: Path) -> Path:
    path = out / "results.json"
    atomic_write_text(path, json.dumps(results, indent=1) + "\n")
    return path
