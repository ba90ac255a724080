"""int8 dynamic quantisation for CPU decoding (`nmt translate --precision int8`).

Matrix products dominate decoding: the decoder step's output layer (hidden x vocabulary), W_c (or
Bahdanau's W_o) and LSTM, then the encoder's LSTM (a fifth of greedy decoding's time in int8 with
it in fp32). Their weights become int8 with a scale for each row (`nmt.machine.int8_weight`), and
activations are quantised on the fly, to 8 bits where the kernels add such products exactly, else
7 (`nmt.machine.int8_activation_bits`), on the int8 kernels `nmt.model.precision` chose for the
machine (fbgemm's or oneDNN's); the embeddings and the attention stay fp32. This changes the
outputs slightly (docs/performance.md has its BLEU and speed), so `auto` takes it only for a model
whose BLEU check allows it (`nmt precision`). OpenNMT-py offers int8 for its RNNs too, with one
scale a weight and 7-bit activations (torch's defaults).

It uses torch's eager dynamic quantisation (`torch.ao`), which torch marks deprecated in favour
of torchao; torchao has no int8 LSTM for CPU, so its warnings are silenced here.
"""

from __future__ import annotations

import warnings

import torch
import torch.ao.nn.quantized.dynamic as nnqd
from torch import nn
from torch.ao.nn.quantized.dynamic.modules.rnn import PackedParameter
from torch.ao.quantization import default_dynamic_qconfig

from nmt.errors import NMTError
from nmt.machine import int8_activation_bits, int8_kernels, int8_weight
from nmt.model.precision import INT8_LAYERS
from nmt.model.seq2seq import Seq2Seq


def quantize_int8(model: Seq2Seq, device: torch.device, engine: str | None = None) -> Seq2Seq:
    """`model` with the layers of `INT8_LAYERS` in int8 for `engine`'s kernels (None: torch's
    default), in place."""
    if device.type != "cpu":
        raise NMTError(f"--precision int8 is for CPU decoding; this model runs on {device}: add --device cpu")
    reduce_range = int8_activation_bits() < 8
    with warnings.catch_warnings(), int8_kernels(engine):
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "torch.quantize_per_", UserWarning)
        for dotted in INT8_LAYERS:
            owner_name, name = dotted.split(".")
            owner = getattr(model, owner_name)
            if hasattr(owner, name):
                layer = getattr(owner, name)  # (a layer's dropout, if any, is for training only)
                int8 = _int8_lstm if isinstance(layer, nn.LSTM) else Int8Linear
                setattr(owner, name, int8(layer, reduce_range))
    model.decoder.quantized = True
    return model


class Int8Linear(nnqd.Linear):
    """torch's dynamic int8 linear layer, with activations of the machine's bits (torch's take 7
    whatever the kernels)."""

    def __init__(self, layer: nn.Linear, reduce_range: bool):
        super().__init__(layer.in_features, layer.out_features)
        self.set_weight_bias(int8_weight(layer.weight), None if layer.bias is None else layer.bias.detach())
        self.reduce_range = reduce_range

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params, self.reduce_range)


def _int8_lstm(layer: nn.LSTM, reduce_range: bool) -> nnqd.LSTM:
    """An int8 copy of an LSTM: torch's module, each layer's and direction's products packed
    again with `int8_weight` and activations of the machine's bits (torch's take 7). torch builds
    its module only from a float one, packing each weight with one scale on the way: a few ms of
    a model's load, thrown away here."""
    layer.qconfig = default_dynamic_qconfig
    int8 = nnqd.LSTM.from_float(layer)
    cells = []
    for suffix in (
        f"l{n}{reverse}"
        for n in range(layer.num_layers)
        for reverse in ("", "_reverse")[: 1 + layer.bidirectional]
    ):
        weights, biases = (
            [getattr(layer, f"{kind}_{gate}_{suffix}").detach() for gate in ("ih", "hh")]
            for kind in ("weight", "bias")
        )
        packed = [
            torch.ops.quantized.linear_prepack(int8_weight(w), b)
            for w, b in zip(weights, biases, strict=True)
        ]
        cells.append(
            PackedParameter(
                torch.ops.quantized.make_quantized_cell_params_dynamic(*packed, *biases, reduce_range)
            )
        )
    int8._all_weight_values = nn.ModuleList(cells)
    return int8
