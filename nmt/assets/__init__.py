"""Files the HTML pages share: `heatmap.js`, the attention heatmap of the explorer page
(`nmt explore`) and of the server's page (`nmt serve`)."""

from __future__ import annotations

from importlib import resources


def heatmap_js() -> str:
    """`NMTHeatmap`: the one attention heatmap of every page, as JavaScript source."""
    return resources.files("nmt.assets").joinpath("heatmap.js").read_text(encoding="utf-8")
