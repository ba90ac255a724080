"""Location-aware attention (Chorowski et al. 2015, "Attention-Based Models for Speech
Recognition", eqs. 5-9): the score of source position j also reads where the previous step
attended, through k filters convolved over the previous weights a_{t-1}:

    f_t = F * a_{t-1}          e_tj = w^T tanh(W q_t + V h_j + U f_tj + b)

A plugin for nmt: list this file under `plugins:` in a config (or pass --plugin location.py)
and set `model.attention.type: location`; its options go under `model.attention.options`.
"""

from dataclasses import dataclass

import torch
from torch import nn

from nmt.config import setting
from nmt.model.attention import Attention
from nmt.model.linear import Linear


class LocationAware(Attention, name="location"):
    @dataclass
    class Options:
        filters: int = setting(10, "k: filters convolved over the previous weights")
        width: int = setting(21, "r: each filter's width in source positions (odd)")

        def __post_init__(self):
            if self.filters < 1 or self.width < 1 or self.width % 2 == 0:
                raise ValueError("filters must be at least 1 and width an odd number")

    def __init__(self, query_dim, memory_dim, cfg):
        super().__init__(query_dim, memory_dim, cfg)
        dim, o = cfg.dim or query_dim, self.options
        self.W = Linear(query_dim, dim)  # W q_t + b
        self.V = Linear(memory_dim, dim, bias=False, once_per_batch=True)
        self.F = nn.Conv1d(1, o.filters, o.width, padding=o.width // 2, bias=False)
        self.U = Linear(o.filters, dim, bias=False)
        self.w = Linear(dim, 1, bias=False)

    def prepare(self, memory, mask):
        return self.V(memory)  # V h_j: once per batch, shared by every step and beam

    def initial_state(self, memory, mask):
        return mask.new_zeros(mask.shape, dtype=torch.float32)  # a_0: nothing attended yet

    def score(self, query, keys, state):  # state (B, T, S): a_{t-1} of each query
        B, T, S = state.shape
        f = self.F(state.reshape(B * T, 1, S).to(self.F.weight.dtype)).transpose(1, 2).reshape(B, T, S, -1)
        hidden = torch.tanh(self.W(query)[:, :, None] + keys[:, None] + self.U(f.to(keys.dtype)))
        return self.w(hidden).squeeze(-1)

    # next_state is the base class's: the new weights a_t are the next step's state
