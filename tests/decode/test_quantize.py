"""int8 decoding's quantisation (nmt.decode.quantize, nmt.machine): a scale for each weight row,
and activations of 8 bits exactly where the machine's int8 kernels sum such products without
saturating."""

import os
import platform
import subprocess
import sys

import pytest
import torch
from torch import nn

from nmt import machine
from nmt.decode import quantize

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not machine.int8_engines(),
    reason="int8 decoding runs on torch's x86 int8 kernels (fbgemm, oneDNN)",
)


def rows_of_scales(*scales: float) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.cat([torch.randn(8, 64, generator=generator) * s for s in scales])


def test_each_weight_row_keeps_its_own_scale():
    """Rows 1,000x apart in size each keep 255 levels of their own: one scale for the whole weight
    rounded the small rows to zero."""
    weight = rows_of_scales(1.0, 0.001)
    error = (machine.int8_weight(weight).dequantize() - weight).abs().amax(1)
    assert (error <= weight.abs().amax(1) / 254 * 1.0001).all()
    one_scale = torch.quantize_per_tensor(weight, float(weight.abs().max()) / 127, 0, torch.qint8)
    assert (one_scale.dequantize()[8:] == 0).all()


def test_an_int8_linear_layer_is_close_to_fp32_in_every_output():
    layer = nn.Linear(64, 16)
    with torch.no_grad():
        layer.weight.copy_(rows_of_scales(1.0, 0.001))
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    int8 = quantize.Int8Linear(layer, reduce_range=machine.int8_activation_bits() < 8)(x)
    exact = layer(x).detach()
    bias = layer.bias.detach()  # a small row's outputs are its bias and a little more
    assert ((int8 - exact).abs() <= (exact - bias).abs().amax(0) * 0.05 + 1e-6).all()


def activation_bits(env: dict[str, str]) -> int:
    code = "from nmt.machine import int8_activation_bits; print(int8_activation_bits())"
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_activations_take_8_bits_only_where_the_kernels_sum_them_exactly():
    """AVX2 kernels sum pairs of u8 x s8 products in int16, which saturates at 8 bits: held to
    AVX2, int8 takes 7. This CPU's own kernels take 8 where torch says it has VNNI."""
    avx2 = {"FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert activation_bits(avx2) == 7
    assert machine.int8_activation_bits() == (8 if torch.cpu._is_vnni_supported() else 7)
    assert machine.int8_line().startswith(f"int8: a scale a weight row, {machine.int8_activation_bits()}-bit")


def test_an_int8_lstm_keeps_each_layers_and_directions_weights_a_scale_a_row():
    """Every weight of every layer and direction, int8 with its rows' own scales, in torch's
    order; the biases as they were."""
    layer = nn.LSTM(32, 48, num_layers=2, bidirectional=True, batch_first=True)
    with torch.no_grad():  # each weight its own size, rows 100x apart: a swap or one scale shows
        for n, (name, weight) in enumerate(layer.named_parameters()):
            weight.mul_(n + 1)
            if name.startswith("weight"):
                weight[::2] /= 100
    int8 = quantize._int8_lstm(layer, reduce_range=True)
    weights, biases = int8.get_weight(), int8.get_bias()
    assert sorted(weights) == sorted(
        name for name, _ in layer.named_parameters() if name.startswith("weight")
    )
    for name, quantized in weights.items():
        fp32 = getattr(layer, name).detach()
        assert quantized.qscheme() == torch.per_channel_affine
        assert ((quantized.dequantize() - fp32).abs().amax(1) <= fp32.abs().amax(1) / 254 * 1.0001).all()
    assert sorted(biases) == sorted(name for name, _ in layer.named_parameters() if name.startswith("bias"))
    for name, bias in biases.items():
        assert torch.equal(bias, getattr(layer, name).detach())


def lstm_error(layer: nn.LSTM, x: torch.Tensor, reduce_range: bool) -> float:
    int8 = quantize._int8_lstm(layer, reduce_range)
    return float((int8(x)[0] - layer(x)[0]).abs().mean())


@pytest.mark.skipif(
    machine.int8_activation_bits() < 8, reason="this CPU's int8 kernels take 7-bit activations"
)
def test_an_int8_lstm_takes_the_machines_activation_bits():
    """The LSTM's products are packed again with the machine's bits (torch's module takes 7
    whatever the kernels): 8 bits run closer to fp32."""
    torch.manual_seed(0)
    layer = nn.LSTM(32, 48, num_layers=2, bidirectional=True, batch_first=True)
    x = torch.randn(4, 10, 32)
    with torch.no_grad():
        eight, seven = lstm_error(layer, x, False), lstm_error(layer, x, True)
    assert 0 < eight < seven < 0.05
