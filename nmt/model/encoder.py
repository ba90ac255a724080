"""Bidirectional LSTM encoder: annotations h_j = [h->_j; h<-_j] (Bahdanau 2015 §3.2)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.config import EncoderConfig
from nmt.model import linear
from nmt.model.dropout import Dropout
from nmt.model.padded_lstm import padded_lstm
from nmt.vocab import PAD


class Encoder(nn.Module):
    def __init__(self, vocab_size: int, embedding: int, cfg: EncoderConfig, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embedding, padding_idx=PAD)
        self.dropout = Dropout(dropout)
        self.rnn = nn.LSTM(
            embedding,
            cfg.hidden,
            num_layers=cfg.layers,
            batch_first=True,
            bidirectional=True,
            dropout=cfg.dropout if cfg.layers > 1 else 0.0,
        )
        self.layers, self.hidden = cfg.layers, cfg.hidden

    def forward(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """src (B, S), src_len (B,) -> memory (B, S, 2H) and final (h, c), each (L, 2, B, H).

        Packing makes each direction's final state the one at the sentence's true end (the
        backward one at position 1), not after a run over padding; `enforce_sorted=False` means
        the caller need not sort. Positions past a sentence's end are zeros in `memory`.
        With bf16 operands on a CPU with bf16 units, the same on oneDNN's RNN (`padded_lstm`).
        """
        x = self.dropout(self.embed(src))
        B = src.size(0)
        if self._on_bf16_units(x):
            memory, h, c = padded_lstm(self.rnn, x, src_len)
            return memory, (h.view(self.layers, 2, B, self.hidden), c.view(self.layers, 2, B, self.hidden))
        # Rows already longest first (a training batch on a GPU, `Batch.to`) need no sorting
        # indices, whose copy to the GPU waits for it; the CPU keeps the path it always had.
        src_len = src_len.cpu()
        ordered = src.is_cuda and bool((src_len[:-1] >= src_len[1:]).all())
        packed = pack_padded_sequence(x, src_len, batch_first=True, enforce_sorted=ordered)
        out, (h, c) = self.rnn(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        return memory, (h.view(self.layers, 2, B, self.hidden), c.view(self.layers, 2, B, self.hidden))

    def _on_bf16_units(self, x: Tensor) -> bool:
        """Whether the LSTM's products take bf16 operands (`nmt.model.linear.use_operands`) on a
        CPU with bf16 units (emulated bf16 keeps the packed fp32 LSTM), and oneDNN applies."""
        weight = getattr(self.rnn, "weight_ih_l0", None)  # an int8 LSTM has none
        return (
            weight is not None
            and linear.BF16_UNITS
            and linear.operands(weight) == torch.bfloat16
            and linear.onednn_applies(x, weight)
        )
