"""The encoder's bidirectional LSTM in bf16 on oneDNN's RNN, over padded sentences.

Why: torch runs a packed sequence (what keeps each sentence's final state at its true end) on
its own LSTM, one fp32 product per position and direction; oneDNN's RNN takes the whole padded
batch per direction, in bf16 where the CPU has bf16 units, but no packing. On an AVX512-BF16
EPYC (2 threads) a bench batch's encoder, forward and backward, took 62 ms packed in fp32 and
33 ms here (docs/notes/performance-history.md §23.14).

Padding without packing, exactly: each direction reads its sentences left-aligned (the backward
one each sentence reversed within its length), and the padding positions carry one extra input
feature, 1 there and 0 elsewhere, whose weights push the input gate to 0 and the forget gate to
1, so a padding step leaves the cell state as it was: the state after the last position is each
sentence's own final state. Their gate gradients are exactly 0 too, so the weights' gradients
are those of the words alone; the outputs at the padding are zeroed, as packing leaves them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt.model.dropout import dropout

SATURATE = 1e4  # pushes a gate's sigmoid to exactly 0 or 1 in fp32 and in bf16 accumulation


def _padding_weights(hidden: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The column of the padding feature: -SATURATE for the input gate's rows, +SATURATE for
    the forget gate's (torch's gate order i, f, g, o), 0 for the rest."""
    column = torch.zeros(4 * hidden, 1, dtype=dtype, device=device)
    column[:hidden] = -SATURATE
    column[hidden : 2 * hidden] = SATURATE
    return column


def _reversal(lengths: Tensor, steps: int) -> Tensor:
    """(B, S) positions that reverse each row's first `lengths` positions and keep its padding."""
    positions = torch.arange(steps, device=lengths.device).unsqueeze(0)
    reversed_ = lengths.unsqueeze(1) - 1 - positions
    return torch.where(reversed_ >= 0, reversed_, positions)


def _direction(rnn: nn.LSTM, x: Tensor, layer: int, suffix: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """One direction of one layer over x (B, S, I + 1) -> outputs (B, S, H) and final cell (B, H)."""
    w_ih, w_hh, b_ih, b_hh = (
        getattr(rnn, f"{name}_l{layer}{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    )
    w_ih = torch.cat([w_ih, _padding_weights(rnn.hidden_size, w_ih.dtype, x.device)], 1)
    weights = [w.to(dtype) for w in (w_ih, w_hh, b_ih, b_hh)]
    zeros = x.new_zeros(1, x.size(0), rnn.hidden_size, dtype=dtype)
    out, _, c = torch._VF.lstm(x.to(dtype), (zeros, zeros), weights, True, 1, 0.0, rnn.training, False, True)
    return out, c[0]


def padded_lstm(
    rnn: nn.LSTM, x: Tensor, lengths: Tensor, dtype: torch.dtype = torch.bfloat16
) -> tuple[Tensor, Tensor, Tensor]:
    """A bidirectional `rnn` (batch_first) over x (B, S, I) with `lengths` (B,) -> outputs
    (B, S, 2H), zero at the padding, and final (h, c), each (L * 2, B, H), as the packed
    sequence gives them: in float32, products and states in `dtype`."""
    B, S = x.shape[:2]
    lengths = lengths.to(x.device)
    valid = torch.arange(S, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)
    padding = (~valid).unsqueeze(-1).to(x.dtype)
    order = _reversal(lengths, S)
    last = (lengths - 1).view(B, 1, 1)
    hs, cs = [], []
    for layer in range(rnn.num_layers):
        if layer > 0:
            x = dropout(x, rnn.dropout, rnn.training)
        forward, c_forward = _direction(rnn, torch.cat([x, padding], -1), layer, "", dtype)
        flipped = torch.cat([x.gather(1, order.unsqueeze(-1).expand_as(x)), padding], -1)
        backward, c_backward = _direction(rnn, flipped, layer, "_reverse", dtype)
        for out, c in ((forward, c_forward), (backward, c_backward)):
            hs.append(out.gather(1, last.expand(B, 1, out.size(-1))).squeeze(1))
            cs.append(c)
        backward = backward.gather(1, order.unsqueeze(-1).expand_as(backward))
        x = torch.cat([forward, backward], -1).float() * valid.unsqueeze(-1)
    return x, torch.stack(hs).float(), torch.stack(cs).float()
