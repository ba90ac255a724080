"""int8 dynamic quantisation for CPU decoding (`nmt translate --precision int8`).

Matrix products dominate decoding: the decoder step's output layer (hidden x vocabulary), W_c (or
Bahdanau's W_o) and LSTM, then the encoder's LSTM (a fifth of greedy decoding's time in int8 with
it in fp32). Their weights become int8 with one scale per tensor, and activations are quantised
on the fly, on the int8 kernels `nmt.model.precision` chose for the machine (fbgemm's or
oneDNN's); the embeddings and the attention stay fp32. This changes the outputs
slightly (docs/performance.md has its BLEU and speed), so `auto` takes it only for a model whose
BLEU check allows it (`nmt precision`). OpenNMT-py offers the same for its RNNs.

It uses torch's eager dynamic quantisation (`torch.ao`), which torch marks deprecated in favour
of torchao; torchao has no int8 LSTM for CPU, so its warnings are silenced here.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from nmt.errors import NMTError
from nmt.machine import int8_kernels
from nmt.model.precision import INT8_LAYERS
from nmt.model.seq2seq import Seq2Seq


def quantize_int8(model: Seq2Seq, device: torch.device, engine: str | None = None) -> Seq2Seq:
    """`model` with the layers of `INT8_LAYERS` in int8 for `engine`'s kernels (None: torch's
    default), in place."""
    if device.type != "cpu":
        raise NMTError(f"--precision int8 is for CPU decoding; this model runs on {device}: add --device cpu")
    with warnings.catch_warnings(), int8_kernels(engine):
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)
        for dotted in INT8_LAYERS:
            owner_name, name = dotted.split(".")
            owner = getattr(model, owner_name)
            if hasattr(owner, name):
                setattr(owner, name, _int8(getattr(owner, name)))
    model.decoder.quantized = True
    return model


def _int8(layer: nn.Module) -> nn.Module:
    """An int8 copy of an LSTM or a linear layer (whose dropout, if any, is for training only)."""
    import torch.ao.nn.quantized.dynamic as nnqd
    from torch.ao.quantization import default_dynamic_qconfig

    if isinstance(layer, nn.LSTM):
        layer.qconfig = default_dynamic_qconfig
        return nnqd.LSTM.from_float(layer)
    plain = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    plain.weight, plain.bias = layer.weight, layer.bias
    plain.qconfig = default_dynamic_qconfig
    return nnqd.Linear.from_float(plain)
