"""`nmt data stats`: sizes, lengths, ratios, unknown-token rates and padding efficiency."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nmt.config import Config
from nmt.data.batching import length_grouped_batches, padding_efficiency
from nmt.data.cleaning import describe_dropped
from nmt.data.corpus import EncodedCorpus
from nmt.data.prepare import prepare
from nmt.vocab import UNK

PERCENTILES = (50, 90, 95, 99, 100)


def _percentiles(values: np.ndarray) -> str:
    return "  ".join(f"p{p}={np.percentile(values, p):.4g}" for p in PERCENTILES)


def data_stats(cfg: Config, plot: Path | None = None) -> str:
    data = prepare(cfg, ("valid", "test"))
    corpora: dict[str, EncodedCorpus] = {"train": data.train} | {
        k: s.corpus for k, s in data.held_out.items()
    }
    lines = [f"cache: {data.cache_dir} ({'loaded' if data.from_cache else 'built'})"]
    dropped = describe_dropped(data.dropped)
    lines.append(f"training pairs dropped: {dropped}")
    lines.append(f"vocabulary: source {len(data.tokenizers.src)}, target {len(data.tokenizers.tgt)}")
    for name, corpus in corpora.items():
        src, tgt = corpus.src.lengths, corpus.tgt.lengths
        lines.append(
            f"\n{name}: {len(corpus)} pairs, {int(src.sum())} source / {int(tgt.sum())} target subwords"
        )
        lines.append(f"  source length  {_percentiles(src)}")
        lines.append(f"  target length  {_percentiles(tgt)}")
        lines.append(f"  target/source  {_percentiles(tgt / np.maximum(src, 1))}")
        if name != "train":
            unk_src = float((corpus.src.tokens == UNK).mean()) if len(corpus.src.tokens) else 0.0
            unk_tgt = float((corpus.tgt.tokens == UNK).mean()) if len(corpus.tgt.tokens) else 0.0
            lines.append(f"  unknown tokens  source {100 * unk_src:.3f}%  target {100 * unk_tgt:.3f}%")
    t = cfg.train
    for size, kind in ((t.batch_size, t.batch_type), (4096, "tokens")):
        batches = length_grouped_batches(data.train, size, t.seed, 0, kind)
        src_real, tgt_real = padding_efficiency(data.train, batches)
        lines.append(
            f"\npadding efficiency, batches of {size} {kind}: real tokens {100 * src_real:.1f}% of "
            f"the source, {100 * tgt_real:.1f}% of the target ({len(batches)} batches)"
        )
    if plot:
        _histogram(data.train, plot)
        lines.append(f"length histogram: {plot}")
    return "\n".join(lines)


def _histogram(corpus: EncodedCorpus, path: Path) -> None:
    from nmt.plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    top = int(max(corpus.src.lengths.max(), corpus.tgt.lengths.max()))
    bins = np.arange(0, top + 2)
    ax.hist(corpus.src.lengths, bins=bins, alpha=0.6, label="source")
    ax.hist(corpus.tgt.lengths, bins=bins, alpha=0.6, label="target")
    ax.set_xlabel("length in subwords")
    ax.set_ylabel("training pairs")
    ax.set_title("Training sentence lengths")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
