"""Precision per machine (`nmt.model.precision`, `nmt.model.linear`'s bf16 operands): bf16
products are fp32's within bf16 rounding, real and emulated alike, forward and backward; the
choice is the user's when given, else measured once and cached for the machine, recorded by a
training run and kept on resume; a bf16 run resumed on a CPU without bf16 units stops in one
line unless fp32 is asked for."""

import json

import pytest
import torch
import torch.nn.functional as F

from nmt.checkpoint import read_checkpoint
from nmt.cli.app import app
from nmt.errors import NMTError
from nmt.model import linear, precision
from nmt.rundir import CHECKPOINTS, LAST, read_metrics
from tests.train.test_trainer import nmt_train, runner

pytestmark = pytest.mark.skipif(not linear.ONEDNN, reason="this torch has no oneDNN")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own machine cache, and `auto` meaning auto (conftest sets fp32)."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(precision.AUTO, raising=False)


@pytest.fixture(params=["units", "emulated"])
def bf16_kind(request, monkeypatch):
    """bf16 products on this CPU's units (skipped without them) and emulated in fp32."""
    if request.param == "units" and not linear.BF16_UNITS:
        pytest.skip("this CPU has no bf16 units")
    monkeypatch.setattr(linear, "BF16_UNITS", request.param == "units")
    linear.drop_prepacked()
    yield request.param
    linear.drop_prepacked()


def rounded(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


def test_bf16_products_are_those_of_bf16_rounded_operands_forward_and_backward(bf16_kind):
    g = torch.Generator().manual_seed(0)
    layer = linear.Linear(96, 300)
    x = torch.randn(37, 96, generator=g, requires_grad=True)
    upstream = torch.randn(37, 300, generator=g)
    with torch.no_grad():
        fp32 = layer(x)
    linear.use_operands(layer, torch.bfloat16)
    with torch.no_grad():
        bf16 = layer(x)
    reference = F.linear(rounded(x), rounded(layer.weight), layer.bias)
    assert bf16.dtype == torch.float32
    torch.testing.assert_close(bf16, reference, rtol=2e-2, atol=2e-2)  # the result rounded to bf16 too
    assert not torch.equal(bf16, fp32)  # the operands were rounded: not the fp32 product

    (layer(x) * upstream).sum().backward()
    ours = x.grad.clone(), layer.weight.grad.clone()
    x.grad = layer.weight.grad = None
    (F.linear(x, layer.weight, layer.bias) * upstream).sum().backward()
    for mine, exact in zip(ours, (x.grad, layer.weight.grad), strict=True):
        assert ((mine - exact).norm() / exact.norm()) < 1e-2  # bf16 rounding, not a wrong product
    assert layer.weight.dtype == torch.float32  # the master weights stay fp32


def test_real_and_emulated_bf16_agree(monkeypatch):
    if not linear.BF16_UNITS:
        pytest.skip("this CPU has no bf16 units")
    g = torch.Generator().manual_seed(1)
    layer = linear.Linear(64, 200)
    linear.use_operands(layer, torch.bfloat16)
    x = torch.randn(20, 64, generator=g)
    with torch.no_grad():
        real = layer(x)
        monkeypatch.setattr(linear, "BF16_UNITS", False)
        linear.drop_prepacked()
        emulated = layer(x)
    linear.drop_prepacked()
    torch.testing.assert_close(real, emulated, rtol=1e-2, atol=1e-2)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = torch.nn.Module()
        self.decoder.embed = torch.nn.Embedding(50, 8)
        self.decoder.out = torch.nn.Linear(8, 50)
        self.decoder.cell = torch.nn.Linear(8, 32, bias=False)


def timed(ratio: float, calls: list):
    def time_precisions(rows, out, inner):
        calls.append((rows, out, inner))
        return {"fp32": ratio, "bf16": 1.0}

    return time_precisions


def test_auto_takes_bf16_at_one_and_a_half_times_the_speed_measured_once_and_cached(monkeypatch):
    monkeypatch.setattr(linear, "BF16_UNITS", True)
    calls = []
    monkeypatch.setattr(precision, "time_precisions", timed(2.5, calls))
    cpu = torch.device("cpu")
    choice = precision.choose("auto", Model(), cpu)
    assert choice.name == "bf16" and "2.50x as fast in bf16" in choice.why
    assert calls == [(64, 32, 8), (64, 50, 8)]  # the decoder's weight matrices, not the embedding
    cached = json.loads(precision.CACHE.path.read_text())[precision.machine_key()]
    assert cached["64 x 50 x 8"] == {"choice": "bf16", "ms": {"fp32": 2.5, "bf16": 1.0}}
    assert precision.choose(None, Model(), cpu).name == "bf16" and len(calls) == 2  # from the cache
    assert "64 x 50 x 8" in precision.report()

    monkeypatch.setattr(precision, "time_precisions", timed(1.4, calls))
    precision.CACHE.path.unlink()
    slow = precision.choose("auto", Model(), cpu)
    assert slow.name == "fp32" and "1.40x as fast in bf16" in slow.why and "1.5x needed" in slow.why


def test_the_users_choice_wins_and_auto_without_bf16_units_measures_nothing(monkeypatch):
    monkeypatch.setattr(precision, "time_precisions", lambda *shape: pytest.fail("measured"))
    cpu = torch.device("cpu")
    monkeypatch.setattr(linear, "BF16_UNITS", False)
    assert precision.choose("auto", Model(), cpu).why == (
        "precision: fp32 (auto: this CPU has no bf16 units oneDNN can use)"
    )
    assert "emulated" in precision.choose("bf16", Model(), cpu).why
    assert precision.choose("fp32", Model(), cpu) == precision.Choice("fp32", "precision: fp32 (asked)")
    default = "on torch's default kernels"  # a model without the layers int8 replaces: nothing to time
    assert precision.choose("int8", Model(), cpu) == precision.Choice(
        "int8", f"precision: int8 (asked), {default}"
    )
    monkeypatch.setenv(precision.AUTO, "int8")  # what auto stands for
    assert precision.choose("auto", Model(), cpu) == precision.Choice(
        "int8", f"precision: int8 (NMT_PRECISION=int8), {default}"
    )
    assert precision.choose("bf16", Model(), cpu).name == "bf16"  # an explicit choice wins
    monkeypatch.setenv(precision.AUTO, "fast\x1b[2K")
    with pytest.raises(NMTError, match=r"NMT_PRECISION='fast\\x1b\[2K' is not a precision"):
        precision.choose("auto", Model(), cpu)
    with pytest.raises(NMTError, match="precision bf16 is for CPUs"):
        precision.choose("bf16", Model(), torch.device("meta"))


def test_a_cache_of_the_wrong_types_is_measured_again(monkeypatch):
    monkeypatch.setattr(linear, "BF16_UNITS", True)
    precision.CACHE.path.parent.mkdir(parents=True)
    entries = {"64 x 50 x 8": {"choice": "bf16", "ms": {"fp32": "2"}}, "64 x 32 x 8": {"choice": "bf16"}}
    precision.CACHE.path.write_text(json.dumps({precision.machine_key(): entries}))
    calls = []
    monkeypatch.setattr(precision, "time_precisions", timed(3.0, calls))
    assert precision.choose("auto", Model(), torch.device("cpu")).name == "bf16"
    assert len(calls) == 2


def test_a_real_measurement_times_both_precisions():
    if not linear.BF16_UNITS:
        pytest.skip("this CPU has no bf16 units")
    timings = precision.time_precisions(8, 64, 32)
    assert set(timings) == {"fp32", "bf16"} and all(ms > 0 for ms in timings.values())


class Int8Model(torch.nn.Module):
    """An encoder and a decoder with the layers int8 decoding replaces, and one it keeps."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Module()
        self.encoder.rnn = torch.nn.LSTM(4, 8, bidirectional=True)
        self.decoder = torch.nn.Module()
        self.decoder.output_layer = torch.nn.Linear(8, 50)
        self.decoder.W_c = torch.nn.Linear(16, 8)
        self.decoder.attention = torch.nn.Linear(8, 8, bias=False)


def test_int8_is_weighed_against_the_precision_auto_would_otherwise_take(monkeypatch):
    monkeypatch.setattr(linear, "BF16_UNITS", True)
    monkeypatch.setattr(precision, "time_precisions", timed(3.0, []))  # bf16: 3x fp32
    timed_int8 = []

    def int8_at(ms: float):
        return lambda *shape: timed_int8.append(shape) or {"fp32": 3.0, "int8": ms}

    monkeypatch.setattr(precision, "time_int8", int8_at(1.0))  # int8: 3x fp32, so bf16's speed
    monkeypatch.setattr(precision, "time_engines", engines_at(1.0))
    cpu, check = torch.device("cpu"), precision.BleuCheck({"fp32": 30.0, "int8": 29.9}, "a set")
    same = precision.choose("auto", Int8Model(), cpu, check=check)
    assert same.name == "bf16" and same.why.endswith("; not int8: 1.00x as fast as bf16, 1.5x needed")
    # W_c, the encoder's LSTM (both directions' shapes alike) and the output layer, not the attention
    assert timed_int8 == [(64, 8, 16), (64, 32, 4), (64, 32, 8), (64, 50, 8)]
    assert precision.choose("auto", Int8Model(), cpu, precision.TRAINING, check).name == "bf16"

    precision.INT8_CACHE.path.unlink()
    monkeypatch.setattr(precision, "time_int8", int8_at(0.5))
    faster = precision.choose("auto", Int8Model(), cpu, check=check)
    assert faster.name == "int8" and "the products it replaces run 2.00x as fast as in bf16" in faster.why
    assert "int8 scored 29.90 BLEU against fp32's 30.00 on a set, 0.2 lower allowed" in faster.why
    assert "64 x 50 x 8" in precision.report().split("auto first weighed int8")[1]
    assert faster.engine == "fbgemm" and "on fbgemm's kernels (oneDNN's ran its products 1.00x" in faster.why


def test_int8_timings_of_another_int8_scheme_are_taken_again(monkeypatch):
    """int8.json and int8-engines.json hold for the machine's int8 scheme: an earlier nmt's (one
    scale a weight), or this CPU's kernels held to AVX2 (7-bit activations), is timed anew."""
    monkeypatch.setattr(precision, "time_precisions", timed(3.0, []))
    timed_int8, timed_engines = [], []
    int8_at_a_third = lambda *shape: timed_int8.append(shape) or {"fp32": 3.0, "int8": 1.0}  # noqa: E731
    monkeypatch.setattr(precision, "time_int8", int8_at_a_third)
    monkeypatch.setattr(precision, "time_engines", engines_at(1.0, timed_engines))
    cpu, check = torch.device("cpu"), precision.BleuCheck({"fp32": 30.0, "int8": 30.0}, "a set")
    precision.choose("auto", Int8Model(), cpu, check=check)
    first = len(timed_int8), len(timed_engines)
    assert first[0] == 4 and first[1] in (0, 4)  # engines timed where torch has both
    precision.choose("auto", Int8Model(), cpu, check=check)
    assert (len(timed_int8), len(timed_engines)) == first  # cached

    monkeypatch.setattr(precision, "int8_scheme", lambda: "a scale a weight row, 7-bit activations")
    precision.choose("auto", Int8Model(), cpu, check=check)
    assert (len(timed_int8), len(timed_engines)) == (2 * first[0], 2 * first[1])
    seven_bits = "| int8: a scale a weight row, 7-bit activations"
    assert precision.timed_on(precision.INT8_CACHE).endswith(seven_bits)
    assert precision.timed_on(precision.CACHE) == precision.machine_key()  # bf16's hold still
    stored = json.loads(precision.INT8_CACHE.path.read_text())
    assert len(stored) == 2 and "64 x 50 x 8" in precision.report().split("auto first weighed int8")[1]


def engines_at(onednn_ratio: float, calls: list | None = None):
    """A timer of the int8 engines: oneDNN's kernels `onednn_ratio` times as fast as fbgemm's."""
    record = [] if calls is None else calls
    return lambda *shape: record.append(shape) or {"fbgemm": onednn_ratio, "onednn": 1.0}


def test_int8_runs_on_the_engine_that_ran_its_products_faster_measured_once_and_cached(monkeypatch):
    if precision.int8_engines() != ["fbgemm", "onednn"]:
        pytest.skip("this torch has not both of fbgemm's and oneDNN's int8 kernels")
    cpu, calls = torch.device("cpu"), []
    monkeypatch.setattr(precision, "time_engines", engines_at(1.05, calls))
    close = precision.choose("int8", Int8Model(), cpu)
    assert close.engine == "fbgemm"  # oneDNN 5% faster: under the margin, torch's default stays
    assert (
        "precision: int8 (asked), on fbgemm's kernels (oneDNN's ran its products 1.05x as fast" in close.why
    )
    assert calls == precision.product_shapes(Int8Model(), precision.INT8_LAYERS)
    cached = json.loads(precision.ENGINE_CACHE.path.read_text())[precision.timed_on(precision.ENGINE_CACHE)]
    assert cached["64 x 50 x 8"] == {"choice": "fbgemm", "ms": {"fbgemm": 1.05, "onednn": 1.0}}
    assert precision.choose("int8", Int8Model(), cpu).engine == "fbgemm" and len(calls) == 4  # cached
    assert "int8 first chose its kernels" in precision.report()

    precision.ENGINE_CACHE.path.unlink()
    monkeypatch.setattr(precision, "time_engines", engines_at(1.3))
    fast = precision.choose("int8", Int8Model(), cpu)
    assert fast.engine == "onednn" and "on oneDNN's kernels (oneDNN's ran its products 1.30x" in fast.why

    monkeypatch.setattr(precision, "time_engines", lambda *shape: pytest.fail("measured, though forced"))
    monkeypatch.setenv(precision.ENGINE, "fbgemm")
    forced = precision.choose("int8", Int8Model(), cpu)
    assert forced == precision.Choice(
        "int8", "precision: int8 (asked), on fbgemm's kernels (NMT_INT8_ENGINE=fbgemm)", "fbgemm"
    )
    monkeypatch.setenv(precision.ENGINE, "qnnpack")
    with pytest.raises(
        NMTError, match=r"NMT_INT8_ENGINE='qnnpack' is not an int8 engine this torch has \(fbgemm, onednn\)"
    ):
        precision.choose("int8", Int8Model(), cpu)


def test_a_real_measurement_times_both_int8_engines():
    if precision.int8_engines() != ["fbgemm", "onednn"]:
        pytest.skip("this torch has not both of fbgemm's and oneDNN's int8 kernels")
    timings = precision.time_engines(8, 64, 32)
    assert set(timings) == {"fbgemm", "onednn"} and all(ms > 0 for ms in timings.values())


@pytest.mark.parametrize("onednn", [True, False])
def test_a_real_measurement_times_fp32_and_int8(onednn, monkeypatch):
    monkeypatch.setattr(linear, "ONEDNN", onednn)  # fp32 as decoding runs it: oneDNN, or F.linear
    timings = precision.time_int8(8, 64, 32)
    assert set(timings) == {"fp32", "int8"} and all(ms > 0 for ms in timings.values())


# -- training ---------------------------------------------------------------------------------


def valid_losses(run):
    return [m["valid_loss"] for m in read_metrics(run) if "valid_loss" in m]


def test_bf16_training_keeps_close_to_fp32_records_its_precision_and_resumes_exactly(
    toy_dir, tmp_path, bf16_kind
):
    steps = ("train.valid_every=10", "train.device=cpu", "train.log_every=5")
    runs = {name: tmp_path / name for name in ("fp32", "bf16", "resumed")}
    nmt_train(toy_dir, runs["fp32"], "train.max_steps=20", "train.precision=fp32", *steps)
    nmt_train(toy_dir, runs["bf16"], "train.max_steps=20", "train.precision=bf16", *steps)
    fp32, bf16 = valid_losses(runs["fp32"]), valid_losses(runs["bf16"])
    assert fp32 != bf16 and all(abs(a - b) < 0.03 * a for a, b in zip(fp32, bf16, strict=True))
    assert read_checkpoint(runs["bf16"] / CHECKPOINTS / LAST)["precision"] == "bf16"
    assert "bf16 products (fp32 accumulation and weights)" in (runs["bf16"] / "train.log").read_text()

    nmt_train(toy_dir, runs["resumed"], "train.max_steps=10", "train.precision=bf16", *steps)
    resumed = runner.invoke(
        app, ["train", "--resume", str(runs["resumed"]), "--set", "train.max_steps=20", "-q"]
    )
    assert resumed.exit_code == 0, resumed.output
    assert valid_losses(runs["resumed"]) == bf16  # exact resume within a precision


def test_auto_training_measures_records_and_keeps_its_choice_on_resume(toy_dir, tmp_path, monkeypatch):
    if not linear.BF16_UNITS:
        pytest.skip("this CPU has no bf16 units: auto trains in fp32 without measuring")
    monkeypatch.setattr(precision, "time_precisions", lambda *shape: {"fp32": 3.0, "bf16": 1.0})
    run = tmp_path / "run"
    nmt_train(toy_dir, run, "train.max_steps=4", "train.valid_every=4", "train.device=cpu")
    assert read_checkpoint(run / CHECKPOINTS / LAST)["precision"] == "bf16"
    assert "precision: bf16 (auto: the model's products run 3.00x as fast" in (run / "train.log").read_text()
    monkeypatch.setattr(precision, "time_precisions", lambda *shape: pytest.fail("measured on resume"))
    precision.CACHE.path.unlink()
    resumed = runner.invoke(app, ["train", "--resume", str(run), "--set", "train.max_steps=8", "-q"])
    assert resumed.exit_code == 0, resumed.output
    assert "precision: bf16 (recorded by the run, kept on resume)" in (run / "train.log").read_text()


def test_a_bf16_run_resumed_on_auto_without_bf16_units_stops_in_one_line_unless_fp32_is_asked(
    toy_dir, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    nmt_train(
        toy_dir, run, "train.max_steps=4", "train.valid_every=4", "train.device=cpu", "train.precision=bf16"
    )
    assert read_checkpoint(run / CHECKPOINTS / LAST)["precision"] == "bf16"

    monkeypatch.setattr(linear, "BF16_UNITS", False)
    linear.drop_prepacked()
    resume = ["train", "--resume", str(run), "--set", "train.max_steps=8", "-q", "--set"]
    refused = runner.invoke(app, [*resume, "train.precision=auto"])
    assert refused.exit_code == 2
    assert refused.stderr.strip().splitlines() == [
        "error: this run trained with bf16 products and this CPU has no bf16 units; resume it with "
        "--set train.precision=fp32 to go on in fp32 (no longer bit-identical)"
    ]
    asked = runner.invoke(app, [*resume, "train.precision=fp32"])
    assert asked.exit_code == 0, asked.output
    assert "the run trained in bf16 until now (not bit-identical)" in (run / "train.log").read_text()
    assert read_checkpoint(run / CHECKPOINTS / LAST)["precision"] == "fp32"
    linear.drop_prepacked()


def test_a_run_from_before_precisions_were_recorded_resumes_in_fp32(toy_dir, tmp_path, monkeypatch):
    from nmt.checkpoint import write_state

    run = tmp_path / "run"
    nmt_train(
        toy_dir, run, "train.max_steps=4", "train.valid_every=4", "train.device=cpu", "train.precision=fp32"
    )
    last = run / CHECKPOINTS / LAST
    state = read_checkpoint(last)
    del state["precision"]  # as an nmt before precisions wrote it
    write_state(last, state)
    monkeypatch.setattr(linear, "BF16_UNITS", True)  # auto would take bf16 on a fresh run here
    monkeypatch.setattr(precision, "time_precisions", lambda *shape: pytest.fail("measured on resume"))
    args = [
        "train",
        "--resume",
        str(run),
        "--set",
        "train.max_steps=8",
        "--set",
        "train.precision=auto",
        "-q",
    ]
    resumed = runner.invoke(app, args)
    assert resumed.exit_code == 0, resumed.output
    assert "precision: fp32 (recorded by the run, kept on resume)" in (run / "train.log").read_text()
    assert read_checkpoint(last)["precision"] == "fp32"
