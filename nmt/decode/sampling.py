"""Sampling: each token drawn from the model's distribution (sharpened or flattened by a
temperature, cut to the top k tokens or the top p of the probability), one row per sample, with
the continuous batching of greedy search.

A sample's draws follow from the seed, the sentence's ids and the sample's number alone (a
random stream per row, inverse-CDF draws on the device), so a file gives the same samples at any
batch size, in any order, on the command line, through the API or a server; two identical lines
get the same samples.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.decode.search import Feed, GreedyPool, Results, StepModel
from nmt.device import to_device
from nmt.text.ranking import Source


def sample_tokens(logp: Tensor, uniforms: Tensor, cfg: DecodeConfig) -> Tensor:
    """One token per row of the log-probabilities `logp` (R, V), drawn with `uniforms` (R,) in
    [0, 1): from softmax(logp / temperature), cut to the `top_k` most probable tokens and to the
    fewest holding `top_p` of the probability (the most probable always stays). Tokens outside
    the cut, and those `restrict` forbade (-inf), have probability 0 and are never drawn.

    Safe at every setting the config accepts (nmt.config.TEMPERATURES, top_p in (0, 1]), in
    half precision too: the best token is scaled from 0, so a sharp temperature cannot turn
    every logit into -inf (a softmax of NaN), and a top_p below float32's least keeps it alone."""
    scaled = (logp - logp.amax(-1, keepdim=True)) / cfg.temperature
    k = min(cfg.top_k or scaled.size(-1), scaled.size(-1))
    values, order = scaled.topk(k, dim=-1)  # most probable first
    probs = values.softmax(-1)
    if cfg.top_p < 1:
        above = probs.cumsum(-1) - probs  # the probability of the tokens ranked above each
        cut = above >= cfg.top_p
        cut[:, 0] = False  # the most probable, whatever top_p rounds to
        probs = probs.masked_fill(cut, 0.0)
    cdf = probs.cumsum(-1)
    # The first rank whose CDF passes u * total: a token of probability 0 never does.
    rank = torch.searchsorted(cdf, uniforms.to(cdf)[:, None] * cdf[:, -1:], right=True)
    last = (probs > 0).sum(-1, keepdim=True) - 1  # rounding can put u * total on the last step
    return order.gather(1, torch.minimum(rank, last)).squeeze(1)


def draws(seed: int, ids: list[int], sample: int) -> random.Random:
    """The random stream of sample number `sample` of the sentence `ids`."""
    text = f"{seed}:{sample}:{','.join(map(str, ids))}".encode()
    return random.Random(int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big"))


class SamplePool(GreedyPool):
    """Greedy search's pool with drawn tokens; a row is one sample, its key (sentence, number)."""

    def join(self, group: list[Source]) -> None:
        super().join(group)
        for row in self.live[-len(group) :]:
            row.draws = draws(self.cfg.seed, row.source.ids, row.source.key[1])

    def choose(self, logp: Tensor) -> tuple[Tensor, Tensor]:
        uniforms = to_device([row.draws.random() for row in self.live], self.device, torch.float64)
        tokens = sample_tokens(logp, uniforms, self.cfg)
        return logp.gather(1, tokens[:, None]).squeeze(1), tokens


def sample(
    model: StepModel,
    sources: Iterable[Source | None],
    cfg: DecodeConfig,
    fits: Callable[[int, int], bool],
    device: torch.device,
    n: int = 1,
    attention: bool = True,
) -> Results:
    """`n` samples of every source, best first (by the model's score), yielded as each
    sentence's last sample finishes; `fits` counts samples, since each is a row."""

    def rows() -> Iterator[Source | None]:
        for source in sources:
            if source is None:  # a live feed with nothing ready
                yield None
            else:
                yield from (dataclasses.replace(source, key=(source.key, j)) for j in range(n))

    drawn: dict[Any, list] = {}
    pool = SamplePool(model, cfg, device, attention or cfg.coverage > 0)
    for (key, _), (hypothesis,) in pool.run(Feed(rows(), fits)):
        done = drawn.setdefault(key, [])
        done.append(hypothesis)
        if len(done) == n:
            yield key, sorted(drawn.pop(key), key=lambda h: -h.score)
