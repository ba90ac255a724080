"""`nmt export`: a model as two ONNX graphs that need no torch to run (`nmt.runtime` decodes
with them):

- `encoder.onnx`: src (B, S) int64, src_len (B,) int64 -> the memory every step reads
  (`memory`, `mask`, `keys`) and the decoder's first state (`h`, `c`, `feed`, `attention`);
- `decoder_step.onnx`: one target position for R rows, state in, state out: y, h, c, feed,
  memory, mask, keys, positions, attention -> log_probs (R, V), h, c, feed, weights (R, S),
  attention.

`feed` (Luong input feeding's h~_{t-1}) is a zero-width (R, 0) array for the other decoders,
and `attention` (a stateful attention's state, (R, S, ...)) for a stateless attention, so every
model has the same graph signature. The graphs come from the model's own modules
through the TorchScript exporter, with two export-friendly equivalents: the encoder runs its
stacked layers one bidirectional layer at a time (the exporter mis-wires a multi-layer
bidirectional LSTM), and the decoder steps with `lstm_cell` in plain matrix products. After
writing, each export is run with onnxruntime on a check batch against torch; a model whose
graphs do not reproduce it is refused. Both graphs carry the export's id (a hash of the two) in
their metadata, and config.json, written last, names it with the sha256 of every file, so the
runtime never decodes with a damaged file or graphs of two exports.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
import warnings
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.checkpoint import LoadedModel, load_model
from nmt.errors import NMTError
from nmt.fileio import atomic_write, atomic_write_text, file_entry, staged_directory
from nmt.model.decoder import DecoderState, Memory
from nmt.model.seq2seq import Seq2Seq
from nmt.runtime.model import CONFIG, ENCODER, EXPORT_FORMAT, EXPORT_ID, STEP
from nmt.vocab import EOS, PAD

OPSET = 17
TOLERANCE = 1e-4  # max |torch - onnxruntime| / (1 + |onnxruntime|) over every output on the check batch
ENCODER_INPUTS = ["src", "src_len"]
ENCODER_OUTPUTS = ["memory", "mask", "keys", "h", "c", "feed", "attention"]
STEP_INPUTS = ["y", "h", "c", "feed", "memory", "mask", "keys", "positions", "attention"]
STEP_OUTPUTS = ["log_probs", "h_out", "c_out", "feed_out", "weights", "attention_out"]
# the axes of every input and output that vary from call to call: rows (sentences, or beams) and
# source positions; h and c are (layers, rows, H)
_ROWS, _SOURCE, _LAYERED = {0: "rows"}, {0: "rows", 1: "source_length"}, {1: "rows"}
DYNAMIC_AXES = {
    "src": _SOURCE,
    "src_len": _ROWS,
    "y": _ROWS,
    "h": _LAYERED,
    "c": _LAYERED,
    "feed": _ROWS,
    "memory": _SOURCE,
    "mask": _SOURCE,
    "keys": _SOURCE,
    "positions": _ROWS,
    "log_probs": _ROWS,
    "h_out": _LAYERED,
    "c_out": _LAYERED,
    "feed_out": _ROWS,
    "weights": _SOURCE,
    "attention": _SOURCE,
    "attention_out": _SOURCE,
}


class ExportEncoder(nn.Module):
    """Seq2Seq.encode with one single-layer bidirectional nn.LSTM per encoder layer (same weights)."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.model = model
        rnn = model.encoder.rnn
        self.layers = nn.ModuleList()
        for layer in range(rnn.num_layers):
            single = nn.LSTM(
                rnn.input_size if layer == 0 else 2 * rnn.hidden_size,
                rnn.hidden_size,
                batch_first=True,
                bidirectional=True,
            )
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                for suffix in ("", "_reverse"):
                    getattr(single, f"{name}_l0{suffix}").data = getattr(rnn, f"{name}_l{layer}{suffix}").data
            self.layers.append(single)

    def forward(self, src: Tensor, src_len: Tensor):
        enc = self.model.encoder
        x = enc.embed(src)  # eval mode: no dropout
        hs, cs = [], []
        for rnn in self.layers:
            packed = pack_padded_sequence(x, src_len, batch_first=True, enforce_sorted=False)
            out, (h, c) = rnn(packed)
            x, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
            hs.append(h)
            cs.append(c)
        h, c = torch.stack(hs), torch.stack(cs)  # (L, 2, B, H)
        mem = self.model.decoder.prepare(x, src != PAD)
        state = self.model.decoder.init_state(*self.model.bridge(h, c), mem)
        return mem.memory, mem.mask, mem.keys, state.h, state.c, *_extra(state, src.size(0))


def _extra(state: DecoderState, rows: int) -> tuple[Tensor, Tensor]:
    """Input feeding's h~ and the attention's state, each (rows, 0) where the model has none."""
    return tuple(t if t is not None else state.h.new_zeros(rows, 0) for t in (state.feed, state.attention))


class ExportStep(nn.Module):
    """Seq2Seq.step for R rows with one memory row each, log-softmaxed as the searches use it."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.model = model
        self.feeds = getattr(model.decoder, "input_feeding", False)
        self.stateful = model.decoder.attention.stateful

    def forward(self, y, h, c, feed, memory, mask, keys, positions, attention):
        state = DecoderState(h, c, feed if self.feeds else None, attention if self.stateful else None)
        logits, state, weights = self.model.step(y, state, Memory(memory, mask, keys), positions)
        feed, attention = _extra(state, y.size(0))
        return torch.log_softmax(logits.float(), -1), state.h, state.c, feed, weights, attention


def check_batch(vocab: int, rows: int = 3, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Sources of different lengths (padding included), ending in EOS."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7 + 2 * rows - 2 * i for i in range(rows)][:rows])
    src = torch.randint(4, max(5, vocab), (rows, int(lengths.max())), generator=g)
    for i, n in enumerate(lengths.tolist()):
        src[i, n - 1] = EOS
        src[i, n:] = PAD
    return src, lengths


@contextlib.contextmanager
def quiet_stderr():
    """The TorchScript exporter writes C++ warnings about packed sequences straight to file
    descriptor 2 (not through Python's warnings); keep them off the user's terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _graph(module: nn.Module, args: tuple, inputs: list[str], outputs: list[str]) -> bytes:
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings(), quiet_stderr():
        warnings.simplefilter("ignore")  # the exporter's notes on traced shapes and packed sequences
        torch.onnx.export(
            module,
            args,
            buffer,
            dynamo=False,
            opset_version=OPSET,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes={name: DYNAMIC_AXES[name] for name in inputs + outputs},
        )
    return buffer.getvalue()


def export_graphs(model: Seq2Seq, vocab: int) -> tuple[bytes, bytes]:
    encoder, step = ExportEncoder(model).eval(), ExportStep(model).eval()
    src, src_len = check_batch(vocab, rows=2, seed=1)
    with torch.no_grad():
        enc_out = encoder(src, src_len)
    R = src.size(0)
    step_args = (
        torch.full((R,), 4, dtype=torch.long),
        enc_out[3],
        enc_out[4],
        enc_out[5],
        *enc_out[:3],
        torch.zeros(R, dtype=torch.long),
        enc_out[6],
    )
    enc_graph = _graph(encoder, (src, src_len), ENCODER_INPUTS, ENCODER_OUTPUTS)
    step_graph = _graph(step, step_args, STEP_INPUTS, STEP_OUTPUTS)
    return enc_graph, step_graph


def _gap(ours: tuple[Tensor, ...], theirs: list) -> float:
    """The largest difference between torch's outputs and onnxruntime's, relative to the size of
    the value (|a - b| / (1 + |b|)): float32 rounding grows with it, and a confident model's
    log-probabilities reach -30 and below."""
    pairs = ((a.float(), torch.from_numpy(b).float()) for a, b in zip(ours, theirs, strict=True) if a.numel())
    return max(float(((a - b).abs() / (1 + b.abs())).max()) for a, b in pairs)


def check_graphs(model: Seq2Seq, vocab: int, enc_graph: bytes, step_graph: bytes) -> float:
    """The largest difference between torch and onnxruntime over an encoder call and three steps
    on a batch of another size than the one traced (so the dynamic axes are exercised too)."""
    import onnxruntime as ort

    encoder, step = ExportEncoder(model).eval(), ExportStep(model).eval()
    enc_session = ort.InferenceSession(enc_graph, providers=["CPUExecutionProvider"])
    step_session = ort.InferenceSession(step_graph, providers=["CPUExecutionProvider"])
    src, src_len = check_batch(vocab, rows=11, seed=2)
    with torch.no_grad():
        ours = encoder(src, src_len)
        worst = _gap(ours, enc_session.run(None, {"src": src.numpy(), "src_len": src_len.numpy()}))
        memory, mask, keys, h, c, feed, attention = ours
        y = torch.full((src.size(0),), 4, dtype=torch.long)
        for t in range(3):
            args = (y, h, c, feed, memory, mask, keys, torch.full_like(y, t), attention)
            ours = step(*args)
            read = {i.name for i in step_session.get_inputs()}
            feeds = {n: a.numpy() for n, a in zip(STEP_INPUTS, args, strict=True) if n in read}
            theirs = step_session.run(None, feeds)
            worst = max(worst, _gap(ours, theirs))
            y, h, c, feed, attention = ours[0].argmax(-1), *ours[1:4], ours[5]
    return worst


def labelled(graphs: tuple[bytes, bytes]) -> tuple[str, tuple[bytes, bytes]]:
    """The export's id (the sha256 of both graphs, so the same model exports the same bytes)
    and the graphs with it in their metadata."""
    import onnx

    export_id = hashlib.sha256(b"".join(graphs)).hexdigest()[:16]
    out = []
    for graph in graphs:
        model = onnx.load_model_from_string(graph)
        onnx.helper.set_model_props(model, {EXPORT_ID: export_id})
        out.append(model.SerializeToString())
    return export_id, (out[0], out[1])


def runtime_config(loaded: LoadedModel) -> dict:
    cfg = loaded.config
    return {
        "format": "nmt-onnx",
        "format_version": EXPORT_FORMAT,
        "src_lang": cfg.data.src_lang,
        "tgt_lang": cfg.data.tgt_lang,
        "max_len": cfg.data.max_len,
        "normalize": cfg.data.normalize,
        "decoder": cfg.model.decoder.style,
        "input_feeding": cfg.model.decoder.style == "luong" and cfg.model.decoder.input_feeding,
        "attention": cfg.model.attention.type,
        "decode": asdict(cfg.decode),
    }


def export(source: Path | str, output: Path) -> list[str]:
    """Export `source` (a checkpoint, run directory, release directory or hf:// path) into the new
    directory `output`; returns lines saying what was written and how close it is to torch."""
    try:
        import onnx  # noqa: F401  (the exporter needs it)
        import onnxruntime  # noqa: F401
    except ImportError:
        raise NMTError("nmt export needs the onnx extra: pip install 'nmt[onnx]'") from None
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise NMTError(f"{output}: already exists and is not empty; choose a new --output directory")
    loaded = load_model(source)
    model = loaded.model.float().eval()
    vocab = len(loaded.tokenizers.src)
    what = f"{loaded.config.model.decoder.style} decoder with {loaded.config.model.attention.type} attention"
    try:
        export_id, (enc_graph, step_graph) = labelled(export_graphs(model, vocab))
    except Exception as e:  # the exporter's many error types for an operation it cannot express
        raise NMTError(f"{source}: the {what} cannot be exported to ONNX ({type(e).__name__}: {e})") from None
    difference = check_graphs(model, vocab, enc_graph, step_graph)
    if not difference <= TOLERANCE:
        raise NMTError(
            f"{source}: the ONNX graphs of the {what} differ from torch by {difference:.2g} "
            f"(more than {TOLERANCE}); refusing to write an export that would translate differently"
        )
    write_export(output, loaded, export_id, (enc_graph, step_graph))
    total = sum(p.stat().st_size for p in output.iterdir())
    return [
        f"wrote {output}: {ENCODER} {len(enc_graph) / 1e6:.2f} MB, {STEP} {len(step_graph) / 1e6:.2f} MB, "
        f"{total / 1e6:.2f} MB in all",
        f"checked against torch: max relative difference {difference:.1e} over every output of both graphs",
    ]


def write_export(output: Path, loaded: LoadedModel, export_id: str, graphs: tuple[bytes, bytes]) -> None:
    """The export's files into the new folder `output`, config.json last, with the export id
    and the size and sha256 of every other file; nothing is left of a failed write."""
    with staged_directory(output) as tmp:
        for name, graph in zip((ENCODER, STEP), graphs, strict=True):
            atomic_write(tmp / name, lambda f, graph=graph: f.write(graph))
        names = [ENCODER, STEP, *loaded.tokenizers.save(tmp)]
        files = {name: file_entry(tmp / name) for name in names}
        config = runtime_config(loaded) | {"export_id": export_id, "files": files}
        atomic_write_text(tmp / CONFIG, json.dumps(config, indent=2) + "\n")
