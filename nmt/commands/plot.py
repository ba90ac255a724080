"""`nmt plot attention` as a function: a heatmap from an attention file or from a checkpoint."""

from __future__ import annotations

from pathlib import Path

from nmt.errors import NMTError
from nmt.fileio import check_outputs, read_lines
from nmt.jsonvalues import NUMBER, parse_json

RECORD = {"weights": [[NUMBER]], "source": [str], "target": [str]}  # a line of translate --attention
REMAKE = "write it again with nmt translate --attention"


def plot_attention_of(
    out: Path,
    attention: Path | None,
    index: int,
    model: Path | None,
    sentence: str | None,
    beam: int | None,
    pieces: bool = False,
    dpi: int = 100,
) -> None:
    """Heatmap of one sentence, from a `translate --attention` JSONL file or from a checkpoint
    (decoded with `beam`, or its config's `decode.beam` when None)."""
    from nmt.plots import attention_heatmap, check_plot_path, draw_heatmaps

    check_outputs({"-o": out}, {"--attention": attention, "-m": model})
    if (attention is None) == (model is None):
        raise NMTError("plot attention: give --attention FILE, or --model CKPT with --sentence TEXT")
    check_plot_path(out)
    if attention is not None:
        lines = read_lines(attention)
        if not 1 <= index <= len(lines):
            raise NMTError(f"{attention}: has {len(lines)} sentences, no sentence {index}")
        record = parse_json(lines[index - 1], f"{attention}:{index}", RECORD, fix=REMAKE)
        weights, source, target = record["weights"], record["source"], record["target"]
        if [len(row) for row in weights] != [len(source)] * len(target):
            raise NMTError(
                f"{attention}:{index}: weights are not {len(target)} rows of {len(source)}, one per "
                f"target and source token; {REMAKE}"
            )
        if not weights:
            raise NMTError(f"{attention}: sentence {index} is empty, nothing to plot")
        title = f"sentence {index} \u2014 {attention.name}"
        if record.get("unit") == "words":  # already merged
            if pieces:
                raise NMTError(
                    f"{attention}: holds words; export it with nmt translate --pieces to plot pieces"
                )
            draw_heatmaps([(title, weights, source, target)], out, dpi=dpi)
            return
        attention_heatmap(weights, source, target, out, title, pieces, dpi)
        return
    if not sentence:
        raise NMTError("plot attention: --model needs --sentence TEXT")
    from nmt.decode.translator import load_translator

    (t,) = load_translator([model], {"beam": beam}).translate([sentence])
    attention_heatmap(t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces, out, str(model), pieces, dpi)
