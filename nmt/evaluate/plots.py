"""Headless plots (Agg backend); matplotlib is imported here only, when a plot is asked for."""

from __future__ import annotations

import io
from pathlib import Path

from nmt.fileio import atomic_write


def attention_heatmap(weights, src_pieces: list[str], tgt_pieces: list[str], path: Path) -> None:
    """Source pieces on x, target pieces on y, one cell per weight, with a colour bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weights = weights[: len(tgt_pieces), : len(src_pieces)].float().numpy()
    fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(src_pieces) + 2), max(3, 0.4 * len(tgt_pieces) + 1.5)))
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=60, ha="right")
    ax.set_yticks(range(len(tgt_pieces)), tgt_pieces)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write(Path(path), lambda f: f.write(buffer.getvalue()))
