"""int8 dynamic quantisation of the decoder for CPU decoding (`nmt translate --precision int8`).

The decoder step's matrix products dominate decoding: the output layer (hidden x vocabulary),
W_c (or Bahdanau's W_o) and the LSTM. Their weights become int8 with one scale per tensor, and
activations are quantised on the fly (fbgemm); the encoder and the attention stay fp32. This
changes the outputs slightly (docs/performance.md has its BLEU and speed), so `auto` takes it
only for a model whose BLEU check allows it (`nmt precision`). OpenNMT-py offers the same for its RNNs.

It uses torch's eager dynamic quantisation (`torch.ao`), which torch marks deprecated in favour
of torchao; torchao has no int8 LSTM for CPU, so its warnings are silenced here.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from nmt.errors import NMTError
from nmt.model.precision import INT8_LAYERS
from nmt.model.seq2seq import Seq2Seq


def quantize_int8(model: Seq2Seq, device: torch.device) -> Seq2Seq:
    """`model` with its decoder's LSTM, output layer and W_c / W_o in int8, in place."""
    if device.type != "cpu":
        raise NMTError(f"--precision int8 is for CPU decoding; this model runs on {device}: add --device cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)
        _quantize(model.decoder)
    return model


def _quantize(decoder: nn.Module) -> None:
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    rnn, *linears = INT8_LAYERS
    quantize_dynamic(decoder, {rnn: default_dynamic_qconfig}, inplace=True)
    for name in linears:
        if hasattr(decoder, name):
            setattr(decoder, name, _int8_linear(getattr(decoder, name)))
    decoder.quantized = True


def _int8_linear(layer: nn.Linear) -> nn.Module:
    """An int8 copy of `layer` (its dropout, if any, is for training only)."""
    import torch.ao.nn.quantized.dynamic as nnqd
    from torch.ao.quantization import default_dynamic_qconfig

    plain = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    plain.weight, plain.bias = layer.weight, layer.bias
    plain.qconfig = default_dynamic_qconfig
    return nnqd.Linear.from_float(plain)
