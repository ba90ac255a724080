"""The exported encoder and decoder step as onnxruntime sessions, with a numpy decoder state.

An export is checked before it decodes anything: its config.json (JSON, with the fields read
here), the sha256 of its graphs and tokenizers listed there (written last), the export id that
both graphs carry in their metadata and config.json names (graphs of two exports never mix),
and one step on the tokenizers' highest ids (the vocabularies fit, the numbers are finite).
Exports of format 1 (before ids and checksums) are checked as far as they can be.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.errors import NMTError
from nmt.fileio import mismatch
from nmt.jsonvalues import read_json
from nmt.vocab import EOS

ENCODER, STEP, CONFIG = "encoder.onnx", "decoder_step.onnx", "config.json"
# 2: the export id in both graphs and config.json, and its files' sha256; 3: a stateful
# attention's state in and out of both graphs (older exports have none)
EXPORT_FORMAT = 3
EXPORT_ID = "nmt.export_id"  # the key of the export id in both graphs' metadata
FIELDS = {"format": str, "format_version": int, "max_len": int, "normalize": str, "decode": dict}
AGAIN = "export the model again (nmt export)"


@dataclass
class State:
    """R decoder rows: the LSTM state (L, R, D) twice, h~_{t-1} (R, D or 0), each row's memory,
    and a stateful attention's state (R, S, ... or R, 0)."""

    h: np.ndarray
    c: np.ndarray
    feed: np.ndarray
    memory: np.ndarray  # (R, S, M)
    mask: np.ndarray  # (R, S) True on real source positions
    keys: np.ndarray  # (R, S, ...)
    attention: np.ndarray

    def select(self, rows: np.ndarray) -> State:
        """Keep, reorder or repeat rows (beams follow their back-pointers)."""
        return State(
            self.h[:, rows],
            self.c[:, rows],
            self.feed[rows],
            self.memory[rows],
            self.mask[rows],
            self.keys[rows],
            self.attention[rows],
        )


def read_export_config(directory: Path) -> dict:
    """An export's config.json, checked: JSON, the fields the runtime reads, a format this nmt
    knows, and (format 2) the graphs and tokenizers it lists as they were written."""
    path = directory / CONFIG
    config = read_json(path, FIELDS, fix=AGAIN)
    if config["format"] != "nmt-onnx" or not 1 <= config["format_version"] <= EXPORT_FORMAT:
        raise NMTError(
            f"{path}: format {config['format']} {config['format_version']}, not one this nmt reads "
            f"(nmt-onnx 1 to {EXPORT_FORMAT}); decode it with the nmt that wrote it"
        )
    if config["format_version"] >= 2:
        _check_files(path, config)
    return config


def _check_files(path: Path, config: dict) -> None:
    """Every file config.json lists has the size and sha256 written there."""
    if not isinstance(config.get("files"), dict) or not isinstance(config.get("export_id"), str):
        raise NMTError(f"{path}: no files or export_id; {AGAIN}")
    if problem := mismatch(path.parent, config["files"]):
        raise NMTError(f"{problem} in {CONFIG}: the export changed since nmt export wrote it; {AGAIN}")


class OnnxModel:
    """`encode` and `step`, the interface the searches need, on the two exported graphs."""

    def __init__(self, directory: Path, threads: int = 0):
        try:
            import onnxruntime as ort
        except ImportError:
            raise NMTError("the onnx engine needs onnxruntime: pip install 'nmt[onnx]'") from None
        self.directory = directory = Path(directory)
        if not (directory / ENCODER).is_file():
            raise NMTError(
                f"{directory}: not an ONNX export (no {ENCODER}); make one with nmt export RUN -o DIR"
            )
        self.config = read_export_config(directory)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        providers = ["CPUExecutionProvider"]
        try:
            self.encoder = ort.InferenceSession(str(directory / ENCODER), options, providers=providers)
            self.decoder = ort.InferenceSession(str(directory / STEP), options, providers=providers)
        except Exception as e:  # onnxruntime's own error types for a damaged or foreign graph
            raise NMTError(
                f"{directory}: onnxruntime cannot load the export ({str(e).splitlines()[0]})"
            ) from None
        if self.config["format_version"] >= 2:
            self._check_ids()
        # the exporter drops inputs a graph does not read (positions without local-m, feed without
        # input feeding), so each call passes only the ones the graph has
        self.step_inputs = {i.name for i in self.decoder.get_inputs()}

    def _check_ids(self) -> None:
        """Both graphs carry the export id config.json names: two exports' files never mix."""
        expected = self.config["export_id"]
        for name, session in ((ENCODER, self.encoder), (STEP, self.decoder)):
            found = session.get_modelmeta().custom_metadata_map.get(EXPORT_ID)
            if found != expected:
                raise NMTError(
                    f"{self.directory / name}: a graph of another export (id {found}, where "
                    f"{CONFIG} says {expected}); copy an export whole, or {AGAIN}"
                )

    def check(self, src_vocab: int, tgt_vocab: int) -> None:
        """One step on the tokenizers' highest ids: the graphs fit the vocabularies and compute
        finite numbers. Otherwise a tokenizer of another model decodes garbage, and NaN weights
        empty lines, both with exit code 0."""
        fits = (
            f"the graphs do not fit the vocabulary of its tokenizers ({src_vocab} source, {tgt_vocab} target"
        )
        highest = ([[src_vocab - 1, EOS]], [2], [tgt_vocab - 1])
        src, src_len, y = (np.array(a, dtype=np.int64) for a in highest)
        try:
            state = self.encode(src, src_len)
            log_probs, state, weights = self.step(y, state, 0)
        except Exception as e:  # onnxruntime: "indices element out of data bounds" in a Gather
            raise NMTError(f"{self.directory}: {fits}: {str(e).splitlines()[0][:200]}); {AGAIN}") from None
        if log_probs.shape != (1, tgt_vocab):
            raise NMTError(f"{self.directory}: {fits}, the decoder {log_probs.shape[-1]}); {AGAIN}")
        if not all(np.isfinite(a).all() for a in (log_probs, state.h, state.c, state.memory, weights)):
            raise NMTError(
                f"{self.directory}: its weights are not finite (NaN or infinity in one step's "
                f"outputs), so it cannot translate; {AGAIN} from a good checkpoint"
            )

    def encode(self, src: np.ndarray, src_len: np.ndarray) -> State:
        """src (B, S) int64 padded with PAD, src_len (B,) -> the first state of B rows."""
        memory, mask, keys, h, c, feed, *attention = self.encoder.run(None, {"src": src, "src_len": src_len})
        return State(h, c, feed, memory, mask, keys, *(attention or [feed[:, :0]]))  # format 2: none

    def step(self, y: np.ndarray, state: State, t: int) -> tuple[np.ndarray, State, np.ndarray]:
        """y (R,) at target position t -> log-probabilities (R, V), the next state, weights (R, S)."""
        inputs = {
            "y": y,
            "h": state.h,
            "c": state.c,
            "feed": state.feed,
            "memory": state.memory,
            "mask": state.mask,
            "keys": state.keys,
            "positions": np.full_like(y, t),
            "attention": state.attention,
        }
        inputs = {name: value for name, value in inputs.items() if name in self.step_inputs}
        log_probs, h, c, feed, weights, *attention = self.decoder.run(None, inputs)
        attention = attention[0] if attention else state.attention
        return log_probs, State(h, c, feed, state.memory, state.mask, state.keys, attention), weights
