"""Model files: training checkpoints, their averages, and release directories.

A checkpoint is one self-contained file with config, weights and tokenizer bytes; only plain
types are stored, so loading uses `torch.load(weights_only=True)`; writes are atomic. A release
directory (written by `nmt release`) holds `model.safetensors`, `config.yaml` and the
SentencePiece model(s), and loads without any pickle. `load_model` takes any of them (a
checkpoint, a run directory, a release directory, or `hf://user/repo`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmt.config import Config, config_from_dict, load_config
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import atomic_write
from nmt.hub import is_hub_path, resolve_model_path
from nmt.model.seq2seq import Seq2Seq
from nmt.rundir import BEST, CHECKPOINTS, LAST

FORMAT_VERSION = 1
RELEASE_WEIGHTS, RELEASE_CONFIG = "model.safetensors", "config.yaml"
ONNX_MARKER = "encoder.onnx"  # an `nmt export` directory: decoded by the onnx engine, not torch


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
    write_state(path, state)


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write a checkpoint dict atomically, straight into the temp file: serialised into memory
    first, a checkpoint with its optimiser state (~160 MB for the bench model) took that much
    more memory, which the allocator then kept for the rest of the run."""
    atomic_write(path, lambda f: torch.save(state, f))


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


def read_checkpoint(path: Path, device: torch.device | str = "cpu", mmap: bool = False) -> dict[str, Any]:
    """The checkpoint's contents, checked to be an nmt checkpoint of this format. `mmap` (CPU
    only): tensors stay in the file until touched, so a decoder never reads the optimiser state."""
    path = resolve_checkpoint(path)
    try:
        state = torch.load(path, map_location=device, weights_only=True, mmap=mmap)
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
    state = read_checkpoint(path, mmap=True)  # on the CPU: mapped to a GPU, all of it would be read
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


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """A checkpoint whose weights are the mean of the checkpoints' weights (computed in float64).

    Averaging only makes sense between snapshots of one model, so every checkpoint must have the
    first one's model config and tokenizers. The result keeps the first's config and tokenizers
    and no training state, so it translates but does not resume.
    """
    if len(paths) < 2:
        raise NMTError(f"averaging needs at least 2 checkpoints, got {len(paths)}")
    first = read_checkpoint(paths[0])
    total = {name: value.double() for name, value in model_weights(first).items()}
    for path in paths[1:]:
        state = read_checkpoint(path)
        if state["config"]["model"] != first["config"]["model"]:
            raise NMTError(
                f"{path}: its model config differs from {paths[0]}'s; only snapshots of one model average"
            )
        if state["tokenizers"] != first["tokenizers"]:
            raise NMTError(
                f"{path}: its vocabulary differs from {paths[0]}'s; only snapshots of one model average"
            )
        weights = model_weights(state)
        if weights.keys() != total.keys() or any(weights[k].shape != total[k].shape for k in total):
            raise NMTError(f"{path}: its weights do not match {paths[0]}'s (names or shapes)")
        for name, value in weights.items():
            total[name] += value.double()
    dtypes = {name: value.dtype for name, value in model_weights(first).items()}
    averaged = {name: (value / len(paths)).to(dtypes[name]) for name, value in total.items()}
    return {
        "format_version": FORMAT_VERSION,
        "config": first["config"],
        "model": averaged,
        "tokenizers": first["tokenizers"],
        "averaged_from": [str(p) for p in paths],
    }


def is_release(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / RELEASE_WEIGHTS).is_file()


def load_release(directory: Path, device: torch.device | str = "cpu") -> LoadedModel:
    """A model from a release directory: YAML, SentencePiece and safetensors, no pickle at all.

    fp16 releases are widened back to fp32, the dtype every search runs in.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    directory = Path(directory)
    cfg = load_config(directory / RELEASE_CONFIG)
    tok = TokenizerPair.load(directory)
    try:
        weights = load_file(directory / RELEASE_WEIGHTS, device=str(device))
    except (SafetensorError, OSError) as e:
        raise NMTError(f"{directory / RELEASE_WEIGHTS}: not a readable safetensors file ({e})") from None
    model = Seq2Seq(cfg.model, len(tok.src), len(tok.tgt))
    expected = model.state_dict()
    tied = {name for name in expected if name not in weights and _shares_storage(name, weights, expected)}
    missing = set(expected) - set(weights) - tied
    unknown = set(weights) - set(expected)
    if missing or unknown:
        raise NMTError(
            f"{directory}: the weights do not fit the model of its {RELEASE_CONFIG} "
            f"(missing {sorted(missing)[:3]}, unexpected {sorted(unknown)[:3]})"
        )
    model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=False)
    model.to(device).eval()
    return LoadedModel(cfg, model, tok, {})


def _shares_storage(name: str, weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    """Whether parameter `name` is tied to one that the weights do hold (tied embeddings)."""
    pointer = expected[name].data_ptr()
    return any(expected[other].data_ptr() == pointer for other in weights if other in expected)


def load_model(path: Path | str, device: torch.device | str = "cpu") -> LoadedModel:
    """Whatever a user gives as `-m`: a checkpoint file, a run directory (its best checkpoint), a
    release directory, or `hf://user/repo[@revision]` (a release on the hub, cached)."""
    local = resolve_model_path(path)
    if is_release(local):
        return load_release(local, device)
    if (local / ONNX_MARKER).is_file():
        raise NMTError(f"{path}: is an ONNX export; decode it with --engine onnx")
    if is_hub_path(path):
        raise NMTError(f"{path}: the hub repository holds no {RELEASE_WEIGHTS}; is it an nmt release?")
    return load_checkpoint(local, device)
