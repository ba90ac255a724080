"""Headless plots (Agg backend) for every layer that draws: data statistics, attention, training
curves, BLEU by length. It sits below its users; matplotlib is imported only when a plot is asked for."""

from __future__ import annotations

import io
import os
from pathlib import Path

from nmt.errors import NMTError
from nmt.fileio import atomic_write
from nmt.words import attention_view


def pyplot():
    _quiet_config_folder()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _quiet_config_folder() -> None:
    """Where matplotlib cannot write its config folder (a read-only home), a temporary one of
    our own, removed at exit: matplotlib would make one too, but with two warnings among nmt's
    lines."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "matplotlib"
    try:
        config.mkdir(parents=True, exist_ok=True)
        writable = os.access(config, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="nmt-matplotlib-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["MPLCONFIGDIR"] = folder


FORMATS = ("png", "svg", "pdf")


def save_figure(fig, path: Path, dpi: int = 100) -> None:
    """Write in the format the suffix names (.png, .svg, .pdf), atomically."""
    path = Path(path)
    buffer = io.BytesIO()
    try:
        check_plot_path(path)
        fig.savefig(buffer, format=path.suffix.lower().lstrip("."), dpi=dpi)
    finally:
        pyplot().close(fig)
    atomic_write(path, lambda f: f.write(buffer.getvalue()))


def check_plot_path(path: Path) -> None:
    """Fail before any work when a plot could not be written where asked."""
    if Path(path).suffix.lower().lstrip(".") not in FORMATS:
        raise NMTError(f"{path}: cannot tell the plot format from the suffix; end it in .png, .svg or .pdf")


def attention_heatmap(
    weights,
    src_pieces: list[str],
    tgt_pieces: list[str],
    path: Path,
    title: str = "",
    pieces: bool = False,
    dpi: int = 100,
) -> None:
    """Source words on x, output words on y (pieces merged by nmt.words: a source word's weight
    sums its pieces, an output word's row averages its pieces' rows; `pieces=True` keeps the
    pieces), one cell per weight, with a labelled colour bar."""
    attention_heatmaps([(title, weights, src_pieces, tgt_pieces)], path, pieces=pieces, dpi=dpi)


def attention_heatmaps(
    panels: list[tuple], path: Path, columns: int = 1, pieces: bool = False, dpi: int = 100
) -> None:
    """One heatmap per (title, weights, src_pieces, tgt_pieces) panel, on one figure, so that
    systems that translated the same sentence can be compared at a glance."""
    check_plot_path(path)
    save_figure(attention_figure(panels, columns, pieces), path, dpi)


def figure_pixels(fig):
    """The figure as an RGB array (H, W, 3) of uint8, for trackers that take images; closes it."""
    import numpy as np

    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    pyplot().close(fig)
    return pixels


def attention_figure(panels: list[tuple], columns: int = 1, pieces: bool = False):
    """The figure of `attention_heatmaps`, unsaved."""
    views = [(title, *attention_view(w, src, tgt, pieces)) for title, w, src, tgt in panels]
    return heatmap_figure(views, columns, "pieces" if pieces else "words")


def draw_heatmaps(
    views: list[tuple], path: Path, columns: int = 1, unit: str = "words", dpi: int = 100
) -> None:
    """(title, matrix, source labels, output labels) panels drawn as given (already merged)."""
    check_plot_path(path)
    save_figure(heatmap_figure(views, columns, unit), path, dpi)


def heatmap_figure(views: list[tuple], columns: int, unit: str):
    """One heatmap per (title, matrix, source labels, output labels) view, with a labelled colour bar."""
    import numpy as np

    plt = pyplot()
    rows = -(-len(views) // columns)
    width = max(4, 0.45 * max(len(v[2]) for v in views) + 2.5)
    height = max(3, 0.4 * max(len(v[3]) for v in views) + 2)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    for ax, (title, weights, src_labels, tgt_labels) in zip(axes.flat, views, strict=False):
        image = ax.imshow(np.asarray(weights), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(src_labels)), src_labels, rotation=60, ha="right")
        ax.set_yticks(range(len(tgt_labels)), tgt_labels)
        ax.set_xlabel(f"source {unit}")
        ax.set_ylabel(f"output {unit}")
        if title:
            ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.04).set_label("attention weight")
    for ax in list(axes.flat)[len(views) :]:
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
    save_figure(fig, path)


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
    save_figure(fig, path)
