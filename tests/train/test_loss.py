"""The fused output layer + cross-entropy equals the plain path, in value and in gradients."""

import pytest
import torch
import torch.nn.functional as F

from nmt.config import TrainConfig
from nmt.data.batching import Batch
from nmt.model.output import LinearCrossEntropy
from nmt.model.seq2seq import Seq2Seq
from nmt.train.loss import TokenLoss, batch_loss, loss_sums
from nmt.vocab import EOS, PAD
from tests.model.test_seq2seq import V, batch, model_config


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_cross_entropy_equals_torch_in_value_and_gradients(smoothing, with_bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(11, 5, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(11, dtype=torch.float64, generator=g, requires_grad=True) if with_bias else None
    target = torch.randint(0, 11, (7,), generator=g)
    inputs = [x, weight] + ([bias] if with_bias else [])

    objective, nll = LinearCrossEntropy.apply(x, weight, bias, target, smoothing)
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
    assert sums.nll == pytest.approx(plain.nll, rel=1e-6) and sums.tokens == plain.tokens == 12
    assert fused.keys() == {n for n, p in model.named_parameters() if p.grad is not None}
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(fused[name], p.grad, msg=name)


def test_token_loss_leaves_out_smoothing_when_evaluating():
    model = Seq2Seq(model_config(), V, V).eval()
    src, src_len, tgt_in = batch()
    data = Batch(src, src_len, tgt_in, tgt_in.roll(-1, 1))
    sums = batch_loss(TokenLoss(model, TrainConfig(label_smoothing=0.3)), data, 0, torch.Generator())
    assert float(sums.objective.detach()) == pytest.approx(sums.nll, rel=1e-6)
