"""nmt.model.linear: F.linear's values and gradients, through oneDNN where it applies."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from nmt.model import linear as linear_module
from nmt.model.linear import ONEDNN, Linear, linear, one_weight_gradient

pytestmark = pytest.mark.skipif(not ONEDNN, reason="this torch build has no oneDNN")


@pytest.mark.parametrize("shape", [(5, 7), (3, 4, 7), (0, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_values_and_gradients_are_f_linear_s(shape, bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, requires_grad=True)
    w = torch.randn(9, 7, generator=g, requires_grad=True)
    b = torch.randn(9, generator=g, requires_grad=True) if bias else None
    out = linear(x, w, b)
    expected = F.linear(x, w, b)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    grad = torch.randn(expected.shape, generator=g)
    mine = torch.autograd.grad(out, [x, w] + ([b] if bias else []), grad, allow_unused=True)
    theirs = torch.autograd.grad(expected, [x, w] + ([b] if bias else []), grad, allow_unused=True)
    for a, e in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_a_prepacked_weight_follows_in_place_changes():
    layer = Linear(6, 4)
    x = torch.randn(3, 6)
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(2)  # an optimiser step changes the weight in place
        after = layer(x)
    torch.testing.assert_close(after, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before, after)


def test_non_contiguous_inputs_and_other_dtypes():
    x = torch.randn(7, 5).t()  # (5, 7), transposed view
    w = torch.randn(3, 7)
    torch.testing.assert_close(linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
    x64, w64 = x.double(), w.double()
    assert torch.equal(linear(x64, w64), F.linear(x64, w64))  # float64: F.linear itself


def test_decoding_rounds_rows_to_few_shapes_and_returns_exactly_the_rows_asked():
    from nmt.model.linear import rounded_rows

    assert [rounded_rows(r) for r in (1, 31, 32, 33, 60, 63, 285, 300, 320)] == [
        1,
        31,
        32,
        34,
        60,
        64,
        288,
        304,
        320,
    ]
    assert len({rounded_rows(r) for r in range(280, 321)}) == 3  # a beam-5 pool of 56-64 sentences
    w, b = torch.randn(11, 7), torch.randn(11)
    with torch.no_grad():
        for shape in [(285, 7), (5, 57, 7)]:
            x = torch.randn(*shape)
            out = linear(x, w, b)
            assert out.shape == (*shape[:-1], 11)
            torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-5, atol=1e-5)


def test_a_once_per_batch_layer_computes_the_same_with_and_without_gradients():
    layer = Linear(7, 5, once_per_batch=True)
    x = torch.randn(3, 13, 7)
    with torch.no_grad():
        decoded = layer(x)
    trained = layer(x)
    assert trained.requires_grad
    torch.testing.assert_close(decoded, trained.detach(), rtol=1e-5, atol=1e-5)


class Relayouts(TorchDispatchMode):
    """Counts the weights oneDNN lays out anew: prepacked, or taken plain by a product (which
    re-lays them out inside, on every call)."""

    def __init__(self) -> None:
        super().__init__()
        self.prepacked = self.plain = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.mkldnn._reorder_linear_weight.default:
            self.prepacked += 1
        elif func is torch.ops.mkldnn._linear_pointwise.default and not args[1].is_mkldnn:
            self.plain += any(isinstance(w, nn.Parameter) for w in (args[1], args[1]._base))
        return func(*args, **(kwargs or {}))


def test_training_prepacks_a_parameter_once_a_step_not_at_every_call():
    """A decoder cell calls its weights at every target position, forward and backward: 20
    positions here. Each weight is laid out twice a step (it and its transpose), then again only
    after the optimiser changes it; the values are the plain weight's, bit for bit."""
    torch.manual_seed(0)
    layer = Linear(16, 32)
    optimiser = torch.optim.Adam(layer.parameters())
    xs = [torch.randn(4, 16, requires_grad=True) for _ in range(20)]
    for step in range(2):
        with Relayouts() as counted:
            outputs = [layer(x) for x in xs]
            torch.stack(outputs).square().sum().backward()
        assert (counted.prepacked, counted.plain) == (2, 0), step
        plain = torch.ops.mkldnn._linear_pointwise(
            xs[0].detach(), layer.weight.detach(), layer.bias.detach(), "none", [], ""
        )
        assert torch.equal(outputs[0].detach(), plain)
        optimiser.step()
        optimiser.zero_grad()


def test_the_output_layers_loss_prepacks_its_weight_once_a_step():
    from nmt.model.output import OutputLayer

    torch.manual_seed(0)
    layer = OutputLayer(16, 50, dropout=0.0)
    x, target = torch.randn(30, 16, requires_grad=True), torch.randint(0, 50, (30,))
    with Relayouts() as counted:
        objective, _ = layer.loss(x, target)
        objective.backward()
    assert counted.prepacked == 2  # the weight and its transpose, for every chunk of the step


@pytest.mark.parametrize("rows_at_once, products", [(512, 1), (32, 3)])
def test_one_weight_gradient_takes_a_recurrences_gradient_in_few_products(
    rows_at_once, products, monkeypatch
):
    """A cell applied at 20 positions of 4 rows: inside `one_weight_gradient` its weight's
    gradient is one product per `GATHERED_ROWS` rows (80 rows: 1, or 3 of at most 32), where it
    was one a position, and the gradients are the same; a product whose output reaches no loss
    neither gets nor gives one."""
    monkeypatch.setattr(linear_module, "GATHERED_ROWS", rows_at_once)
    counted = []
    product = linear_module.weight_gradient
    monkeypatch.setattr(linear_module, "weight_gradient", lambda *a: counted.append(1) or product(*a))
    torch.manual_seed(0)
    cell, unused = Linear(8, 8), Linear(8, 3)
    h0 = torch.randn(4, 8, requires_grad=True)

    def gradients(scope):
        h, outputs = h0, []
        with scope():
            for _ in range(20):
                h = torch.tanh(cell(h))
                unused(h)
                outputs.append(h)
        loss = torch.stack(outputs).square().sum()
        return torch.autograd.grad(loss, [h0, cell.weight, cell.bias, unused.weight], allow_unused=True)

    per_position = gradients(contextlib.nullcontext)
    assert len(counted) == 20
    counted.clear()
    gathered = gradients(one_weight_gradient)
    assert len(counted) == products
    assert per_position[3] is None and gathered[3] is None
    for a, e in zip(gathered[:3], per_position[:3], strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_a_gathered_gradient_taken_twice_from_a_kept_graph_is_the_same_twice():
    torch.manual_seed(0)
    cell = Linear(8, 8)
    h = torch.randn(4, 8)
    with one_weight_gradient():
        for _ in range(5):
            h = torch.tanh(cell(h))
    first = torch.autograd.grad(h.sum(), cell.weight, retain_graph=True)[0]
    second = torch.autograd.grad(h.sum(), cell.weight)[0]
    assert torch.equal(first, second)
