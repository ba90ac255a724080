"""Encoder + bridge + decoder, assembled from the model config. Knows nothing of training."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt.config import ModelConfig
from nmt.data.tokenizer import PAD
from nmt.model.bridge import build_bridge
from nmt.model.decoder import DecoderState, Memory, build_decoder
from nmt.model.encoder import Encoder
from nmt.model.init import initialise


class Seq2Seq(nn.Module):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int):
        super().__init__()
        self.cfg = cfg
        memory_dim = 2 * cfg.encoder.hidden
        self.encoder = Encoder(src_vocab, cfg.embedding, cfg.encoder, cfg.dropout)
        self.bridge = build_bridge(
            cfg.decoder.bridge, cfg.encoder.hidden, cfg.decoder.hidden, cfg.decoder.layers
        )
        self.decoder = build_decoder(tgt_vocab, memory_dim, cfg)
        if cfg.tie_embeddings:
            self.decoder.output_layer.weight = self.decoder.embed.weight
        initialise(self, cfg.init, cfg.init_scale)

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Memory, DecoderState]:
        memory, (h, c) = self.encoder(src, src_len)
        mask = src != PAD  # (B, S) True on real positions
        keys = self.decoder.attention.prepare(memory, mask)
        return Memory(memory, mask, keys), self.decoder.init_state(*self.bridge(h, c))

    def features(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher-forced pre-output vectors (B, T, P) and weights (B, T, S): the logits without
        the output layer, for a loss that applies it only where the target is real."""
        mem, state = self.encode(src, src_len)
        return self.decoder.features(tgt_in, state, mem)

    def forward(
        self,
        src: Tensor,
        src_len: Tensor,
        tgt_in: Tensor,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Logits (B, T, V) and attention weights (B, T, S) for the target prefix `tgt_in`.

        With `teacher_forcing` < 1 the next input is the reference token with that probability,
        else the model's own greedy prediction (detached), drawn per sentence and step
        (scheduled sampling, Bengio et al. 2015); this needs the step-by-step path.
        """
        mem, state = self.encode(src, src_len)
        if teacher_forcing >= 1.0:
            return self.decoder(tgt_in, state, mem)
        y, logits, weights = tgt_in[:, 0], [], []
        for t in range(tgt_in.size(1)):
            step_logits, state, step_weights = self.decoder.step(y, state, mem, t)
            logits.append(step_logits)
            weights.append(step_weights)
            if t + 1 < tgt_in.size(1):
                use_reference = torch.rand(y.size(0), generator=generator).to(y.device) < teacher_forcing
                y = torch.where(use_reference, tgt_in[:, t + 1], step_logits.detach().argmax(-1))
        return torch.stack(logits, 1), torch.stack(weights, 1)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
