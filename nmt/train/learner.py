"""The model and what updates it: the loss, the optimiser, its learning-rate schedule and the
precision (AMP and its gradient scaler); one optimiser step, and that state in and out of a
checkpoint."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from nmt.allocator import describe as describe_allocator
from nmt.checkpoint import model_weights, save_checkpoint
from nmt.config import Config
from nmt.data.batching import Batch
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.model.seq2seq import Seq2Seq, count_parameters
from nmt.train import distributed
from nmt.train.finetune import Start, check_fit
from nmt.train.graphs import DecoderGraphs, uses_graphs
from nmt.train.loss import TokenLoss, batch_loss
from nmt.train.precision import Precision
from nmt.train.schedule import Schedule, build_optimizer


def check_finite(nll: float, precision: Precision, steps: str, last_good: Path) -> None:
    """A non-finite training loss ends the run (under fp16 the scaler skips such steps instead)."""
    if not math.isfinite(nll) and not precision.scaler.is_enabled():
        raise NMTError(
            f"training diverged: non-finite loss {steps}; the last good checkpoint "
            f"is {last_good} (try a lower train.lr or train.clip)"
        )


class Learner:
    def __init__(
        self,
        cfg: Config,
        vocab: tuple[int, int],
        device: torch.device,
        precision: Precision,
        start: Start | None = None,
        resumed: tuple[dict[str, Any], Path] | None = None,
    ):
        """`start`: the checkpoint whose weights the model starts from (fine-tuning), else it is
        initialised afresh; `resumed`: a checkpoint and its path, whose weights, optimiser,
        schedule and scaler a resumed run continues from."""
        self.cfg, self.model_cfg, self.device, self.precision = cfg.train, cfg.model, device, precision
        self.model = Seq2Seq(cfg.model, *vocab)
        if start is not None:
            weights = start.weights()
            check_fit(self.model, weights, start.path)
            self.model.load_state_dict(weights)
        self.model.to(device)
        precision.settle(self.model, distributed.rank_and_world()[1])
        self.optimizer = build_optimizer(self.model.parameters(), cfg.train)
        self.schedule = Schedule.build(cfg.train.schedule, self.optimizer, cfg.train)
        smoothing = cfg.train.label_smoothing
        graphs = DecoderGraphs(self.model.decoder, smoothing) if uses_graphs(cfg, device) else None
        self.objective = TokenLoss(self.model, cfg.train, graphs)
        self.ddp_objective = distributed.wrap(self.objective, device)
        self.note = self.describe(distributed.rank_and_world()[1])  # the line a run starts with
        if resumed:
            self.restore(*resumed)

    def step(
        self, batches: list[Batch], step: int, generator: torch.Generator, last_good: Path
    ) -> tuple[torch.Tensor, int, bool | torch.Tensor, torch.Tensor | None]:
        """One optimiser step over `batches` (several = gradient accumulation): this process's
        summed NLL (a float64 tensor on the device, read when the loss is logged) and target
        tokens, whether the step was taken (AMP's scaler skips one that overflowed; under
        fp16 a bool tensor on the device, read with the loss: `Precision.step`), and guided
        alignment's summed [loss, rows] (None without links).

        The loss is normalised by the target tokens of the whole step (over every process under
        torchrun), so accumulating k batches or running on k processes equals one big batch.
        """
        world = distributed.rank_and_world()[1]
        step_tokens = distributed.all_reduce_sum(sum(b.n_tgt_tokens for b in batches), self.device)
        self.model.train()
        nll, tokens, guided = 0.0, 0, None
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            cache = self.objective.graphs is None
            with self.precision.autocast(cache), distributed.no_sync_unless(self.ddp_objective, last):
                sums = batch_loss(self.ddp_objective, batch, step, generator)
            if self.device.type == "cpu":  # free here; a GPU is checked when the loss is logged
                check_finite(float(sums.nll), self.precision, f"at step {step + 1}", last_good)
            self.precision.backward(sums.objective * world / step_tokens)
            nll, tokens = nll + sums.nll.double(), tokens + sums.tokens
            if sums.guided is not None:
                guided = sums.guided if guided is None else guided + sums.guided
        for parameter in self.frozen(step):
            parameter.grad = None  # no gradient: the optimiser leaves it (and its state) alone
        taken = self.precision.step(self.model, self.optimizer, self.cfg.clip)
        # Gradients go now, not before the next step: none are held while validating.
        self.optimizer.zero_grad(set_to_none=True)
        return nll, tokens, taken, guided

    def frozen(self, step: int) -> list[torch.nn.Parameter]:
        """The parameters `train.freeze` holds at `step` (0-based): the embeddings of both sides,
        or the whole encoder (its embeddings included), for the first `freeze_steps` steps."""
        if not self.cfg.freeze or (self.cfg.freeze_steps and step >= self.cfg.freeze_steps):
            return []
        parts = {
            "embeddings": [self.model.encoder.embed, self.model.decoder.embed],
            "encoder": [self.model.encoder],
        }
        return [p for name in self.cfg.freeze for module in parts[name] for p in module.parameters()]

    def describe(self, world: int) -> str:
        """What the model is and where it trains."""
        model = self.model_cfg
        return (
            f"model: {model.decoder.style} decoder, {model.attention.type} attention, "
            f"{count_parameters(self.model):,} parameters; device {self.device}, {self.precision.name}"
            + (f", {world} processes" if world > 1 else "")
            + f"; memory allocator {describe_allocator()}"
            + self.frozen_note()
        )

    def frozen_note(self) -> str:
        """What `train.freeze` holds, and for how long ('' when nothing)."""
        freeze, steps = self.cfg.freeze, self.cfg.freeze_steps
        return (
            f"; frozen: {', '.join(freeze)}" + (f" for the first {steps} steps" if steps else "")
            if freeze
            else ""
        )

    @contextmanager
    def weights(self, state: dict[str, torch.Tensor]) -> Iterator[None]:
        """The model with the weights `state` for a while (an average evaluated), then its own."""
        own = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.model.load_state_dict(state)
        try:
            yield
        finally:
            self.model.load_state_dict(own)

    def save(self, path: Path, cfg: Config, tok: TokenizerPair, run: dict[str, Any]) -> None:
        """A checkpoint of the weights and this state, with the run's own (`progress`, ...)."""
        save_checkpoint(path, cfg, self.model, tok, **self.state(), **run)

    def state(self) -> dict[str, Any]:
        """What a checkpoint needs of the optimiser, the schedule and the scaler."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "scaler": self.precision.scaler.state_dict(),
        }

    def restore(self, state: dict[str, Any], source: Path) -> None:
        """Weights, optimiser, schedule and scaler from the checkpoint `source`."""
        self.model.load_state_dict(model_weights(state))
        groups = len(state["optimizer"]["param_groups"])
        if groups != len(self.optimizer.param_groups):
            raise NMTError(
                f"{source}: its optimiser has {groups} parameter group(s), this run's has "
                f"{len(self.optimizer.param_groups)}: weight decay now spares biases; "
                "resume it with the nmt that wrote it, or start a new run"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.precision.scaler.load_state_dict(state["scaler"])
