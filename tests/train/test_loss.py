"""The fused output layer + cross-entropy equals the plain path, in value and in gradients."""

import pytest
import torch
import torch.nn.functional as F

from nmt.config import TrainConfig
from nmt.data.batching import Batch
from nmt.model import output
from nmt.model.output import LinearCrossEntropy, OutputLayer
from nmt.model.seq2seq import Seq2Seq
from nmt.train.loss import TokenLoss, batch_loss, loss_sums
from nmt.vocab import EOS, PAD
from tests.model.test_seq2seq import V, batch, model_config


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("chunk_rows", [3, None])  # chunks of 3, 3 and 1 rows; all 7 rows at once
def test_linear_cross_entropy_equals_torch_in_value_and_gradients(
    smoothing, with_bias, chunk_rows, monkeypatch
):
    if chunk_rows:
        monkeypatch.setattr(output, "CHUNK_LOGITS", 11 * chunk_rows)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(11, 5, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(11, dtype=torch.float64, generator=g, requires_grad=True) if with_bias else None
    target = torch.randint(0, 11, (7,), generator=g)
    inputs = [x, weight] + ([bias] if with_bias else [])

    objective, nll = LinearCrossEntropy.apply(x, weight, bias, target, smoothing, True)
    (2.5 * objective).backward()
    fused = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    logits = F.linear(x, weight, bias)
    expected = F.cross_entropy(logits, target, reduction="sum", label_smoothing=smoothing)
    (2.5 * expected).backward()

    torch.testing.assert_close(objective, expected.detach())
    torch.testing.assert_close(nll, F.cross_entropy(logits.detach(), target, reduction="sum"))
    assert not nll.requires_grad
    for got, want in zip(fused, (t.grad for t in inputs), strict=True):
        torch.testing.assert_close(got, want)


def test_the_loss_without_gradients_has_the_same_value_and_no_graph():
    """Validation computes the loss under no_grad: the same sums, and no gradient products."""
    torch.manual_seed(0)
    layer, x, target = (
        OutputLayer(5, 11, dropout=0.0),
        torch.randn(7, 5, requires_grad=True),
        torch.randint(0, 11, (7,)),
    )
    with_graph = layer.loss(x, target, 0.1)
    with torch.no_grad():
        without = layer.loss(x, target, 0.1)
    torch.testing.assert_close(without, tuple(t.detach() for t in with_graph))
    assert with_graph[0].requires_grad and not without[0].requires_grad


@pytest.mark.parametrize("style,feeding", [("luong", True), ("luong", False), ("bahdanau", False)])
def test_token_loss_equals_logits_then_cross_entropy(style, feeding):
    torch.manual_seed(0)
    extra = {"input_feeding": feeding} if style == "luong" else {}
    model = Seq2Seq(model_config(style, "general", **extra), V, V).train()  # dropout 0: deterministic
    src, src_len, tgt_in = batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((3, 1), EOS)], 1)
    tgt_out[2, 2:] = PAD
    data = Batch(src, src_len, tgt_in, tgt_out)
    cfg = TrainConfig(label_smoothing=0.1)

    sums = batch_loss(TokenLoss(model, cfg), data, step=0, generator=torch.Generator())
    sums.objective.backward()
    fused = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    logits, _ = model(src, src_len, tgt_in)
    plain = loss_sums(logits, tgt_out, 0.1)
    plain.objective.backward()

    torch.testing.assert_close(sums.objective, plain.objective)
    assert float(sums.nll) == pytest.approx(float(plain.nll), rel=1e-6) and sums.tokens == plain.tokens == 12
    assert fused.keys() == {n for n, p in model.named_parameters() if p.grad is not None}
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(fused[name], p.grad, msg=name)


def test_token_loss_leaves_out_smoothing_when_evaluating():
    model = Seq2Seq(model_config(), V, V).eval()
    src, src_len, tgt_in = batch()
    data = Batch(src, src_len, tgt_in, tgt_in.roll(-1, 1))
    sums = batch_loss(TokenLoss(model, TrainConfig(label_smoothing=0.3)), data, 0, torch.Generator())
    assert float(sums.objective.detach()) == pytest.approx(float(sums.nll), rel=1e-6)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_loss_of_a_real_vocabulary_in_float32_equals_torch(smoothing):
    """At the width training meets (8,000 pieces, float32 on a CPU), where the fused softmax runs
    in place over each chunk of logits: the same loss and gradients as the plain path."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 64, generator=g, requires_grad=True)
    weight = (torch.randn(8000, 64, generator=g) * 0.3).requires_grad_()
    bias = torch.randn(8000, generator=g).requires_grad_()
    target = torch.randint(0, 8000, (40,), generator=g)
    objective, nll = LinearCrossEntropy.apply(x, weight, bias, target, smoothing, True)
    objective.backward()
    fused = [t.grad.clone() for t in (x, weight, bias)]
    for t in (x, weight, bias):
        t.grad = None
    logits = x @ weight.t() + bias
    expected = F.cross_entropy(logits, target, reduction="sum", label_smoothing=smoothing)
    expected.backward()
    torch.testing.assert_close(objective, expected.detach(), rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(
        nll, F.cross_entropy(logits.detach(), target, reduction="sum"), rtol=1e-5, atol=1e-3
    )
    for got, want in zip(fused, (t.grad for t in (x, weight, bias)), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
