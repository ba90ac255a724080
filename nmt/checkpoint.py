"""Checkpoint files: one self-contained file with config, weights and tokenizer bytes.

Only plain types are stored, so loading uses `torch.load(weights_only=True)`; writes are atomic.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmt.config import Config, config_from_dict
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import atomic_write
from nmt.model.seq2seq import Seq2Seq
from nmt.rundir import BEST, CHECKPOINTS, LAST

FORMAT_VERSION = 1


@dataclass
class LoadedModel:
    config: Config
    model: Seq2Seq
    tokenizers: TokenizerPair
    state: dict[str, Any]  # the whole checkpoint dict (step, optimiser state, ...)


def save_checkpoint(path: Path, cfg: Config, model: Seq2Seq, tok: TokenizerPair, **extra: Any) -> None:
    state = {
        "format_version": FORMAT_VERSION,
        "config": cfg.to_dict(),
        "model": model.state_dict(),
        "tokenizers": tok.to_state(),
        **extra,
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(path, lambda f: f.write(buffer.getbuffer()))


def resolve_checkpoint(path: Path) -> Path:
    """A run directory means its best checkpoint (or last, if no validation has run yet)."""
    path = Path(path)
    if path.is_dir():
        for name in (BEST, LAST):
            if (path / CHECKPOINTS / name).is_file():
                return path / CHECKPOINTS / name
        raise NMTError(f"{path}: run directory has no {CHECKPOINTS}/{BEST} or {CHECKPOINTS}/{LAST}")
    if not path.is_file():
        raise NMTError(f"{path}: checkpoint not found")
    return path


def read_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The checkpoint's contents, checked to be an nmt checkpoint of this format."""
    path = resolve_checkpoint(path)
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # torch raises many types for a file that is not a checkpoint
        raise NMTError(f"{path}: not an nmt checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise NMTError(f"{path}: not an nmt checkpoint")
    missing = [key for key in ("config", "model", "tokenizers") if key not in state]
    if missing:
        raise NMTError(f"{path}: a damaged nmt checkpoint (no {', '.join(missing)})")
    if state["format_version"] != FORMAT_VERSION:
        raise NMTError(
            f"{path}: checkpoint format {state['format_version']} is not supported by this nmt "
            f"(format {FORMAT_VERSION}); use the nmt version that wrote it"
        )
    return state


def model_weights(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The model's weights, without the duplicate `decoder.W_s.*` entries that checkpoints of
    nmt 0.1 stored beside `decoder.output_layer.*` (the same tensors under a second name)."""
    return {k: v for k, v in state["model"].items() if not k.startswith("decoder.W_s.")}


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> LoadedModel:
    """A ready model (eval mode, on `device`) with its config and tokenizers."""
    path = resolve_checkpoint(path)
    state = read_checkpoint(path, device)
    if not isinstance(state["config"], dict):
        raise NMTError(f"{path}: a damaged nmt checkpoint (its config is not a mapping)")
    cfg = config_from_dict(state["config"], source=f"{path} (its config)")
    try:
        tok = TokenizerPair.from_state(state["tokenizers"])
    except (KeyError, TypeError, RuntimeError, OSError):
        raise NMTError(f"{path}: a damaged nmt checkpoint (its tokenizer cannot be read)") from None
    model = Seq2Seq(cfg.model, len(tok.src), len(tok.tgt))
    try:
        model.load_state_dict(model_weights(state))
    except (RuntimeError, TypeError, AttributeError) as e:
        detail = " ".join(str(e).split())[:200]
        raise NMTError(f"{path}: its weights do not match its config ({detail})") from None
    model.to(device).eval()
    return LoadedModel(cfg, model, tok, state)
