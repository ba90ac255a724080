"""Fine-tuning: a new run that starts from a trained checkpoint's weights and tokenizers
(`train.init_from`, `nmt train --init-from`), with a fresh optimiser, schedule and step count.

The new data is encoded with the checkpoint's tokenizers, so the vocabulary cannot break; what
the model is (its architecture, its tokenizer, its languages and normalisation) must agree with
the checkpoint, and anything that does not is named in one line. What training does (dropout,
learning rate, budgets, data) is the new run's own.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from nmt.checkpoint import TRANSLATING, config_differences, model_weights, read_checkpoint, resolve_checkpoint
from nmt.config import Config, apply_override, config_from_dict
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.plugins import require
from nmt.rundir import CHECKPOINTS

# Keys a fine-tuning run may change: how the model is trained, not what it is.
TRAINING_KEYS = ("model.dropout", "model.encoder.dropout", "model.decoder.dropout", "model.attention.dropout")
TRAINING_KEYS += ("tokenizer.sampling_alpha", "tokenizer.sampling_nbest", "tokenizer.num_threads")
TRAINING_KEYS += ("tokenizer.input_sentence_size",)
# The sections, whole or in part, that say what a model is.
MODEL_KEYS = ("model.", "tokenizer.", "data.src_lang", "data.tgt_lang", "data.normalize")


def checkpoint_config(path: str | Path, overrides: list[str]) -> Config:
    """The config a checkpoint was trained with, under `overrides` (`--set`): the config of a
    fine-tuning run given no `--config`."""
    state = read_checkpoint(Path(path), mmap=True, entries=("config", "plugins"))
    require(state.get("plugins"), str(resolve_checkpoint(Path(path))))
    raw = state["config"]
    for item in overrides:
        apply_override(raw, item)
    return config_from_dict(raw, source=f"{resolve_checkpoint(Path(path))} (its config, with --set)")


def finetuned_name(path: str | Path) -> str:
    """The default run folder name of a run fine-tuned from `path`: its run's name + "-finetuned"."""
    checkpoint = resolve_checkpoint(Path(path))
    run = checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS else checkpoint.parent
    return f"{run.resolve().name}-finetuned"


@dataclasses.dataclass
class Start:
    """The checkpoint a fine-tuning run starts from, its contents and the line the run starts with."""

    path: Path
    state: dict[str, Any]

    def weights(self) -> dict[str, torch.Tensor]:
        return model_weights(self.state)

    @property
    def note(self) -> str:
        step = self.state.get("progress", {}).get("step", "?")
        return f"fine-tuning from {self.path} (step {step}): optimiser, schedule and step count start afresh"


def starting_point(cfg: Config) -> Start | None:
    """The checkpoint a fine-tuning run starts from, checked to agree with `cfg`; None when
    `train.init_from` is not set. The first key of the model or tokenizer that differs from the
    checkpoint's is named in one line, as are a model without weights and tokenizers that do not
    load (the weights' shapes are checked against the model, once built: `check_fit`)."""
    if not cfg.train.init_from:
        return None
    path = resolve_checkpoint(Path(cfg.train.init_from))
    state = read_checkpoint(path, mmap=True, entries=TRANSLATING)
    require(state.get("plugins"), str(path))
    for key, ours, checkpoint in config_differences(dataclasses.asdict(cfg), state["config"]):
        if key.startswith(MODEL_KEYS) and key not in TRAINING_KEYS:
            raise NMTError(
                f"train.init_from: {key} is {json.dumps(checkpoint)} in {path} but "
                f"{json.dumps(ours)} in this config; a fine-tuned model keeps its checkpoint's model "
                "and tokenizer: set it as the checkpoint has it (without --config, the checkpoint's "
                "config is the starting one)"
            )
    if not state["model"]:
        raise NMTError(f"{path}: its model holds no weights; fine-tune from another checkpoint of its run")
    try:
        TokenizerPair.from_state(state["tokenizers"])
    except (KeyError, TypeError, RuntimeError, OSError):  # SentencePiece: RuntimeError "INTERNAL: ..."
        raise NMTError(
            f"{path}: a damaged checkpoint: SentencePiece cannot load its tokenizers; fine-tune from "
            "another checkpoint of its run (best.pt, last.pt, step-N.pt)"
        ) from None
    return Start(path, state)


def check_fit(model: torch.nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    """`weights` (those of the checkpoint at `path`, `Start.path`) are `model`'s (built from this
    run's config): each of its parameters, of its shape, and nothing else. The first that is not
    is named in one line, where load_state_dict would raise a page listing them all."""
    fix = "fine-tune with the model sizes its weights have (its own config), or from another checkpoint"
    expected = model.state_dict()
    for name, needed in expected.items():
        held = weights.get(name)
        if not isinstance(held, torch.Tensor):
            raise NMTError(f"{path}: its weights have no {name}, which this run's model needs; {fix}")
        if held.shape != needed.shape:
            raise NMTError(
                f"{path}: {name} has the shape {tuple(held.shape)} there, but this run's model needs "
                f"{tuple(needed.shape)}; {fix}"
            )
    if unknown := sorted(set(weights) - set(expected)):
        raise NMTError(f"{path}: its weights hold {unknown[0]}, which this run's model has not; {fix}")
