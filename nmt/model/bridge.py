"""The decoder's initial state (h_0, c_0) from the encoder's final states, one class per choice."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt.model.linear import Linear
from nmt.registry import Registry


class Bridge(Registry, nn.Module, kind="bridge"):
    """Maps final encoder states h, c, each (L_enc, 2, B, H), to (L_dec, B, D) each."""

    def __init__(self, enc_hidden: int, dec_hidden: int, dec_layers: int):
        super().__init__()
        self.D, self.L = dec_hidden, dec_layers

    def _zeros(self, h: Tensor) -> Tensor:
        return h.new_zeros(self.L, h.size(2), self.D)

    def _project(self, linear: nn.Linear, x: Tensor) -> Tensor:
        """tanh(W x) for x (B, in), reshaped to one state per decoder layer: (L, B, D)."""
        return torch.tanh(linear(x)).view(x.size(0), self.L, self.D).transpose(0, 1).contiguous()


class ZeroBridge(Bridge, name="none"):
    """h_0 = c_0 = 0: the decoder learns about the source through attention only."""

    def forward(self, h, c):
        return self._zeros(h), self._zeros(c)


class LastBridge(Bridge, name="last"):
    """Each decoder layer starts from the same encoder layer's [h->_last; h<-_first] (and c)."""

    def forward(self, h, c):
        return h.transpose(1, 2).flatten(2), c.transpose(1, 2).flatten(2)  # (L, B, 2H)


class LinearBridge(Bridge, name="linear"):
    """h_0 = tanh(W_h [h->_last; h<-_first]) and c_0 = tanh(W_c [c->_last; c<-_first]) from the
    top encoder layer, with separate weights for every decoder layer and for h and c."""

    def __init__(self, enc_hidden, dec_hidden, dec_layers):
        super().__init__(enc_hidden, dec_hidden, dec_layers)
        self.W_h = Linear(2 * enc_hidden, dec_layers * dec_hidden)
        self.W_c = Linear(2 * enc_hidden, dec_layers * dec_hidden)

    def forward(self, h, c):
        top_h, top_c = h[-1].transpose(0, 1).flatten(1), c[-1].transpose(0, 1).flatten(1)  # (B, 2H)
        return self._project(self.W_h, top_h), self._project(self.W_c, top_c)


class BackwardBridge(Bridge, name="backward"):
    """Bahdanau (2015) App. A.2.2: s_0 = tanh(W_s h<-_1), the backward encoder's state at the first
    source word (top layer); the paper's GRU has no cell, so c_0 = 0."""

    def __init__(self, enc_hidden, dec_hidden, dec_layers):
        super().__init__(enc_hidden, dec_hidden, dec_layers)
        self.W_s = Linear(enc_hidden, dec_layers * dec_hidden)

    def forward(self, h, c):
        return self._project(self.W_s, h[-1, 1]), self._zeros(c)
