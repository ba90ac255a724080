"""`nmt align` as a function: word alignments from attention, and their error rate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nmt.fileio import atomic_write_text, check_outputs, check_same_length, read_lines

if TYPE_CHECKING:
    from nmt.decode.translator import Translator


def run_align(
    models: list[Path],
    src: Path,
    ref: Path | None,
    gold: Path | None,
    output: Path,
    how: str,
    threshold: float,
    decode_overrides: dict,
    device: str,
) -> str:
    """The whole `nmt align`: Pharaoh links from the attention of free decoding, or of forced
    decoding on --ref; with --gold, the AER line. Everything is checked before anything is written."""
    from nmt.decode.translator import load_translator
    from nmt.evaluate.alignment import align, alignment_error_rate, method, read_gold
    from nmt.pharaoh import format_pharaoh

    chosen = method(how, threshold)
    check_outputs({"-o": output}, {"--src": src, "--ref": ref, "--gold": gold})
    sources = read_lines(src)
    targets = read_lines(ref) if ref else None
    gold_lines = read_lines(gold) if gold else None
    check_same_length({src: sources, ref: targets, gold: gold_lines})
    gold_links = read_gold(gold, gold_lines or [], sources, targets)
    translator = load_translator(models, decode_overrides, device)
    links = [
        set() if item is None or not line.strip() else align(*item, chosen)
        for item, line in zip(attention_of(translator, sources, targets), sources, strict=True)
    ]
    atomic_write_text(output, "".join(format_pharaoh(a) + "\n" for a in links))
    if gold_links:
        mode = "forced on the reference" if targets is not None else "free decoding"
        return f"{how} ({mode}): " + alignment_error_rate(links, gold_links).line()
    return ""


def attention_of(translator: Translator, sources: list[str], targets: list[str] | None) -> list:
    """Each sentence's (attention, source pieces, target pieces): of forced decoding on
    `targets`, or of the best translation (None for an empty line)."""
    if targets is not None:
        return [(s.attention, s.src_pieces, s.tgt_pieces) for s in translator.score(sources, targets)]
    return [
        (t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces) if t.hypotheses else None
        for t in translator.translate(sources)
    ]
