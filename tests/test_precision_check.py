"""`nmt precision` and `auto` taking int8 (nmt.commands.precision, nmt.decode.bleucheck,
nmt.model.precision): the check decodes a set in each precision and keeps their BLEU beside the
weights; `auto` takes int8 for those weights alone, only where int8 lost at most 0.2 BLEU and its
products run 1.5x as fast; the user's choice, a shortlist and an ensemble keep it off."""

import json
import os
import shutil

import pytest
import sacrebleu
from typer.testing import CliRunner

from nmt.checkpoint import load_model, weights_file
from nmt.cli import app
from nmt.decode import bleucheck
from nmt.decode.bleucheck import read_check, record_path, weights_digest, write_check
from nmt.fileio import file_identity, read_lines
from nmt.machine import int8_scheme
from nmt.model import linear, precision
from nmt.model.precision import BleuCheck
from tests.test_end_to_end import train_toy

runner = CliRunner()
pytestmark = pytest.mark.skipif(not linear.ONEDNN, reason="this torch has no oneDNN")


@pytest.fixture(scope="module")
def trained(toy_dir, tmp_path_factory):
    return train_toy(toy_dir, tmp_path_factory.mktemp("precision") / "run", "train.max_steps=30")


@pytest.fixture()
def model(trained, tmp_path):
    """A copy of the trained run, for a test to check and change."""
    return shutil.copytree(trained, tmp_path / "run")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own machine cache; `auto` meaning auto (conftest sets fp32), on a CPU
    without bf16 units whatever this one has, so every machine checks the same precisions."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(precision.AUTO, raising=False)
    monkeypatch.setattr(linear, "BF16_UNITS", False)


def int8_runs(times_as_fast: float):
    return lambda *shape: {"fp32": times_as_fast, "int8": 1.0}


def invoke(*args, code=0, input=None):
    result = runner.invoke(app, [*map(str, args)], input=input)
    assert result.exit_code == code, result.output
    return result


def translate(model, toy_dir, *args):
    return invoke("translate", "-m", model, "-i", toy_dir / "test.human", "--device", "cpu", *args)


def test_the_check_keeps_the_bleu_of_each_precision_as_translate_and_sacrebleu_give_it(
    model, toy_dir, monkeypatch
):
    monkeypatch.setattr(precision, "time_int8", int8_runs(2.0))
    printed = invoke("precision", "-m", model).stdout.splitlines()
    record = json.loads(record_path(weights_file(model)).read_text())
    refs = (toy_dir / "valid.iso").read_text().splitlines()
    for name in ("fp32", "int8"):
        out = invoke(
            "translate", "-m", model, "-i", toy_dir / "valid.human", "--device", "cpu", "--precision", name
        )
        bleu = sacrebleu.corpus_bleu(out.stdout.splitlines(), [refs]).score
        assert record["bleu"][name] == pytest.approx(bleu, abs=1e-9)
        assert any(line.startswith(f"{name:10} {bleu:6.2f}") for line in printed)
    assert record["weights_sha256"] == weights_digest(weights_file(model))
    assert record["weights_file"] == file_identity(weights_file(model))
    assert record["on"] == f"valid.human ({len(refs):,} lines, beam 1)"
    assert set(record["seconds"]) == {"fp32", "int8"} and record["src"] == str(toy_dir / "valid.human")
    assert record["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    check = BleuCheck(record["bleu"], record["on"])
    assert printed[-2] == f"wrote {record_path(weights_file(model))}: {check}"
    expected = "int8 (auto: the products it replaces run 2.00x" if check.allows_int8 else "fp32"
    assert printed[-1].startswith(f"auto on this CPU, from now: precision: {expected}")


def checked(model, fp32: float, int8: float) -> BleuCheck:
    """A check of `model`'s weights with these scores, as `nmt precision` writes one."""
    weights = weights_file(model)
    check = BleuCheck({"fp32": fp32, "int8": int8}, "valid.human (60 lines, beam 1)")
    write_check(weights, weights_digest(weights), check, {})
    return check


def test_auto_takes_int8_for_checked_weights_where_it_runs_fast_enough(model, toy_dir, monkeypatch):
    plain = translate(model, toy_dir)  # no check yet: fp32, and nothing timed
    assert (
        "precision: fp32 (auto: this CPU has no bf16 units oneDNN can use); int8 is weighed once "
        f"`nmt precision -m {model}` checks its BLEU"
    ) in plain.stderr
    checked(model, 30.0, 29.85)
    timed = []
    monkeypatch.setattr(precision, "time_int8", lambda *shape: timed.append(shape) or int8_runs(2.0)())
    auto = translate(model, toy_dir)
    asked = translate(model, toy_dir, "--precision", "int8")
    assert auto.stdout == asked.stdout
    assert (
        "precision: int8 (auto: the products it replaces run 2.00x as fast as in fp32 on this CPU, 1.5x "
        "needed, and int8 scored 29.85 BLEU against fp32's 30.00 on valid.human (60 lines, beam 1), 0.2 "
        "lower allowed; timed once, kept in"
    ) in auto.stderr
    seq2seq = load_model(model).model
    assert timed == precision.product_shapes(seq2seq, precision.INT8_LAYERS)
    encoder, decoder = seq2seq.encoder.rnn, seq2seq.decoder  # both LSTMs and the output layer
    weights = (encoder.weight_ih_l0, encoder.weight_hh_l0, decoder.rnn.weight_hh_l0)
    weights += (decoder.output_layer.weight,)
    assert {(64, *w.shape) for w in weights} <= {*timed}
    translate(model, toy_dir)
    assert len(timed) == len({*timed})  # the second run read the machine's cache
    assert "auto first weighed int8" in invoke("env", "--bench").stdout

    monkeypatch.setattr(precision, "time_int8", lambda *shape: pytest.fail("timed for an asked precision"))
    assert "precision: fp32 (asked)" in translate(model, toy_dir, "--precision", "fp32").stderr


def test_auto_keeps_fp32_where_int8_lost_too_much_or_is_not_fast_enough(model, toy_dir, monkeypatch):
    checked(model, 30.0, 29.7)
    monkeypatch.setattr(precision, "time_int8", lambda *shape: pytest.fail("timed, though BLEU said no"))
    lost = translate(model, toy_dir).stderr
    assert (
        "precision: fp32 (auto: this CPU has no bf16 units oneDNN can use); not int8: int8 scored 29.70 "
        "BLEU against fp32's 30.00 on valid.human (60 lines, beam 1), 0.2 lower allowed"
    ) in lost

    checked(model, 30.0, 30.4)
    monkeypatch.setattr(precision, "time_int8", int8_runs(1.4))
    slow = translate(model, toy_dir).stderr
    assert "; not int8: 1.40x as fast as fp32, 1.5x needed" in slow
    assert translate(model, toy_dir).stdout == translate(model, toy_dir, "--precision", "fp32").stdout


def test_a_check_of_other_weights_or_another_int8_or_a_damaged_one_is_ignored(model, toy_dir, monkeypatch):
    monkeypatch.setattr(precision, "time_int8", lambda *shape: pytest.fail("timed without a check"))
    weights = weights_file(model)
    write_check(weights, "0" * 64, BleuCheck({"fp32": 30.0, "int8": 30.0}, "valid.human"), {})
    other = translate(model, toy_dir).stderr
    assert (
        f"{record_path(weights)}: a check of other weights than best.pt holds now; int8 not weighed "
        f"until `nmt precision -m {model}` checks these weights"
    ) in other
    assert "precision: fp32 (auto" in other

    document = json.loads(record_path(weights).read_text())
    earlier = {**document, "weights_sha256": weights_digest(weights), "int8_layers": ["decoder.rnn"]}
    for record in (earlier, {key: value for key, value in earlier.items() if key != "int8_layers"}):
        record_path(weights).write_text(json.dumps(record))
        assert (
            f"{record_path(weights)}: a check of an earlier int8, which quantised other layers; int8 not "
            f"weighed until `nmt precision -m {model}` checks these weights"
        ) in translate(model, toy_dir).stderr

    here, current = int8_scheme(), {**document, "weights_sha256": weights_digest(weights)}
    without = {key: value for key, value in current.items() if key != "int8_scheme"}
    for record, scheme in ((without, bleucheck.EARLIER_SCHEME), ({**current, "int8_scheme": "x"}, "x")):
        record_path(weights).write_text(json.dumps(record))
        assert (
            f"{record_path(weights)}: a check of int8 with {scheme}, where int8 here takes {here}; int8 "
            f"not weighed until `nmt precision -m {model}` checks these weights"
        ) in translate(model, toy_dir).stderr

    record_path(weights).write_text('{"weights_sha256": "x", "on": "v", "bleu": {"fp32": 1}}')
    damaged = translate(model, toy_dir).stderr
    assert f"{record_path(weights)}: " in damaged and "no field 'int8'" in damaged
    assert read_check(weights, model)[0] is None


def test_the_digest_is_computed_again_only_once_the_file_is_replaced_or_written(model, monkeypatch):
    weights = weights_file(model)
    check = BleuCheck({"fp32": 30.0, "int8": 30.0}, "valid.human")
    write_check(weights, weights_digest(weights), check, {}, file_identity(weights))
    hashed = []
    monkeypatch.setattr(bleucheck, "weights_digest", lambda path: hashed.append(path) or weights_digest(path))
    assert read_check(weights, model) == (check, "") and hashed == []  # the identity spares the digest

    copy = weights.with_name("copy")
    shutil.copyfile(weights, copy)
    os.replace(copy, weights)  # the same bytes in a new file: hashed, and still the checked weights
    assert read_check(weights, model) == (check, "") and hashed == [weights]

    status = weights.stat()
    with open(weights, "r+b") as f:  # written in place, as `cp` over it does: other weights
        f.seek(status.st_size // 2)
        byte = f.read(1)[0]
        f.seek(status.st_size // 2)
        f.write(bytes([byte ^ 1]))
    os.utime(weights, ns=(status.st_atime_ns, status.st_mtime_ns + 1))  # however coarse the clock
    assert read_check(weights, model)[0] is None and len(hashed) == 2


def test_a_shortlist_and_an_ensemble_keep_auto_off_int8(model, monkeypatch):
    from nmt.decode.translator import load_translator

    checked(model, 30.0, 30.0)
    monkeypatch.setattr(precision, "time_int8", int8_runs(3.0))
    assert load_translator([model], {}, "cpu").precision.name == "int8"
    assert load_translator([model], {}, "cpu", int8=False).precision.name == "fp32"  # a shortlist's
    assert load_translator([model, model], {}, "cpu").precision.name == "fp32"


def test_bad_sets_are_one_line(model, toy_dir, tmp_path):
    src = toy_dir / "valid.human"
    short = tmp_path / "short.iso"
    lines = (toy_dir / "valid.iso").read_text().splitlines()
    short.write_text("\n".join(lines[:-1]) + "\n")
    for args, message in [
        (["--src", src], "precision: give both --src and --ref, or neither"),
        (["--src", src, "--ref", short], f"{src} has {len(lines):,} lines and {short} {len(lines) - 1:,}"),
    ]:
        result = invoke("precision", "-m", model, *args, code=2)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_without_files_the_check_takes_the_validation_split_when_its_text_is_here(tmp_path):
    from nmt.commands.precision import check_set
    from nmt.config import load_config
    from nmt.errors import NMTError

    cfg = load_config("toy-luong.yaml", [f"data.dir={tmp_path}"])
    with pytest.raises(NMTError, match=r"validation split \(.*/valid.human, .iso\) is not here"):
        check_set(cfg, None, None)
    for lang in ("human", "iso"):
        (tmp_path / f"valid.{lang}").write_text("a\n")
    assert check_set(cfg, None, None) == (tmp_path / "valid.human", tmp_path / "valid.iso")


@pytest.mark.parametrize("engine", precision.int8_engines())
def test_int8_decodes_on_each_engine_it_is_given(engine, model, toy_dir, monkeypatch):
    """Both of torch's int8 engines for x86 run the model close to fp32 (each packs the weights
    for its own kernels); the engine torch had before is left in place."""
    import torch

    from nmt.decode.translator import load_translator

    before = torch.backends.quantized.engine
    monkeypatch.setenv(precision.ENGINE, engine)
    said = translate(model, toy_dir, "--precision", "int8").stderr
    assert f"precision: int8 (asked), on {precision.INT8_ENGINES[engine]}'s kernels" in said
    sources, targets = (read_lines(toy_dir / f"valid.{lang}")[:20] for lang in ("human", "iso"))
    int8 = load_translator([model], {}, "cpu", "int8")
    assert int8.precision.engine == engine and torch.backends.quantized.engine == before
    fp32 = load_translator([model], {}, "cpu", "fp32")
    scored = [[s.log_prob for s in t.score(sources, targets)] for t in (int8, fp32)]
    assert scored[0] != scored[1]  # int8 ran
    torch.testing.assert_close(torch.tensor(scored[0]), torch.tensor(scored[1]), rtol=1e-3, atol=0.05)
