"""The comparison's report: Markdown tables and two figures, drawn from results.json alone, so
the report regenerates without a model, a checkpoint or a translation."""

from __future__ import annotations

from pathlib import Path

from nmt.fileio import atomic_write_text
from nmt.plots import pyplot, save_figure


def _spread(s: dict) -> str:
    if s["sd"] is None:
        return f"{s['mean']:.2f}"
    return f"{s['mean']:.2f} ± {s['sd']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def curves_figure(results: dict, path: Path) -> None:
    """Validation BLEU against training time: one colour per variant, one line per seed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = [v["name"] for v in results["variants"]]
    for run in results["runs"]:
        k = names.index(run["variant"])
        points = [(c["seconds"] / 60, c["valid_bleu"]) for c in run["curve"]]
        if points:
            first = run["seed"] == results["seeds"][0]
            ax.plot(
                *zip(*points, strict=True),
                color=colours[k % len(colours)],
                linestyle="-" if k < len(colours) else "--",
                alpha=0.85,
                label=run["variant"] if first else None,
            )
    ax.set(xlabel="training time (minutes)", ylabel="validation BLEU", title="Validation BLEU while training")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def lengths_figure(results: dict, path: Path) -> None:
    """Test BLEU (mean over seeds) per reference-length bucket, one line per variant."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    labels = [
        f"{b}\n(n={n})"
        for b, n in zip(results["buckets"]["labels"], results["buckets"]["sentences"], strict=True)
    ]
    for variant in results["variants"]:
        points = [(i, b) for i, b in enumerate(variant["bucket_bleu"]) if b is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=variant["name"])
    ax.set_xticks(range(len(labels)), labels)
    ax.set(
        xlabel="reference length in words (sentences)",
        ylabel="BLEU (mean over seeds)",
        title="BLEU by length",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def markdown(results: dict, command: str) -> str:
    seeds = ", ".join(map(str, results["seeds"]))
    lines = [
        "# Comparison",
        "",
        f"`{command}`",
        "",
        f"Base config `{results['config']}` with `{' '.join(results['common_overrides'])}`; seeds {seeds}; "
        f"{results['split']} split, {results['sentences']} sentences, each run's {results['checkpoint']} "
        "checkpoint. BLEU and chrF are sacreBLEU corpus scores; with several seeds, mean ± sd (min-max).",
        "",
        "| variant | parameters | BLEU | chrF | steps | training (min) | decoding (sentences/s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for v in results["variants"]:
        lines.append(
            f"| {v['name']} | {v['parameters']:,} | {_spread(v['BLEU'])} | {_spread(v['chrF'])} | "
            f"{v['steps']:,} | {_minutes(v['train_seconds'])} | {v['decode_sentences_per_s']:.0f} |"
        )
    boot = results["bootstrap"]
    lines += [
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
    buckets = results["buckets"]
    header = " | ".join(f"{b} (n={n})" for b, n in zip(buckets["labels"], buckets["sentences"], strict=True))
    lines += [
        "",
        "## BLEU by length",
        "",
        f"BLEU of each bucket's sentences (by {buckets['by']}), mean over seeds; an empty bucket shows -.",
        "",
        f"| variant | {header} |",
        "|---|" + "---:|" * len(buckets["labels"]),
    ]
    for v in results["variants"]:
        cells = " | ".join("-" if b is None else f"{b:.2f}" for b in v["bucket_bleu"])
        lines.append(f"| {v['name']} | {cells} |")
    lines += [
        "",
        "![validation BLEU against training time](curves.png)",
        "",
        "![BLEU by reference length](lengths.png)",
        "",
        "## Runs",
        "",
        "| variant | seed | BLEU | chrF | steps | training (min) | best valid BLEU | decoding threads |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["runs"]:
        best = "-" if r["best_valid_bleu"] is None else f"{r['best_valid_bleu']:.2f}"
        lines.append(
            f"| {r['variant']} | {r['seed']} | {r['BLEU']:.2f} | {r['chrF']:.2f} | {r['steps']:,} | "
            f"{_minutes(r['train_seconds'])} | {best} | {r['threads']} |"
        )
    return "\n".join(lines) + "\n"


def write_report(results: dict, out: Path, command: str) -> Path:
    """report.md, curves.png and lengths.png in `out`."""
    curves_figure(results, out / "curves.png")
    lengths_figure(results, out / "lengths.png")
    path = out / "report.md"
    atomic_write_text(path, markdown(results, command))
    return path
