"""The comparison's report: Markdown tables and its figures (curves, lengths, heatmaps), drawn
from results.json alone, so the report regenerates without a model, a checkpoint or a translation."""

from __future__ import annotations

from pathlib import Path

from nmt.fileio import atomic_write_text
from nmt.plots import heatmap_figure, pyplot, save_figure


def _spread(s: dict) -> str:
    if s["sd"] is None:
        return f"{s['mean']:.2f}"
    return f"{s['mean']:.2f} ± {s['sd']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def curves_figure(results: dict, path: Path) -> None:
    """Validation BLEU against training time and against steps (a variant slower per step shows
    apart there): one colour per variant, one line per seed."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = [v["name"] for v in results["variants"]]
    for ax, (x, unit, label) in zip(
        axes, (("seconds", 60, "training time (minutes)"), ("step", 1, "training steps")), strict=True
    ):
        for run in results["runs"]:
            k = names.index(run["variant"])
            points = [(c[x] / unit, c["valid_bleu"]) for c in run["curve"]]
            if points:
                ax.plot(
                    *zip(*points, strict=True),
                    color=colours[k % len(colours)],
                    linestyle="-" if k < len(colours) else "--",
                    alpha=0.85,
                    label=run["variant"] if run["seed"] == results["seeds"][0] else None,
                )
        ax.set(
            xlabel=label, ylabel="validation BLEU", title=f"Validation BLEU against {label.split(' (')[0]}"
        )
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def lengths_figure(results: dict, path: Path) -> None:
    """BLEU (mean over seeds) against source length, one panel per length group, one line per
    variant, bars for the 95% bootstrap interval over sentences."""
    plt = pyplot()
    groups = results["lengths"]
    fig, axes = plt.subplots(1, len(groups), figsize=(7 * len(groups), 5), squeeze=False)
    for ax, (group, info) in zip(axes.flat, groups.items(), strict=True):
        for k, variant in enumerate(results["variants"]):
            cells = [
                (i, c["bleu"], c["ci"] or 0.0)
                for i, c in enumerate(variant["lengths"][group])
                if c["bleu"] is not None
            ]
            if cells:
                xs, ys, errs = zip(*cells, strict=True)
                shift = (k - (len(results["variants"]) - 1) / 2) * 0.04  # bars side by side, not on top
                ax.errorbar(
                    [x + shift for x in xs], ys, yerr=errs, marker="o", capsize=2, label=variant["name"]
                )
        ax.set_xticks(
            range(len(info["labels"])),
            [f"{b}\n(n={n})" for b, n in zip(info["labels"], info["sentences"], strict=True)],
        )
        ax.set(
            xlabel="source length in words (lines)",
            ylabel="BLEU (mean over seeds)",
            title=f"{group}: {' + '.join(info['sets'])}",
        )
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def heatmaps_figure(results: dict, path: Path) -> None:
    """Every variant's forced attention on the same reference, words merged, side by side."""
    views = [(p["variant"], p["matrix"], p["source_words"], p["target_words"]) for p in results["heatmaps"]]
    save_figure(heatmap_figure(views, min(3, len(views)), "words"), path)


def _cell(c: dict) -> str:
    if c["bleu"] is None:
        return "-"
    return f"{c['bleu']:.1f}" + ("" if c["ci"] is None else f" ± {c['ci']:.1f}")


def markdown(results: dict, command: str) -> str:
    """report.md: the variants, the tests against the baseline, every test set, BLEU by length,
    the forced attention and every run."""
    lines = [
        *_variants(results, command),
        *_against_baseline(results),
        *_every_set(results),
        *_by_length(results),
        "",
        "![BLEU by source length](lengths.png)",
        "",
        "![validation BLEU against training time](curves.png)",
        *_attention(results),
        *_runs(results),
    ]
    return "\n".join(lines) + "\n"


def _variants(results: dict, command: str) -> list[str]:
    """The title, the command, and one row per variant: size, scores, training and decoding."""
    seeds = ", ".join(map(str, results["seeds"]))
    lines = [
        "# Comparison",
        "",
        f"`{command}`",
        "",
        f"Base config `{results['config']}` with `{' '.join(results['common_overrides'])}`; seeds {seeds}; "
        f"{results['split']} split, {results['sentences']} sentences, each run's {results['checkpoint']} "
        "checkpoint. BLEU and chrF are sacreBLEU corpus scores; with several seeds, mean ± sd (min-max). "
        "Training speed is the median of each run's logged target tokens/s, training memory the "
        "largest peak resident set of a run's training process; decoding speed is on the "
        f"{results['split']} split.",
        "",
        "| variant | parameters | BLEU | chrF | steps | training (min) | training (tokens/s) "
        "| training memory (MiB) | decoding (sentences/s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in results["variants"]:
        speed = "-" if v["train_tokens_per_s"] is None else f"{v['train_tokens_per_s']:,}"
        memory = "-" if v["train_peak_mib"] is None else f"{v['train_peak_mib']:,}"
        lines.append(
            f"| {v['name']} | {v['parameters']:,} | {_spread(v['BLEU'])} | {_spread(v['chrF'])} | "
            f"{v['steps']:,} | {_minutes(v['train_seconds'])} | {speed} | {memory} | "
            f"{v['decode_sentences_per_s']:.0f} |"
        )
    return lines


def _against_baseline(results: dict) -> list[str]:
    """Each variant against the baseline: the two tests and their verdict."""
    boot = results["bootstrap"]
    lines = [
        "",
        f"## Against {results['baseline']}",
        "",
        "Two tests. *Seed ranges apart*: every seed of one variant scores above every seed of the "
        f"other. *Bootstrap*: paired bootstrap resampling of the {results['split']} sentences "
        f"({boot['resamples']} resamples), per seed, p < {boot['significance_level']} counted as "
        "significant. A difference that *survives both* is one another training run would not undo.",
        "",
        "| variant | BLEU difference | seed ranges apart | p per seed | verdict |",
        "|---|---:|:---:|---|---|",
    ]
    for c in results["comparisons"]:
        apart = {True: "yes", False: "no", None: "-"}[c["seed_ranges_apart"]]
        p_values = ", ".join(f"{p:.3f}" for p in c["p_values"].values())
        lines.append(
            f"| {c['variant']} | {c['bleu_difference']:+.2f} | {apart} | {p_values} | {c['verdict']} |"
        )
    return lines


def _every_set(results: dict) -> list[str]:
    """With sets beyond the split: where each comes from, and every variant's BLEU and length
    ratio on each."""
    sets = results["sets"]
    if len(sets) < 2:
        return []
    return [
        "",
        "## Every test set",
        "",
        "BLEU, mean ± sd over seeds (min-max).",
        "",
        *(
            f"- **{s['name']}**: {s['origin']}; {s['sentences']:,} lines, "
            f"{s['source_words']:.1f} source words on average."
            for s in sets
        ),
        "",
        *_set_table(results, "BLEU"),
        "",
        "Length ratio: output tokens / reference tokens, as BLEU counts them (below 1, the "
        "translations are short and BLEU's brevity penalty applies), mean ± sd over seeds.",
        "",
        *_set_table(results, "length_ratio"),
    ]


def _set_table(results: dict, metric: str) -> list[str]:
    """One row per variant, one column per set: the metric's spread over seeds."""
    names = [s["name"] for s in results["sets"]]
    return [
        "| variant | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
        *(
            f"| {v['name']} | " + " | ".join(_spread(v["scores"][name][metric]) for name in names) + " |"
            for v in results["variants"]
        ),
    ]


def _by_length(results: dict) -> list[str]:
    """One table per length group: each variant's BLEU per source-length bucket."""
    lines = [
        "",
        "## BLEU by source length",
        "",
        "Each cell is the corpus BLEU of the bucket's lines, mean over seeds, ± the half-width of its "
        f"95% bootstrap interval over lines ({results['bootstrap']['resamples']} resamples, mean over "
        "seeds); an empty bucket shows -.",
    ]
    for group, info in results["lengths"].items():
        header = " | ".join(f"{b} (n={n})" for b, n in zip(info["labels"], info["sentences"], strict=True))
        lines += [
            "",
            f"### {group}: {' + '.join(info['sets'])}",
            "",
            f"| variant | {header} |",
            "|---|" + "---:|" * len(info["labels"]),
        ]
        for v in results["variants"]:
            lines.append(f"| {v['name']} | " + " | ".join(_cell(c) for c in v["lengths"][group]) + " |")
    return lines


def _attention(results: dict) -> list[str]:
    """With --heatmap: the reference every variant was forced onto, and the figure."""
    if not results["heatmaps"]:
        return []
    first = results["heatmaps"][0]
    drawn = {p["variant"] for p in results["heatmaps"]}
    missing = [v["name"] for v in results["variants"] if v["name"] not in drawn]
    return [
        "",
        "## Attention on one reference",
        "",
        f"Each variant (seed {results['seeds'][0]}) forced to produce the reference of "
        f"{results['split']} line {first['line']}, pieces merged into words: "
        f"*{first['source']}* → *{first['reference']}*."
        + (f" Without attention weights: {', '.join(missing)}." if missing else ""),
        "",
        "![forced attention of every variant](heatmaps.png)",
    ]


def _runs(results: dict) -> list[str]:
    """One row per run (variant and seed)."""
    lines = [
        "",
        "## Runs",
        "",
        "| variant | seed | BLEU | chrF | steps | training (min) | training (tokens/s) "
        "| training memory (MiB) | best valid BLEU | decoding threads |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["runs"]:
        best = "-" if r["best_valid_bleu"] is None else f"{r['best_valid_bleu']:.2f}"
        speed = "-" if r["train_tokens_per_s"] is None else f"{r['train_tokens_per_s']:,}"
        memory = "-" if r["train_peak_mib"] is None else f"{round(r['train_peak_mib']):,}"
        lines.append(
            f"| {r['variant']} | {r['seed']} | {r['BLEU']:.2f} | {r['chrF']:.2f} | {r['steps']:,} | "
            f"{_minutes(r['train_seconds'])} | {speed} | {memory} | {best} | {r['threads']} |"
        )
    return lines


def write_report(results: dict, out: Path, command: str) -> Path:
    """report.md, curves.png, lengths.png and (with a heatmap line) heatmaps.png in `out`."""
    curves_figure(results, out / "curves.png")
    lengths_figure(results, out / "lengths.png")
    if results["heatmaps"]:
        heatmaps_figure(results, out / "heatmaps.png")
    path = out / "report.md"
    atomic_write_text(path, markdown(results, command))
    return path
