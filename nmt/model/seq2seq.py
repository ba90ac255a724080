"""Encoder + bridge + decoder, assembled from the model config. Knows nothing of training.

`encode` and `step` are the whole interface the searches need (`decode.search.StepModel`);
`features` and `forward` are teacher forcing over a whole target.
"""

from __future__ import annotations

from torch import Tensor, nn

from nmt.config import ModelConfig
from nmt.model.bridge import Bridge
from nmt.model.decoder import Decoder, DecoderState, Memory
from nmt.model.encoder import Encoder
from nmt.model.init import initialise
from nmt.vocab import PAD


class Seq2Seq(nn.Module):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int):
        super().__init__()
        memory_dim = 2 * cfg.encoder.hidden
        self.encoder = Encoder(src_vocab, cfg.embedding, cfg.encoder, cfg.dropout)
        self.bridge = Bridge.build(
            cfg.decoder.bridge, cfg.encoder.hidden, cfg.decoder.hidden, cfg.decoder.layers
        )
        self.decoder = Decoder.build(cfg.decoder.style, tgt_vocab, memory_dim, cfg)
        if cfg.tie_embeddings:
            self.decoder.output_layer.weight = self.decoder.embed.weight
        initialise(self, cfg.init, cfg.init_scale)

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Memory, DecoderState]:
        """src (B, S) -> the memory every decoder step reads, and the decoder's first state."""
        memory, mask, h0, c0 = self.annotate(src, src_len)
        mem = self.decoder.prepare(memory, mask)
        return mem, self.decoder.init_state(h0, c0, mem)

    def annotate(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """src (B, S) -> annotations (B, S, M), their mask (B, S) and the decoder's first (h, c),
        as plain tensors (what a CUDA graph of the decoder takes, `nmt.train.graphs`)."""
        memory, (h, c) = self.encoder(src, src_len)
        return memory, src != PAD, *self.bridge(h, c)

    def step(
        self, y_prev: Tensor, state: DecoderState, mem: Memory, positions: Tensor, vocabulary=None
    ) -> tuple[Tensor, DecoderState, Tensor]:
        """One target position per row: y_prev (B,) -> logits (B, V) (or (B, U), the pieces of a
        shortlist's `vocabulary`), new state, weights (B, S)."""
        return self.decoder.step(y_prev, state, mem, positions, vocabulary)

    def features(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher-forced pre-output vectors (B, T, P) and weights (B, T, S): the logits without
        the output layer, for a loss that applies it only where the target is real."""
        mem, state = self.encode(src, src_len)
        return self.decoder.features(tgt_in, state, mem)

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher-forced logits (B, T, V) and attention weights (B, T, S) for the prefix `tgt_in`."""
        mem, state = self.encode(src, src_len)
        return self.decoder(tgt_in, state, mem)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
