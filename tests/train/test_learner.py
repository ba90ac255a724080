"""The learner: its optimiser state in and out of a checkpoint."""

import pytest
import torch

from nmt.config import Config, DataConfig
from nmt.errors import NMTError
from nmt.train import precision as precision_module
from nmt.train.learner import Learner
from nmt.train.precision import Precision, clip_gradients
from tests.model.test_seq2seq import V, model_config


def test_a_state_of_one_group_meeting_two_is_refused_in_one_line(tmp_path):
    """A run that trained with decay before biases were spared cannot resume into two groups."""
    cpu = torch.device("cpu")
    cfg = Config(data=DataConfig(src_lang="de", tgt_lang="en"), model=model_config())
    cfg.train.weight_decay = 0.1
    learner = Learner(cfg, (V, V), cpu, Precision(cpu))
    old = torch.optim.Adam(learner.model.parameters(), weight_decay=0.1)  # one group, as before
    state = {"model": learner.model.state_dict(), "optimizer": old.state_dict()} | {
        k: v for k, v in learner.state().items() if k != "optimizer"
    }
    with pytest.raises(
        NMTError, match=r"last.pt: its optimiser has 1 parameter group\(s\), this run's has 2"
    ):
        learner.restore(state, tmp_path / "last.pt")


def test_weights_lent_for_a_while_come_back_even_after_an_error():
    """An averaged checkpoint is evaluated with its weights; training's own return afterwards."""
    cpu = torch.device("cpu")
    cfg = Config(data=DataConfig(src_lang="de", tgt_lang="en"), model=model_config())
    learner = Learner(cfg, (V, V), cpu, Precision(cpu))
    own = {k: v.clone() for k, v in learner.model.state_dict().items()}
    zeros = {k: torch.zeros_like(v) for k, v in own.items()}
    with pytest.raises(RuntimeError), learner.weights(zeros):
        assert all(not v.any() for v in learner.model.state_dict().values())
        raise RuntimeError("evaluation failed")
    assert all(torch.equal(v, own[k]) for k, v in learner.model.state_dict().items())


def test_a_scaled_step_says_whether_it_was_taken_without_reading_the_scale(monkeypatch):
    """fp16's gradient scaler skips a step whose gradients overflowed and halves its scale; the
    step says so as a tensor on the device (read with the loss), not by reading the scale back.
    A CPU scaler stands in for the CUDA one (tests/test_cuda.py trains in fp16 on a GPU), and
    the CPU for a device whose norm clipping must not read."""
    from tests.host_traffic import HostTraffic

    monkeypatch.setattr(precision_module, "READ_FREELY", ())

    precision = Precision(torch.device("cpu"))
    precision.scaler = torch.amp.GradScaler("cpu", init_scale=16.0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), fused=True)  # as on CUDA: it reads found_inf itself
    taken = []
    for value in (1.0, float("inf"), 1.0):
        precision.backward(model(torch.full((1, 3), value)).sum())
        with HostTraffic() as traffic:
            taken.append(precision.step(model, optimizer, clip=1.0))
        optimizer.zero_grad()
        # Clipping moves each norm to the device it is on: no copy. Nothing else may wait.
        assert [c for c in traffic.calls if c != "to(device)"] == []
    assert [bool(t) for t in taken] == [True, False, True]
    assert precision.scaler.get_scale() == 8.0
    assert Precision(torch.device("cpu")).step(model, optimizer, clip=1.0) is True  # fp32


@pytest.mark.parametrize("max_norm", [0.5, 100.0])  # clipped; left alone
def test_clipping_equals_torchs_and_leaves_gradients_within_the_norm_untouched(max_norm):
    """The trainer's clipping: torch's norm and scaling, but a CPU's gradients within the norm
    are not multiplied by 1."""
    g = torch.Generator().manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(4, 3, generator=g)) for _ in range(3)]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    for a, b in zip(ours, theirs, strict=True):
        a.grad = torch.randn(4, 3, generator=g)
        b.grad = a.grad.clone()
    ours.append(torch.nn.Parameter(torch.zeros(2)))  # no gradient: skipped, as torch skips it
    before = [p.grad for p in ours[:3]]

    total = clip_gradients(ours, max_norm)

    torch.testing.assert_close(total, torch.nn.utils.clip_grad_norm_(theirs, max_norm))
    for a, b in zip(ours, theirs, strict=False):  # the parameter without a gradient: ours only
        torch.testing.assert_close(a.grad, b.grad)
    if max_norm == 100.0:  # not scaled by 1: the same tensors, never written
        assert all(p.grad is grad and grad._version == 0 for p, grad in zip(ours, before, strict=False))
