"""The decoder's side of a training step as CUDA graphs, one per shape bucket.

Why: on a GPU, a step of an RNN decoder is thousands of small kernels, a few dozen per target
position, forward and backward; launching them from Python, not computing them, set the speed
(nmt and OpenNMT-py both made ~30 steps/s on an H200 whatever the batch size). Captured as a
CUDA graph, the decoder's forward and its backward are one launch each.

A graph replays one shape, so a batch is padded up to its bucket: rows, source and target
lengths rounded up to multiples of `ROUND`. The padding changes nothing: padded source positions
are masked (exactly zero attention weight), padded target positions and rows count 0 in the
loss and its gradients. A bucket is captured when first seen (at most `MAX_GRAPHS`; others run
eagerly), with the random state put back afterwards, so which path a batch takes depends on its
shape alone and a resumed run takes the same ones. The encoder stays eager: packing variable
lengths for cuDNN is a handful of calls.

Used for single-batch steps of one process with full teacher forcing; anything else (gradient
accumulation, torchrun, scheduled sampling, the CPU) takes the eager path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import Config
from nmt.train import distributed
from nmt.vocab import PAD

ROUND = 8  # bucket granularity: also what tensor cores like
MAX_GRAPHS = 64  # each holds its activations (~150 MB at batch 64 for the bench model)


def bucket(n: int) -> int:
    return -(-n // ROUND) * ROUND


def padded(
    memory: Tensor, h0: Tensor, c0: Tensor, mask: Tensor, tgt_in: Tensor, tgt_out: Tensor
) -> tuple[tuple[int, int, int], tuple[Tensor, ...]]:
    """The bucket (rows, source length, target length) of a batch, and `DecoderLoss`'s
    arguments padded to it: zero annotations and states, masked source positions, PAD targets."""
    (B, S), T = mask.shape, tgt_in.size(1)
    key = bucket(B), bucket(S), bucket(T)
    rows, src, tgt = key[0] - B, key[1] - S, key[2] - T
    return key, (
        F.pad(memory, (0, 0, 0, src, 0, rows)),
        F.pad(h0, (0, 0, 0, rows)),
        F.pad(c0, (0, 0, 0, rows)),
        F.pad(mask, (0, src, 0, rows), value=False),
        F.pad(tgt_in, (0, tgt, 0, rows), value=PAD),
        F.pad(tgt_out, (0, tgt, 0, rows), value=PAD),
    )


def uses_graphs(cfg: Config, device: torch.device) -> bool:
    """Whether training steps replay CUDA graphs of the decoder (`nmt.train.graphs`): on CUDA,
    one process, one batch a step, teacher forcing (scheduled sampling runs eagerly anyway),
    no guided alignment (its loss reads the attention weights, which the graphs keep inside)."""
    return (
        cfg.train.cuda_graphs
        and not cfg.train.guided_alignment.links
        and device.type == "cuda"
        and cfg.train.update_every == 1
        and distributed.rank_and_world()[1] == 1
    )


class DecoderLoss(nn.Module):
    """Decoder, output layer and loss as one module, the unit a graph captures; its parameters
    are the decoder's own (shared, not copied)."""

    def __init__(self, decoder: nn.Module, smoothing: float):
        super().__init__()
        self.decoder, self.smoothing = decoder, smoothing

    def forward(
        self, memory: Tensor, h0: Tensor, c0: Tensor, mask: Tensor, tgt_in: Tensor, tgt_out: Tensor
    ) -> tuple[Tensor, Tensor]:
        """(summed objective, summed NLL) of the teacher-forced target, padding excluded."""
        mem = self.decoder.prepare(memory, mask)
        pre_output, _ = self.decoder.features(tgt_in, self.decoder.init_state(h0, c0, mem), mem)
        target = tgt_out.flatten()
        return self.decoder.output_layer.loss(pre_output.flatten(0, 1), target, self.smoothing, target != PAD)


class DecoderGraphs:
    """Captured `DecoderLoss` graphs by bucket (rows, source length, target length)."""

    def __init__(self, decoder: nn.Module, smoothing: float):
        self.graphs: dict[tuple[int, int, int], nn.Module] = {}
        self.eager = DecoderLoss(decoder, smoothing)  # past MAX_GRAPHS

    def loss(
        self, memory: Tensor, h0: Tensor, c0: Tensor, mask: Tensor, tgt_in: Tensor, tgt_out: Tensor
    ) -> tuple[Tensor, Tensor]:
        """(summed objective, summed NLL) through the batch's bucket's graph, captured now if
        new; eagerly once `MAX_GRAPHS` are made."""
        key, args = padded(memory, h0, c0, mask, tgt_in, tgt_out)
        graphed = self.graphs.get(key)
        if graphed is None and len(self.graphs) < MAX_GRAPHS:
            graphed = self.graphs[key] = self._capture(args)
        if graphed is None:
            return self.eager(memory, h0, c0, mask, tgt_in, tgt_out)
        return graphed(*args)

    def _capture(self, args: tuple[Tensor, ...]) -> nn.Module:
        """A graphed `DecoderLoss` for the shapes of `args`; the warm-up runs and the capture
        draw dropout masks, so the random state is put back after them."""
        if hasattr(torch.autograd.graph, "set_warn_on_accumulate_grad_stream_mismatch"):
            # torch >= 2.10 warns that the weights' gradient accumulators were made on the
            # capture's side stream: harmless here (one event wait per weight and step)
            torch.autograd.graph.set_warn_on_accumulate_grad_stream_mismatch(False)
        rng = torch.cuda.get_rng_state()
        samples = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
        graphed = torch.cuda.make_graphed_callables(
            DecoderLoss(self.eager.decoder, self.eager.smoothing), samples, allow_unused_input=True
        )
        torch.cuda.set_rng_state(rng)
        return graphed
