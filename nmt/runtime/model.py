"""The exported encoder and decoder step as onnxruntime sessions, with a numpy decoder state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.errors import NMTError

ENCODER, STEP, CONFIG = "encoder.onnx", "decoder_step.onnx", "config.json"  # as nmt.ship.export writes


@dataclass
class State:
    """R decoder rows: the LSTM state (L, R, D) twice, h~_{t-1} (R, D or 0), and each row's memory."""

    h: np.ndarray
    c: np.ndarray
    feed: np.ndarray
    memory: np.ndarray  # (R, S, M)
    mask: np.ndarray  # (R, S) True on real source positions
    keys: np.ndarray  # (R, S, ...)

    def select(self, rows: np.ndarray) -> State:
        """Keep, reorder or repeat rows (beams follow their back-pointers)."""
        return State(
            self.h[:, rows],
            self.c[:, rows],
            self.feed[rows],
            self.memory[rows],
            self.mask[rows],
            self.keys[rows],
        )


class OnnxModel:
    """`encode` and `step`, the interface the searches need, on the two exported graphs."""

    def __init__(self, directory: Path, threads: int = 0):
        try:
            import onnxruntime as ort
        except ImportError:
            raise NMTError("the onnx engine needs onnxruntime: pip install 'nmt[onnx]'") from None
        directory = Path(directory)
        if not (directory / ENCODER).is_file():
            raise NMTError(
                f"{directory}: not an ONNX export (no {ENCODER}); make one with nmt export RUN -o DIR"
            )
        self.config = json.loads((directory / CONFIG).read_text(encoding="utf-8"))
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
        # the exporter drops inputs a graph does not read (positions without local-m, feed without
        # input feeding), so each call passes only the ones the graph has
        self.step_inputs = {i.name for i in self.decoder.get_inputs()}

    def encode(self, src: np.ndarray, src_len: np.ndarray) -> State:
        """src (B, S) int64 padded with PAD, src_len (B,) -> the first state of B rows."""
        memory, mask, keys, h, c, feed = self.encoder.run(None, {"src": src, "src_len": src_len})
        return State(h, c, feed, memory, mask, keys)

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
        }
        inputs = {name: value for name, value in inputs.items() if name in self.step_inputs}
        log_probs, h, c, feed, weights = self.decoder.run(None, inputs)
        return log_probs, State(h, c, feed, state.memory, state.mask, state.keys), weights
