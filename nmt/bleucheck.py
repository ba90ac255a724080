"""A model's BLEU check (`nmt.model.precision.BleuCheck`: its BLEU on one set in each precision,
as `nmt precision` measured it), kept beside the file that holds its weights (`best.pt` ->
`best.pt.bleu-check.json`), so `auto` may decode that model in int8 wherever it is loaded.

The record names the weights by their sha256: a check of other weights (best.pt replaced by a
later checkpoint, another file copied over it) is never trusted; it is ignored with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from nmt.fileio import DIGESTS, atomic_write_text
from nmt.jsonvalues import JSONError, read_json
from nmt.model.precision import BleuCheck

SUFFIX = ".bleu-check.json"
NUMBER = (int, float)
SHAPE = {"weights_sha256": str, "on": str, "bleu": {"fp32": NUMBER, "int8": NUMBER}}


def record_path(weights: Path) -> Path:
    return weights.with_name(weights.name + SUFFIX)


def write_check(weights: Path, digest: str, check: BleuCheck, details: dict) -> Path:
    """The record of `check`, of the weights whose sha256 is `digest`, with `details` (timings,
    signature) for the reader; written whole or not at all."""
    path = record_path(weights)
    document = {"weights_sha256": digest, "on": check.on, "bleu": check.bleu, **details}
    atomic_write_text(path, json.dumps(document, indent=1) + "\n")
    return path


def weights_digest(weights: Path) -> str:
    return DIGESTS["sha256"](weights)


def read_check(weights: Path, model: Path | str) -> tuple[BleuCheck | None, str]:
    """The check kept beside `weights` (the file holding the weights of `model`, as the user
    named it), and one line when a record is there but not used ('' when none is, or it is)."""
    path = record_path(weights)
    if not path.is_file():
        return None, ""
    redo = f"int8 not weighed until `nmt precision -m {model}` checks these weights"
    try:
        document = read_json(path, SHAPE, fix=redo)
    except JSONError as e:
        return None, str(e)
    if document["weights_sha256"] != weights_digest(weights):
        return None, f"{path}: a check of other weights than {weights.name} holds now; {redo}"
    return BleuCheck({name: float(document["bleu"][name]) for name in ("fp32", "int8")}, document["on"]), ""
