"""nmt.model.dropout: torch's dropout, its mask drawn by `rand_like` on a CPU."""

import pytest
import torch

from nmt.model.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_entry_is_kept_with_probability_one_minus_p_and_scaled(p):
    torch.manual_seed(0)
    x = torch.rand(400, 500) + 0.5  # no zeros of its own
    y = dropout(x, p)
    kept = y != 0
    assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.005)  # 200,000 draws: 4+ sigma
    assert torch.allclose(y[kept], x[kept] / (1 - p))


def test_the_gradient_is_the_mask_scaled():
    torch.manual_seed(1)
    x = torch.randn(64, 30, requires_grad=True)
    y = dropout(x, 0.3)
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, (y != 0) / 0.7)


def test_the_same_seed_draws_the_same_mask():
    x = torch.randn(20, 20)
    torch.manual_seed(2)
    first = dropout(x, 0.3)
    torch.manual_seed(2)
    assert torch.equal(dropout(x, 0.3), first)


def test_outside_training_or_at_p_0_it_is_the_identity_and_at_p_1_zeros():
    x = torch.randn(8, 8)
    assert dropout(x, 0.3, training=False) is x
    assert torch.equal(dropout(x, 0.0), x)
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    module = Dropout(0.3).eval()
    assert module(x) is x and module.p == 0.3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_the_output_keeps_the_input_dtype(dtype):
    x = torch.ones(100, 100, dtype=dtype)
    y = dropout(x, 0.5)
    assert y.dtype == dtype and set(y.unique().tolist()) <= {0.0, 2.0}
