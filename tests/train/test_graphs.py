"""The CUDA-graph path's maths, checked on the CPU: a batch padded to its bucket (rows, source
and target lengths rounded up) has the loss and gradients of the batch itself. The graphs
themselves are checked on a GPU (tests/test_cuda.py)."""

import pytest
import torch

from nmt.config import TrainConfig
from nmt.data.batching import Batch
from nmt.model.seq2seq import Seq2Seq
from nmt.train.graphs import DecoderLoss, bucket, padded
from nmt.train.loss import TokenLoss, batch_loss
from nmt.vocab import EOS, PAD
from tests.model.test_seq2seq import V, batch, model_config


def test_buckets_round_up_to_multiples_of_eight():
    assert [bucket(n) for n in (1, 7, 8, 9, 16, 17)] == [8, 8, 8, 16, 16, 24]


@pytest.mark.parametrize(
    "style,attention,feeding",
    [
        ("luong", "general", True),
        ("luong", "dot", False),
        ("bahdanau", "bahdanau", False),
        ("luong", "local_p", True),
        ("luong", "multihead", True),
    ],
)
def test_a_batch_padded_to_its_bucket_has_the_same_loss_and_gradients(style, attention, feeding):
    torch.manual_seed(0)
    extra = {"input_feeding": feeding} if style == "luong" else {}
    model = Seq2Seq(model_config(style, attention, **extra), V, V).train()  # dropout 0: deterministic
    src, src_len, tgt_in = batch()
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((3, 1), EOS)], 1)
    tgt_out[2, 2:] = PAD
    cfg = TrainConfig(label_smoothing=0.1)

    plain = batch_loss(TokenLoss(model, cfg), Batch(src, src_len, tgt_in, tgt_out), 0, torch.Generator())
    plain.objective.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    memory, mask, h0, c0 = model.annotate(src, src_len)
    key, args = padded(memory, h0, c0, mask, tgt_in, tgt_out)
    assert key == (8, 8, 8) and args[0].shape[:2] == (8, 8) and args[4].shape == (8, 8)
    objective, nll = DecoderLoss(model.decoder, 0.1)(*args)
    objective.backward()

    torch.testing.assert_close(objective, plain.objective)
    torch.testing.assert_close(nll, plain.nll)
    assert expected.keys() == {n for n, p in model.named_parameters() if p.grad is not None}
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(p.grad, expected[name], msg=name)
