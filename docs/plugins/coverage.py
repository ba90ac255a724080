"""Coverage attention (Tu et al. 2016, "Modeling Coverage for Neural Machine Translation",
§3.1.1, linguistic coverage with fertility): a running sum C_j of the attention each source
word has received, divided by its fertility Phi_j, joins its score, so the decoder can tell
what it has translated already and what it has left out:

    Phi_j = N sigmoid(U_f h_j)     C_tj = C_(t-1)j + a_tj / Phi_j
    e_tj = v^T tanh(W q_t + U h_j + V C_(t-1)j)

A plugin for nmt: list this file under `plugins:` in a config (or pass --plugin coverage.py)
and set `model.attention.type: coverage`; N goes under `model.attention.options`.
"""

from dataclasses import dataclass

import torch

from nmt.config import setting
from nmt.model.attention import Attention
from nmt.model.linear import Linear


class Coverage(Attention, name="coverage"):
    @dataclass
    class Options:
        fertility: float = setting(2.0, "N: the most target words a source word may cover; 0: Phi_j = 1")

        def __post_init__(self):
            if not self.fertility >= 0:
                raise ValueError("fertility must be a number >= 0")

    def __init__(self, query_dim, memory_dim, cfg):
        super().__init__(query_dim, memory_dim, cfg)
        dim = cfg.dim or query_dim
        self.W = Linear(query_dim, dim, bias=False)
        self.U = Linear(memory_dim, dim, bias=False, once_per_batch=True)
        self.V = Linear(1, dim, bias=False)
        self.v = Linear(dim, 1, bias=False)
        self.U_f = Linear(memory_dim, 1) if self.options.fertility else None

    def prepare(self, memory, mask):
        return self.U(memory)  # U h_j: once per batch

    def initial_state(self, memory, mask):  # (B, S, 2): C_0 = 0, and 1 / Phi_j
        N = self.options.fertility
        phi = (
            N * torch.sigmoid(self.U_f(memory).float())
            if N
            else torch.ones(*mask.shape, 1, device=mask.device)
        )
        return torch.cat([torch.zeros_like(phi), 1 / phi], -1)

    def score(self, query, keys, state):  # state (B, T, S, 2) of each query
        coverage = self.V(state[..., :1].to(keys.dtype))
        return self.v(torch.tanh(self.W(query)[:, :, None] + keys[:, None] + coverage)).squeeze(-1)

    def next_state(self, state, weights):
        covered = state[..., 0] + weights * state[..., 1]
        return torch.stack([covered, state[..., 1]], -1)
