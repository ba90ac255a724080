"""nmt.model.padded_lstm: the encoder's bidirectional LSTM over padded sentences on oneDNN's RNN
gives what the packed sequence gives (outputs, each sentence's final states, every gradient),
in bf16 within bf16 rounding, and the encoder takes it for bf16 operands on bf16 units only."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.config import EncoderConfig
from nmt.model import encoder, linear
from nmt.model.padded_lstm import padded_lstm

pytestmark = pytest.mark.skipif(not linear.ONEDNN, reason="this torch build has no oneDNN")

LENGTHS = torch.tensor([7, 3, 5, 1, 7, 2])  # unsorted, one of a single word, padding in most rows


def packed(rnn, x, lengths):
    out, (h, c) = rnn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    return pad_packed_sequence(out, batch_first=True, total_length=x.size(1))[0], h, c


def outputs_and_gradients(lstm, rnn, x, lengths):
    """A loss that reads the outputs and both final states -> them, and the gradients of the
    input and of every weight."""
    g = torch.Generator().manual_seed(1)
    out, h, c = lstm(rnn, x, lengths)
    loss = sum((t * torch.randn(t.shape, generator=g)).sum() for t in (out, h, c))
    return (out, h, c), torch.autograd.grad(loss, [x, *rnn.parameters()])


def inputs(layers: int) -> tuple[torch.nn.LSTM, torch.Tensor]:
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(16, 8, num_layers=layers, batch_first=True, bidirectional=True)
    valid = (torch.arange(7) < LENGTHS[:, None]).unsqueeze(-1)
    x = (torch.randn(len(LENGTHS), 7, 16) * valid).requires_grad_()  # zeros at the padding, as embedded
    return rnn, x


@pytest.mark.parametrize("layers", [1, 2])
def test_in_fp32_it_is_the_packed_lstm(layers):
    rnn, x = inputs(layers)
    expected, expected_grads = outputs_and_gradients(packed, rnn, x, LENGTHS)
    mine, grads = outputs_and_gradients(lambda *a: padded_lstm(*a, dtype=torch.float32), rnn, x, LENGTHS)
    for a, e in zip((*mine, *grads), (*expected, *expected_grads), strict=True):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)
    assert mine[0][LENGTHS[:, None] <= torch.arange(7)].abs().max() == 0  # zeros at the padding


@pytest.mark.skipif(not linear.BF16_UNITS, reason="this CPU has no bf16 units")
def test_in_bf16_it_is_the_packed_lstm_within_bf16_rounding():
    rnn, x = inputs(2)
    expected, expected_grads = outputs_and_gradients(packed, rnn, x, LENGTHS)
    mine, grads = outputs_and_gradients(padded_lstm, rnn, x, LENGTHS)
    for a, e in zip((*mine, *grads), (*expected, *expected_grads), strict=True):
        assert a.dtype == torch.float32
        assert (a - e).norm() / e.norm() < 3e-2


@pytest.mark.parametrize("units", [True, False])
def test_the_encoder_takes_it_for_bf16_operands_on_bf16_units_only(units, monkeypatch):
    if units and not linear.BF16_UNITS:
        pytest.skip("this CPU has no bf16 units")
    monkeypatch.setattr(linear, "BF16_UNITS", units)
    calls = []
    monkeypatch.setattr(encoder, "padded_lstm", lambda *a: calls.append(1) or padded_lstm(*a))
    torch.manual_seed(0)
    enc = encoder.Encoder(50, 16, EncoderConfig(hidden=8, layers=1, dropout=0.0), dropout=0.0).eval()
    src = torch.randint(4, 50, (len(LENGTHS), 7)) * (torch.arange(7) < LENGTHS[:, None])
    fp32 = enc(src, LENGTHS)
    assert not calls  # fp32 operands: the packed LSTM
    linear.use_operands(enc, torch.bfloat16)
    bf16 = enc(src, LENGTHS)
    assert len(calls) == int(units)
    for a, e in zip((bf16[0], *bf16[1]), (fp32[0], *fp32[1]), strict=True):
        assert a.shape == e.shape and a.dtype == torch.float32
        assert (a - e).norm() / e.norm() < 3e-2
