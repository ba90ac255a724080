"""Every attention against an explicit, loop-by-loop implementation of its paper's formula."""

import math
import typing

import pytest
import torch

from nmt.config import AttentionConfig, AttentionType
from nmt.model.attention import Attention, masked_softmax

TYPES = sorted(typing.get_args(AttentionType))  # the built-in ones (plugins register more)
SCORED = [t for t in TYPES if t != "none"]
B, S, T, D = 3, 7, 5, 8  # memory width M = D, so dot products are defined
LENGTHS = [7, 4, 1]


def attend(att, query, keys, memory, mask, start: int = 0):
    """The attention for queries (B, T, d), or one step (B, d), at target positions start, ..."""
    one_step = query.dim() == 2
    query = query[:, None] if one_step else query
    B, T, _ = query.shape
    positions = torch.arange(start, start + T).expand(B, T)
    context, weights = att(query, keys, memory, mask, positions)
    return (context[:, 0], weights[:, 0]) if one_step else (context, weights)


def setup(kind: str, seed: int = 0, **cfg):
    torch.manual_seed(seed)
    att = Attention.build(
        kind, D, D, AttentionConfig(type=kind, heads=2, window=2, bias=True, **cfg)
    ).double()
    memory = torch.randn(B, S, D, dtype=torch.float64)
    mask = torch.arange(S)[None, :] < torch.tensor(LENGTHS)[:, None]
    memory = memory * mask[..., None]  # the encoder leaves zeros past the end
    query = torch.randn(B, T, D, dtype=torch.float64)
    return att, query, memory, mask


def softmax(values: list[float]) -> list[float]:
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    return [e / sum(exps) for e in exps]


@torch.no_grad()
def reference_weights(kind, att, query, memory, mask):
    """The papers' formulas, one (b, t, s) at a time."""
    out = torch.zeros(B, T, S, dtype=torch.float64)
    for b in range(B):
        n = LENGTHS[b]
        for t in range(T):
            q = query[b, t]
            if kind == "multihead":
                heads = []
                for h in range(att.heads):
                    sl = slice(h * D // 2, (h + 1) * D // 2)
                    qh = (att.W_q.weight @ q)[sl]
                    kv = [att.W_kv.weight @ memory[b, s] for s in range(n)]
                    heads.append(softmax([float(qh @ kv[s][:D][sl]) / math.sqrt(D // 2) for s in range(n)]))
                out[b, t, :n] = torch.tensor(heads).mean(0)
                continue

            def score(s, q=q, b=b):
                h = memory[b, s]
                if kind == "dot":
                    return float(q @ h)
                if kind == "scaled_dot":
                    return float(q @ h) / math.sqrt(D)
                if kind in ("general", "local_m", "local_p"):
                    return float(q @ (att.W_a.weight @ h))
                bias = att.W_a.bias if att.W_a.bias is not None else 0.0
                return float(att.v_a.weight[0] @ torch.tanh(att.W_a.weight @ q + bias + att.U_a.weight @ h))

            if kind in ("local_m", "local_p"):
                if kind == "local_m":
                    p = min(t, n - 1)
                else:
                    p = n * float(torch.sigmoid(att.v_p.weight[0] @ torch.tanh(att.W_p.weight @ q)))
                window = [s for s in range(n) if abs(s - p) <= att.D]
                for s, w in zip(window, softmax([score(s) for s in window]), strict=True):
                    gauss = math.exp(-((s - p) ** 2) / (2 * (att.D / 2) ** 2)) if kind == "local_p" else 1.0
                    out[b, t, s] = w * gauss
            else:
                out[b, t, :n] = torch.tensor(softmax([score(s) for s in range(n)]))
    return out


def test_registry_matches_config_choices():
    builtin = {name for name, cls in Attention.registry.items() if cls.__module__ == "nmt.model.attention"}
    assert builtin == set(TYPES)


@pytest.mark.parametrize("kind", SCORED)
def test_weights_equal_the_paper_formula(kind):
    att, query, memory, mask = setup(kind)
    keys = att.prepare(memory, mask)
    context, weights = attend(att, query, keys, memory, mask)
    expected = reference_weights(kind, att, query, memory, mask)
    torch.testing.assert_close(weights.double(), expected, atol=1e-6, rtol=1e-6)
    if kind != "multihead":  # multihead's context goes through W_o and per-head values
        torch.testing.assert_close(context, torch.bmm(expected, memory), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kind", SCORED)
def test_padding_gets_exactly_zero_and_real_positions_sum_to_one(kind):
    att, query, memory, mask = setup(kind)
    _, weights = attend(att, query, att.prepare(memory, mask), memory, mask)
    assert (weights.masked_select(~mask[:, None, :]) == 0).all()
    sums = weights.sum(-1)
    if kind == "local_p":  # the Gaussian multiplies the softmax: at most 1 (paper eq. 10)
        assert (sums <= 1 + 1e-6).all() and (sums > 0).all()
    else:
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", SCORED)
def test_one_step_equals_the_matching_row_of_all_steps(kind):
    att, query, memory, mask = setup(kind)
    keys = att.prepare(memory, mask)
    context, weights = attend(att, query, keys, memory, mask)
    for t in range(T):
        c_t, w_t = attend(att, query[:, t], keys, memory, mask, start=t)
        torch.testing.assert_close(w_t, weights[:, t])
        torch.testing.assert_close(c_t, context[:, t])


@pytest.mark.parametrize("kind", SCORED)
def test_a_sentence_scores_the_same_alone_and_batched_with_longer_ones(kind):
    att, query, memory, mask = setup(kind)
    context, weights = attend(att, query, att.prepare(memory, mask), memory, mask)
    n = LENGTHS[1]
    alone_mem, alone_mask = memory[1:2, :n], mask[1:2, :n]
    c1, w1 = attend(att, query[1:2], att.prepare(alone_mem, alone_mask), alone_mem, alone_mask)
    torch.testing.assert_close(w1[0], weights[1, :, :n])
    torch.testing.assert_close(c1[0], context[1])


@pytest.mark.parametrize("kind", SCORED)
def test_gradients_reach_every_parameter(kind):
    att, query, memory, mask = setup(kind)
    memory.requires_grad_(True)
    context, weights = attend(att, query, att.prepare(memory, mask), memory, mask, start=1)
    (context.pow(2).sum() + (weights * torch.randn_like(weights)).sum()).backward()
    for name, param in att.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert memory.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", SCORED)
def test_a_source_with_no_real_position_gives_zeros_not_nan(kind):
    att, query, memory, mask = setup(kind)
    mask = mask.clone()
    mask[2] = False
    context, weights = attend(att, query, att.prepare(memory, mask), memory, mask)
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert (weights[2] == 0).all()


@pytest.mark.parametrize("kind", SCORED)
def test_batch_of_one_and_length_one(kind):
    att, _, _, _ = setup(kind)
    memory = torch.randn(1, 1, D, dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.bool)
    context, weights = attend(
        att, torch.randn(1, D, dtype=torch.float64), att.prepare(memory, mask), memory, mask
    )
    assert context.shape == (1, D) and weights.shape == (1, 1)
    assert 0 < float(weights.detach()) <= 1


@pytest.mark.parametrize("kind", ["local_m", "local_p"])
def test_local_attention_never_weighs_outside_its_window(kind):
    att, query, memory, mask = setup(kind)
    keys = att.prepare(memory, mask)
    _, weights = attend(att, query, keys, memory, mask)
    src_len = mask.sum(-1, keepdim=True)
    centre = att.centre(query, src_len, torch.arange(T).expand(query.size(0), T))  # (B, T)
    distance = (torch.arange(S)[None, None, :] - centre[..., None]).abs()
    assert (weights[distance > att.D] == 0).all()
    assert (weights[(distance <= att.D) & mask[:, None, :]] > 0).all()


def test_none_attention_gives_no_context():
    att, query, memory, mask = setup("none")
    context, weights = attend(att, query, att.prepare(memory, mask), memory, mask)
    assert (context == 0).all() and (weights == 0).all()


def test_masked_softmax_is_exact_under_half_precision_scores():
    scores = torch.tensor([[[3.0, 1.0, -60000.0]]], dtype=torch.float16)
    mask = torch.tensor([[[True, True, False]]])
    weights = masked_softmax(scores, mask)
    assert weights.dtype == torch.float32 and weights[0, 0, 2] == 0
    torch.testing.assert_close(weights.sum(), torch.tensor(1.0))


def test_attention_dropout_acts_in_training_only():
    att, query, memory, mask = setup("general", dropout=0.5)
    keys = att.prepare(memory, mask)
    att.train()
    context_train, _ = attend(att, query, keys, memory, mask)
    att.eval()
    context_eval, weights = attend(att, query, keys, memory, mask)
    assert not torch.allclose(context_train, context_eval)
    torch.testing.assert_close(torch.bmm(weights.to(memory.dtype), memory), context_eval)
