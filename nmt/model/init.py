"""Parameter initialisation, chosen by `model.init` (a registry of schemes).

Why it matters: PyTorch's per-layer defaults draw embeddings from N(0, 1), so the 256-dimensional
inputs of every LSTM start with a norm of ~16 while its weights are U(±0.04); Luong et al. (2015,
§4.1) and OpenNMT-py draw every parameter from U(-0.1, 0.1) instead, and learn much faster early
on (docs/notes/performance-history.md §8).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

INITIALISERS: dict[str, Callable[[nn.Module, float], None]] = {}


def initialiser(name: str):
    def register(fn: Callable[[nn.Module, float], None]):
        INITIALISERS[name] = fn
        return fn

    return register


@initialiser("torch")
def torch_defaults(model: nn.Module, scale: float) -> None:
    """Leave PyTorch's per-layer defaults (embeddings N(0, 1), others U(±1/sqrt(fan_in)))."""


@initialiser("uniform")
def uniform(model: nn.Module, scale: float) -> None:
    """Every parameter from U(-scale, scale): Luong et al. 2015 with scale 0.1, OpenNMT-py's default."""
    for p in model.parameters():
        nn.init.uniform_(p, -scale, scale)


@initialiser("xavier")
def xavier(model: nn.Module, scale: float) -> None:
    """Glorot-uniform matrices and zero biases (JoeyNMT's default); `scale` is not used."""
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
        else:
            nn.init.zeros_(p)


def initialise(model: nn.Module, scheme: str, scale: float) -> None:
    INITIALISERS[scheme](model, scale)
    for module in model.modules():  # padding stays the zero vector whatever the scheme
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            nn.init.zeros_(module.weight.data[module.padding_idx])
