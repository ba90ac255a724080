"""Weight decay: which parameters decay, and optimiser states that still resume; the fused update
on a CPU moves the weights as the plain one does, and a run saved with the plain one keeps it."""

import pytest
import torch

from nmt.config import TrainConfig
from nmt.model.seq2seq import Seq2Seq
from nmt.train.schedule import OPTIMIZERS, build_optimizer, parameter_groups
from tests.model.test_seq2seq import V, model_config


def model() -> Seq2Seq:
    torch.manual_seed(0)
    return Seq2Seq(model_config(), V, V)


def one_step_with_zero_gradients(net: Seq2Seq, cfg: TrainConfig) -> dict[str, bool]:
    """Which parameters a step moves when the loss has no gradient: only decay moves them."""
    optimizer = build_optimizer(net.parameters(), cfg)
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    return {name: not torch.equal(p, before[name]) for name, p in net.named_parameters()}


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_weight_decay_moves_weight_matrices_and_spares_biases(optimizer):
    net = model()
    moved = one_step_with_zero_gradients(net, TrainConfig(optimizer=optimizer, weight_decay=0.1))
    shapes = {name: p.ndim for name, p in net.named_parameters()}
    assert any("bias" in name for name in shapes) and any(n == 1 for n in shapes.values())
    assert {name for name, m in moved.items() if m} == {name for name, n in shapes.items() if n >= 2}


def test_without_weight_decay_nothing_moves_and_there_is_one_group():
    net = model()
    assert not any(one_step_with_zero_gradients(net, TrainConfig(weight_decay=0.0)).values())
    groups = build_optimizer(net.parameters(), TrainConfig()).param_groups
    assert len(groups) == 1 and len(groups[0]["params"]) == len(list(net.parameters()))


def trained_state(optimizer: torch.optim.Optimizer, net: Seq2Seq) -> dict:
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    return optimizer.state_dict()


def test_a_checkpoint_without_decay_from_before_the_groups_still_resumes():
    net = model()
    cfg = TrainConfig(lr=0.01)
    old = trained_state(
        torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=0.0), net
    )  # as built before
    resumed = build_optimizer(net.parameters(), cfg)
    resumed.load_state_dict(old)
    assert resumed.state_dict()["param_groups"] == old["param_groups"]


def test_an_optimiser_state_with_decay_resumes_into_the_same_two_groups():
    net = model()
    cfg = TrainConfig(optimizer="adamw", weight_decay=0.01)
    saved = trained_state(build_optimizer(net.parameters(), cfg), net)
    resumed = build_optimizer(net.parameters(), cfg)
    resumed.load_state_dict(saved)
    decays = [group["weight_decay"] for group in resumed.param_groups]
    assert decays == [0.01, 0.0] and resumed.state_dict()["state"].keys() == saved["state"].keys()


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_the_cpu_update_is_fused_and_moves_the_weights_as_the_plain_one(optimizer):
    cfg = TrainConfig(optimizer=optimizer, lr=0.01, weight_decay=0.01)
    fused_net, plain_net = model(), model()
    fused = build_optimizer(fused_net.parameters(), cfg)
    plain = OPTIMIZERS[optimizer](parameter_groups(list(plain_net.parameters()), 0.01), cfg, None)
    assert all(group["fused"] for group in fused.param_groups)
    assert not any(group["fused"] for group in plain.param_groups)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        for a, b in zip(fused_net.parameters(), plain_net.parameters(), strict=True):
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        fused.step()
        plain.step()
    for a, b in zip(fused_net.parameters(), plain_net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_run_saved_with_the_plain_update_resumes_with_it():
    net = model()
    cfg = TrainConfig(lr=0.01)
    old = trained_state(torch.optim.Adam(net.parameters(), lr=cfg.lr), net)  # as built before
    resumed = build_optimizer(net.parameters(), cfg)
    resumed.load_state_dict(old)
    assert not resumed.param_groups[0]["fused"]


def test_products_after_a_fused_update_use_the_updated_weights():
    """The fused update writes the weights without bumping their versions; the prepacked copies
    the products use are keyed on the version, so the optimiser bumps it (without, training went
    on multiplying by its first weights and resumed runs departed from uninterrupted ones)."""
    from nmt.model.linear import linear

    weight = torch.nn.Parameter(torch.randn(16, 8))
    x = torch.randn(4, 8)
    optimizer = build_optimizer([weight], TrainConfig(lr=0.1))
    assert optimizer.param_groups[0]["fused"]
    linear(x, weight)  # packed at the first product
    weight.grad = torch.randn(16, 8)
    optimizer.step()
    torch.testing.assert_close(linear(x, weight), x @ weight.detach().t())
