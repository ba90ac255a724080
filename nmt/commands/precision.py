"""`nmt precision` as a function: decode one set in each precision this CPU runs, score each,
keep the BLEU check beside the model's weights (`nmt.decode.bleucheck`), say what `auto` takes.

Why a command: int8 is the fast unit of a CPU without bf16 units (1.25-1.5x fp32's decoding on a
Zen 3 EPYC), but what it costs in BLEU depends on the model, and only decoding tells; once a
model's check shows int8 within `BLEU_TOLERANCE` of fp32, every later `auto` may take it.
"""

from __future__ import annotations

from pathlib import Path

from nmt.config import Config
from nmt.errors import NMTError
from nmt.fileio import read_lines


def check_set(cfg: Config, src: Path | None, ref: Path | None) -> tuple[Path, Path]:
    """The set to check on: the given files, or the model's own validation split when its text
    files are here."""
    if (src is None) != (ref is None):
        raise NMTError("precision: give both --src and --ref, or neither (the model's validation split)")
    if src is not None:
        return src, ref
    if files := cfg.data.text_files(cfg.data.valid):
        return files
    d = cfg.data
    raise NMTError(
        f"precision: the model's validation split ({d.dir}/{d.valid}.{d.src_lang}, .{d.tgt_lang}) is "
        "not here as text files; give --src and --ref"
    )


def run_precision(model: Path, src: Path | None, ref: Path | None, overrides: dict) -> str:
    """The whole `nmt precision`; returns what to print."""
    import torch

    from nmt.checkpoint import load_model, weights_file
    from nmt.decode.bleucheck import check_model
    from nmt.model.precision import choose

    weights = weights_file(model)
    loaded = load_model(model)
    src, ref = check_set(loaded.config, src, ref)
    src_lines, refs = read_lines(src), read_lines(ref)
    if len(src_lines) != len(refs):
        raise NMTError(
            f"precision: {src} has {len(src_lines):,} lines and {ref} {len(refs):,}; give a parallel set"
        )
    beam = overrides.get("beam") or loaded.config.decode.beam
    check, rows, path = check_model(model, weights, src, src_lines, refs, overrides, beam)
    auto = choose(None, loaded.model, torch.device("cpu"), check=check)
    table = [f"{'precision':10} {'BLEU':>6} {'seconds':>8} {'lines/s':>8}"]
    for row in rows:
        speed = len(src_lines) / max(row.seconds, 1e-9)
        table.append(f"{row.precision:10} {row.bleu:6.2f} {row.seconds:8.2f} {speed:8.1f}")
    return "\n".join([*table, f"wrote {path}: {check}", f"auto on this CPU, from now: {auto.why}"])
