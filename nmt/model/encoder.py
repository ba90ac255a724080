"""Bidirectional LSTM encoder: annotations h_j = [h->_j; h<-_j] (Bahdanau 2015 §3.2)."""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.config import EncoderConfig
from nmt.vocab import PAD


class Encoder(nn.Module):
    def __init__(self, vocab_size: int, embedding: int, cfg: EncoderConfig, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embedding, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
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
        """
        x = self.dropout(self.embed(src))
        # Rows already longest first (a training batch on a GPU, `Batch.to`) need no sorting
        # indices, whose copy to the GPU waits for it; the CPU keeps the path it always had.
        src_len = src_len.cpu()
        ordered = src.is_cuda and bool((src_len[:-1] >= src_len[1:]).all())
        packed = pack_padded_sequence(x, src_len, batch_first=True, enforce_sorted=ordered)
        out, (h, c) = self.rnn(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        B = src.size(0)
        return memory, (h.view(self.layers, 2, B, self.hidden), c.view(self.layers, 2, B, self.hidden))
