"""`nmt explore`: one self-contained HTML page to browse what attention does.

Everything the page shows is computed here, once: each system's n-best list (word probabilities
by forced decoding of each hypothesis), its attention on its own output, and with a reference
the forced attention on it (so every system's heatmap has the same rows) with its argmax
alignment links, and per-sentence chrF. Words are merged by nmt.words; the pieces travel too for
the page's toggle. Weights are stored as integers in thousandths to keep 1,000 sentences small.
The data goes inline as JSON into the template `explore.html` (package data), whose
plain-JavaScript `NMTHeatmap` module draws the heatmaps and can be reused on its own.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np

from nmt.assets import heatmap_js
from nmt.evaluate.alignment import Argmax
from nmt.fileio import atomic_write_text, check_outputs, check_same_length, read_lines
from nmt.text.ranking import beam_width
from nmt.words import WordMap, attention_view, text_words, word_matrix

DATA_MARK = "/*NMT_DATA*/null"
SCALE = 1000  # weights in thousandths


def template() -> str:
    """The page, with the heatmap module it shares with `nmt serve`'s page inlined."""
    page = resources.files("nmt.explore").joinpath("explore.html").read_text(encoding="utf-8")
    return page.replace("/*NMT_HEATMAP*/", heatmap_js(), 1)


def _view(weights, src_pieces: list[str], tgt_pieces: list[str], pieces: bool) -> dict:
    matrix, src, tgt = attention_view(weights, src_pieces, tgt_pieces, pieces)
    return {"s": src, "t": tgt, "m": np.rint(np.asarray(matrix) * SCALE).astype(int).ravel().tolist()}


def attention_data(weights, src_pieces: list[str], tgt_pieces: list[str], links: bool = False) -> dict:
    """A heatmap for the page: words and pieces views, and the argmax links over the words
    (indices into the words view, which keeps `</s>`)."""
    out = {
        "w": _view(weights, src_pieces, tgt_pieces, False),
        "p": _view(weights, src_pieces, tgt_pieces, True),
    }
    if links:
        src, tgt = WordMap.of(src_pieces), WordMap.of(tgt_pieces)
        found = Argmax().links(word_matrix(weights, src_pieces, tgt_pieces))
        out["links"] = sorted([src.text_indices[i], tgt.text_indices[j]] for i, j in found)
    return out


def system_name(path: Path, taken: list[dict]) -> str:
    """A short label: the run directory's name for its best checkpoint, else `run:checkpoint`."""
    in_run = path.parent.name == "checkpoints"
    name = path.parent.parent.name if in_run else path.stem
    if in_run and path.name != "best.pt":
        name += ":" + path.stem
    names = {s["name"] for s in taken}
    candidate, k = name, 2
    while candidate in names:
        candidate, k = f"{name}#{k}", k + 1
    return candidate


def system_info(path: Path, loaded, taken: list[dict]) -> dict:
    from nmt.model.seq2seq import count_parameters

    m = loaded.config.model
    return {
        "name": system_name(path, taken),
        "path": str(path),
        "attention": m.attention.type,
        "decoder": m.decoder.style + (" + input feeding" if m.decoder.input_feeding else ""),
        "parameters": count_parameters(loaded.model),
        "step": loaded.state.get("progress", {}).get("step"),
    }


def explore_system(translator, sources: list[str], targets: list[str] | None, nbest: int) -> list[dict]:
    """Per sentence: output, n-best with word probabilities, attention (own output, forced)."""
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    translations = translator.translate(sources, nbest)
    flat = [
        (i, text) for i, t in enumerate(translations) for _, text in zip(t.hypotheses, t.texts, strict=False)
    ]
    scored = translator.score([sources[i] for i, _ in flat], [text for _, text in flat]) if flat else []
    forced = translator.score(sources, targets) if targets is not None else None
    out, k = [], 0
    for i, t in enumerate(translations):
        entry: dict = {"out": t.text, "nbest": []}
        for h, text in zip(t.hypotheses, t.texts, strict=False):  # no hypothesis for an empty line
            words = scored[k].word_log_probs()
            k += 1
            entry["nbest"].append(
                {
                    "text": text,
                    "score": round(h.score, 4),
                    "words": [[w, round(float(np.exp(lp)), 3)] for w, lp in words],
                }
            )
        if t.hypotheses:
            entry["own"] = attention_data(t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces)
        if targets is not None:
            if sources[i].strip():
                f = forced[i]
                entry["forced"] = attention_data(f.attention, f.src_pieces, f.tgt_pieces, links=True)
                entry["forced_log_prob"] = round(f.log_prob, 4)
            entry["chrf"] = round(chrf.sentence_score(t.text, [targets[i]]).score, 2)
        out.append(entry)
    return out


def build_explorer(
    models: list[Path],
    src: Path,
    ref: Path | None,
    output: Path,
    decode_overrides: dict,
    nbest: int,
    device: str,
) -> str:
    """Write the page; returns a summary line."""
    from nmt.checkpoint import load_checkpoint, resolve_checkpoint
    from nmt.decode.translator import Translator
    from nmt.device import resolve_device

    check_outputs({"-o": output}, {"--src": src, "--ref": ref})
    sources = read_lines(src)
    targets = read_lines(ref) if ref else None
    check_same_length({src: sources, ref: targets})
    torch_device = resolve_device(device)
    systems, per_system = [], []
    for path in models:
        path = resolve_checkpoint(path)
        loaded = load_checkpoint(path, torch_device)
        translator = Translator.from_config(
            loaded.model, loaded.tokenizers, loaded.config, torch_device, decode_overrides
        )
        width = beam_width(translator.cfg, nbest)  # the search's, widened to hold the n-best shown
        systems.append({**system_info(path, loaded, systems), "beam": width})
        per_system.append(explore_system(translator, sources, targets, nbest))
    data = {
        "title": f"nmt explore: {src.name}" + (f" vs {ref.name}" if ref else ""),
        "has_ref": targets is not None,
        "systems": systems,
        "sentences": [
            {
                "src": s,
                "words": len(text_words(s)),
                "ref": targets[i] if targets else None,
                "sys": [p[i] for p in per_system],
            }
            for i, s in enumerate(sources)
        ],
    }
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    page = template().replace(DATA_MARK, payload)
    atomic_write_text(output, page)
    size = len(page.encode()) / 1e6
    return f"wrote {output} ({len(sources)} sentences x {len(models)} systems, {size:.1f} MB)"
