"""Headless plots (Agg backend) for every layer that draws: data statistics, attention, training
curves, BLEU by length. It sits below its users; matplotlib is imported only when a plot is asked for."""

from __future__ import annotations

import io
from pathlib import Path

from nmt.fileio import atomic_write


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    pyplot().close(fig)
    atomic_write(Path(path), lambda f: f.write(buffer.getvalue()))


def attention_heatmap(weights, src_pieces: list[str], tgt_pieces: list[str], path: Path) -> None:
    """Source pieces on x, target pieces on y, one cell per weight, with a colour bar."""
    attention_heatmaps([("", weights, src_pieces, tgt_pieces)], path)


def attention_heatmaps(panels: list[tuple], path: Path, columns: int = 1) -> None:
    """One heatmap per (title, weights, src_pieces, tgt_pieces) panel, on one figure, so that
    systems that translated the same sentence can be compared at a glance."""
    save_png(attention_figure(panels, columns), path)


def figure_pixels(fig):
    """The figure as an RGB array (H, W, 3) of uint8, for trackers that take images; closes it."""
    import numpy as np

    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    pyplot().close(fig)
    return pixels


def attention_figure(panels: list[tuple], columns: int = 1):
    """The figure of `attention_heatmaps`, unsaved."""
    import numpy as np

    plt = pyplot()
    rows = -(-len(panels) // columns)
    width = max(4, 0.45 * max(len(p[2]) for p in panels) + 2)
    height = max(3, 0.4 * max(len(p[3]) for p in panels) + 1.5)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    for ax, (title, weights, src_pieces, tgt_pieces) in zip(axes.flat, panels, strict=False):
        weights = np.asarray(weights, dtype=float)[: len(tgt_pieces), : len(src_pieces)]
        image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=60, ha="right")
        ax.set_yticks(range(len(tgt_pieces)), tgt_pieces)
        ax.set_xlabel("source")
        ax.set_ylabel("output")
        if title:
            ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.04)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def bleu_by_length_chart(report, path: Path) -> None:
    """Grouped bars: BLEU per length bucket for each system, with the sentence count per bucket."""
    plt = pyplot()
    buckets = report.systems[0].buckets
    n_sys = len(report.systems)
    width = 0.8 / n_sys
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(buckets) + 2), 4.5))
    for k, system in enumerate(report.systems):
        xs = [i + (k - (n_sys - 1) / 2) * width for i in range(len(buckets))]
        ax.bar(xs, [b.bleu or 0.0 for b in system.buckets], width, label=system.name)
    ax.set_xticks(range(len(buckets)), [f"{b.label}\n(n={b.sentences})" for b in buckets])
    ax.set_xlabel(f"{report.bucket_by} length in words (sentences per bucket)")
    ax.set_ylabel("BLEU")
    ax.set_title("BLEU by sentence length")
    top = max((b.bleu or 0.0) for system in report.systems for b in system.buckets)
    ax.set_ylim(0, max(1.0, top) * 1.25)  # headroom so the legend never covers a bar
    ax.legend(loc="upper center", ncol=min(n_sys, 4))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_png(fig, path)


def training_curves(runs: dict[str, list[dict]], path: Path) -> None:
    """Loss, validation perplexity and BLEU against step, and BLEU against wall time, per run."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    panels = [
        (axes[0, 0], "step", "loss", "training loss (per token)"),
        (axes[0, 1], "step", "valid_ppl", "validation perplexity"),
        (axes[1, 0], "step", "valid_bleu", "validation BLEU"),
        (axes[1, 1], "time", "valid_bleu", "validation BLEU vs wall time (s)"),
    ]
    for ax, x_key, y_key, title in panels:
        for label, metrics in runs.items():
            points = [(m[x_key], m[y_key]) for m in metrics if y_key in m and x_key in m]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o" if len(points) < 30 else None, label=label)
        ax.set_title(title)
        ax.set_xlabel(x_key)
        ax.grid(alpha=0.3)
    axes[0, 1].set_yscale("log")
    if axes[0, 0].get_legend_handles_labels()[0]:
        axes[0, 0].legend()
    fig.tight_layout()
    save_png(fig, path)
