"""Decode and score a comparison's runs, then compare the variants two ways: by the spread across
training seeds (does every seed of one beat every seed of the other?) and by the paired bootstrap
over test sentences, seed by seed. A difference both agree on is one to report; a bootstrap
p-value alone says nothing about how much another training run would move the score.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from nmt.compare.plan import Plan, Run
from nmt.errors import NMTError
from nmt.evaluate.scoring import DEFAULT_BUCKETS, EvalOptions, evaluate, paired_p_values
from nmt.fileio import atomic_write_text, read_lines
from nmt.rundir import CHECKPOINTS, read_metrics

SIGNIFICANT = 0.05


@dataclass(frozen=True)
class Settings:
    split: str = "test"  # a data split name (test, valid) of the config
    checkpoint: str = "best"  # best, averaged or last: which of each run's checkpoints decodes
    beam: int | None = None  # None: the config's decode.beam
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    bootstrap: int = 1000
    device: str = "auto"


def decode_run(run: Run, sources: list[str], settings: Settings) -> tuple[list[str], dict]:
    """The run's translations of the split's `sources`, and how they were made (cached beside
    the run: decoding again only when its checkpoint is newer than the translations)."""
    from nmt.decode.translator import load_translator

    checkpoint = run.dir / CHECKPOINTS / f"{settings.checkpoint}.pt"
    if not checkpoint.is_file():
        need = " (written when train.average_last is 2 or more)" if settings.checkpoint == "averaged" else ""
        raise NMTError(f"{checkpoint}: no such checkpoint{need}")
    stem = f"{settings.split}.{settings.checkpoint}.beam{settings.beam or 'cfg'}"
    hyp_path, facts_path = run.dir / "compare" / f"{stem}.txt", run.dir / "compare" / f"{stem}.json"
    if facts_path.is_file() and facts_path.stat().st_mtime >= checkpoint.stat().st_mtime:
        return read_lines(hyp_path), json.loads(facts_path.read_text(encoding="utf-8"))
    import torch

    overrides = {"beam": settings.beam} if settings.beam else {}
    translator = load_translator([checkpoint], overrides, settings.device)
    start = time.perf_counter()
    hyps = [t.text for t in translator.translate(sources, attention=False)]
    seconds = time.perf_counter() - start
    facts = {
        "parameters": translator.info.parameters,
        "beam": translator.cfg.beam,
        "decode_seconds": round(seconds, 2),
        "decode_sentences_per_s": round(len(hyps) / seconds, 1),
        "threads": torch.get_num_threads(),
        "device": str(translator.device),
    }
    atomic_write_text(hyp_path, "".join(h + "\n" for h in hyps))
    atomic_write_text(facts_path, json.dumps(facts) + "\n")
    return hyps, facts


def training_facts(run: Run) -> dict:
    """Steps, training time and validation curve of a run, from its metrics.jsonl."""
    entries = read_metrics(run.dir)
    valid = [(m["time"], m["step"], m["valid_bleu"]) for m in entries if "valid_bleu" in m and "time" in m]
    return {
        "steps": max((m["step"] for m in entries), default=0),
        "train_seconds": max((m["time"] for m in entries if "time" in m), default=0.0),
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
    from sacrebleu.metrics import BLEU

    base, mine = baseline["BLEU"], other["BLEU"]
    separated = None
    if len(baseline["seeds"]) > 1 and len(other["seeds"]) > 1:
        separated = mine["min"] > base["max"] or mine["max"] < base["min"]
    p_values = {}
    for seed in sorted(set(baseline["seeds"]) & set(other["seeds"])):
        pair = {"baseline": runs[baseline["name"], seed]["hyps"], "other": runs[other["name"], seed]["hyps"]}
        p_values[str(seed)] = round(
            paired_p_values(pair, [refs], {"BLEU": BLEU(tokenize=opts.tokenize)}, opts)["other"]["BLEU"], 4
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


def collect(plan: Plan, settings: Settings, baseline: str, say: Callable[[str], None]) -> dict:
    """Decode and score every run and compare the variants; the dict `report` renders and
    `results.json` keeps (everything but the translations, which stay beside each run)."""
    from nmt.data.sources import load_split, split_name

    cfg = plan.run_config(plan.runs[0])
    pairs = load_split(cfg.data, split_name(cfg.data, settings.split))
    sources, refs = [src for src, _ in pairs], [tgt for _, tgt in pairs]
    opts = EvalOptions(buckets=settings.buckets, bootstrap=settings.bootstrap)
    runs: dict[tuple[str, int], dict] = {}
    for run in plan.runs:
        hyps, facts = decode_run(run, sources, settings)
        (scored,) = evaluate({"run": hyps}, [refs], replace(opts, bootstrap=0)).systems
        runs[run.variant.name, run.seed] = {
            "variant": run.variant.name,
            "seed": run.seed,
            "dir": str(run.dir),
            "BLEU": round(scored.scores["BLEU"], 2),
            "chrF": round(scored.scores["chrF"], 2),
            "bucket_bleu": [None if b.bleu is None else round(b.bleu, 2) for b in scored.buckets],
            **facts,
            **training_facts(run),
            "hyps": hyps,
        }
        say(f"{run.variant.name}, seed {run.seed}: BLEU {runs[run.variant.name, run.seed]['BLEU']:.2f}")
    variants = []
    for variant in plan.variants:
        mine = [runs[variant.name, seed] for seed in plan.seeds]
        per_bucket = list(zip(*(r["bucket_bleu"] for r in mine), strict=True))
        variants.append(
            {
                "name": variant.name,
                "overrides": list(variant.overrides),
                "seeds": list(plan.seeds),
                "parameters": mine[0]["parameters"],
                "BLEU": spread([r["BLEU"] for r in mine]),
                "chrF": spread([r["chrF"] for r in mine]),
                "steps": round(statistics.mean(r["steps"] for r in mine)),
                "train_seconds": round(statistics.mean(r["train_seconds"] for r in mine), 1),
                "decode_sentences_per_s": round(
                    statistics.mean(r["decode_sentences_per_s"] for r in mine), 1
                ),
                "bucket_bleu": [
                    None if None in scores else round(statistics.mean(scores), 2) for scores in per_bucket
                ],
            }
        )
    base = next((v for v in variants if v["name"] == baseline), variants[0])
    lengths = {  # the buckets' labels and sentence counts, the same for every run
        "labels": [b.label for b in scored.buckets],
        "sentences": [b.sentences for b in scored.buckets],
        "by": "reference words",
    }
    return {
        "config": plan.config,
        "common_overrides": list(plan.common),
        "seeds": list(plan.seeds),
        "split": settings.split,
        "sentences": len(refs),
        "checkpoint": settings.checkpoint,
        "buckets": lengths,
        "variants": variants,
        "comparisons": [compare_to(base, v, runs, refs, opts) for v in variants if v is not base],
        "bootstrap": {"resamples": settings.bootstrap, "seed": opts.seed, "significance_level": SIGNIFICANT},
        "runs": [{k: v for k, v in r.items() if k != "hyps"} for r in runs.values()],
        "baseline": base["name"],
    }


def write_results(results: dict, out: Path) -> Path:
    path = out / "results.json"
    atomic_write_text(path, json.dumps(results, indent=1) + "\n")
    return path
