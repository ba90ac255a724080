"""A model's BLEU check (`nmt.model.precision.BleuCheck`): one set decoded and scored in each
precision this CPU runs (`nmt precision`, `nmt release`), kept beside the file that holds the
weights (`best.pt` -> `best.pt.bleu-check.json`), so `auto` may decode that model in int8
wherever it is loaded and int8 quantises as it did there (`nmt.machine.int8_scheme`: a CPU whose
int8 kernels take 8-bit activations and one whose kernels take 7 each need a check of their own).

The record names the weights by their sha256, the layers int8 replaced and how it quantised them
(`nmt.machine.int8_scheme`): a check of other weights (best.pt replaced by a later checkpoint,
another file copied over it) or of another int8 (one of an earlier nmt, whose encoder stayed
fp32 or whose activations took 7 bits; one of a CPU whose int8 kernels take other activations) is
never trusted; it is ignored with one line.
It also keeps the file's identity when hashed (`nmt.fileio.file_identity`: path, modification
time, size): while the file keeps it, the digest is not computed again (hashing a 155 MB
checkpoint cost 0.11 s of every `translate`'s start-up, a 500 MB one 0.4 s). Replacing the file
(a rename, a copy, a write) changes it, and the digest is checked again.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from nmt.errors import NMTError
from nmt.fileio import DIGESTS, atomic_write_text, file_identity
from nmt.jsonvalues import JSONError, read_json
from nmt.machine import choose_threads, int8_scheme
from nmt.model.precision import INT8_LAYERS, BleuCheck

SUFFIX = ".bleu-check.json"
NUMBER = (int, float)
EARLIER_SCHEME = "one scale a weight, 7-bit activations"  # what a check without `int8_scheme` ran
SHAPE = {"weights_sha256": str, "on": str, "bleu": {"fp32": NUMBER, "int8": NUMBER}}


def record_path(weights: Path) -> Path:
    return weights.with_name(weights.name + SUFFIX)


def write_check(
    weights: Path, digest: str, check: BleuCheck, details: dict, identity: dict | None = None
) -> Path:
    """The record of `check`, of the weights whose sha256 is `digest`, with `details` (timings,
    signature) for the reader; written whole or not at all. `identity`: the file's
    `file_identity` when `digest` was computed, if known (a record without one is hashed at
    every read)."""
    path = record_path(weights)
    document = {
        "weights_sha256": digest,
        **({} if identity is None else {"weights_file": identity}),
        "int8_layers": list(INT8_LAYERS),
        "int8_scheme": int8_scheme(),
        "on": check.on,
        "bleu": check.bleu,
        **details,
    }
    atomic_write_text(path, json.dumps(document, indent=1) + "\n")
    return path


def weights_digest(weights: Path) -> str:
    return DIGESTS["sha256"](weights)


def holds(weights: Path, identity: dict | None, digest: str) -> bool:
    """Whether `weights` still holds the weights of sha256 `digest`, whose file had `identity`
    then: without reading it while it keeps that identity."""
    return identity == file_identity(weights) or weights_digest(weights) == digest


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
    if not holds(weights, document.get("weights_file"), document["weights_sha256"]):
        return None, f"{path}: a check of other weights than {weights.name} holds now; {redo}"
    if document.get("int8_layers") != list(INT8_LAYERS):
        return None, f"{path}: a check of an earlier int8, which quantised other layers; {redo}"
    if (scheme := document.get("int8_scheme", EARLIER_SCHEME)) != int8_scheme():
        return None, f"{path}: a check of int8 with {scheme}, where int8 here takes {int8_scheme()}; {redo}"
    return BleuCheck({name: float(document["bleu"][name]) for name in ("fp32", "int8")}, document["on"]), ""


@dataclass(frozen=True)
class Measured:
    """One precision's decoding of the set."""

    precision: str
    bleu: float
    seconds: float
    signature: str  # sacreBLEU's


def precisions() -> tuple[str, ...]:
    """What this CPU decodes in: bf16 only where it has the units (emulated, it says nothing)."""
    from nmt.model.linear import BF16_UNITS

    return ("fp32", "bf16", "int8") if BF16_UNITS else ("fp32", "int8")


def decode_in(
    model: Path, precision: str, src_lines: list[str], refs: list[str], overrides: dict
) -> Measured:
    from nmt.decode.translator import load_translator
    from nmt.evaluate.scoring import EvalOptions, evaluate

    translator = load_translator([model], overrides, "cpu", precision)
    start = time.perf_counter()
    hyps = [t.text for t in translator.translate(src_lines, attention=False)]
    seconds = time.perf_counter() - start
    report = evaluate({precision: hyps}, [refs], EvalOptions(bootstrap=0))
    return Measured(precision, report.systems[0].scores["BLEU"], seconds, report.signatures["BLEU"])


def check_model(
    model: Path, weights: Path, src: Path, src_lines: list[str], refs: list[str], overrides: dict, beam: int
) -> tuple[BleuCheck, list[Measured], Path]:
    """`model` (whose weights are in `weights`) decoded on CPU in every precision of this CPU,
    the check written beside the weights; refused when the weights change meanwhile."""
    before, digest = file_identity(weights), weights_digest(weights)
    threads = choose_threads()[0]
    rows = [decode_in(model, name, src_lines, refs, overrides) for name in precisions()]
    if not holds(weights, before, digest):
        raise NMTError(f"{weights} changed while its BLEU was checked; check it again")
    on = f"{src.name} ({len(src_lines):,} lines, beam {beam})"
    check = BleuCheck({row.precision: row.bleu for row in rows}, on)
    seconds = {row.precision: round(row.seconds, 3) for row in rows}
    details = {"seconds": seconds, "threads": threads, "src": str(src), "signature": rows[0].signature}
    return check, rows, write_check(weights, digest, check, details, before)
