"""Releases and exports are checked when they load: files changed since they were written (their
sha256 in the manifest written last), weights or vocabularies that do not fit the model's own
config, graphs of two exports mixed, and weights that are not finite are each one line and exit
code 2, never a traceback nor empty translations. Releases and exports made before manifests
existed still load."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from nmt.checkpoint import read_checkpoint, write_state
from tests.conftest import one_line_error
from tests.ship.conftest import invoke

MANIFEST = "manifest.json"


def translate(model: Path, tmp_path: Path, *extra: str, code: int = 2):
    source = tmp_path / "in.txt"
    source.write_text("1. Mai 1999\nSonntag, 12. März 1989\n")
    return invoke("translate", "-m", model, "-i", source, "-q", *extra, code=code)


def refreshed(directory: Path, name: str) -> None:
    """After `name` was replaced on purpose: its manifest entry made to match (a release or
    export written that way), so the check under test is the one after the checksums."""
    for manifest, files in ((directory / MANIFEST, "files"), (directory / "config.json", "files")):
        if manifest.is_file():
            data = json.loads(manifest.read_text())
            if name in data.get(files, {}):
                content = (directory / name).read_bytes()
                data[files][name] = {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}
                manifest.write_text(json.dumps(data))


# -- releases -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def release(toy_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("integrity") / "release"
    invoke("release", toy_run, "-o", out)
    return out


@pytest.fixture
def copy(release, tmp_path) -> Path:
    return Path(shutil.copytree(release, tmp_path / "release"))


def rewrite_weights(directory: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(directory / "model.safetensors")
    change(weights)
    save_file(weights, directory / "model.safetensors", metadata={"format": "nmt-release", "dtype": "fp32"})


def test_a_release_has_a_manifest_of_what_translating_reads(release):
    files = json.loads((release / MANIFEST).read_text())["files"]
    assert sorted(files) == ["model.safetensors", "spm.model"]
    for name, entry in files.items():
        assert entry["sha256"] == hashlib.sha256((release / name).read_bytes()).hexdigest()


def test_a_release_whose_weights_changed_on_disk_is_refused(copy, tmp_path):
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4:] = b"\x00\x00\x80\x7f"  # the last float of the last tensor: +inf, same size
    weights.write_bytes(bytes(data))
    one_line_error(translate(copy, tmp_path), str(weights), "sha256", "manifest.json")


def test_a_release_with_weights_of_another_shape_is_one_line_error(copy, tmp_path):
    def smaller(weights):
        name = next(k for k in weights if k.endswith("embed.weight"))
        weights[name] = weights[name][:-1].clone()

    rewrite_weights(copy, smaller)
    refreshed(copy, "model.safetensors")
    one_line_error(translate(copy, tmp_path), "embed.weight", "shape")


def test_a_release_whose_sentencepiece_model_is_random_bytes_is_one_line_error(copy, tmp_path):
    (copy / "spm.model").write_bytes(bytes(range(256)) * 4)
    refreshed(copy, "spm.model")
    one_line_error(translate(copy, tmp_path), str(copy / "spm.model"), "SentencePiece")


def test_a_release_with_non_finite_weights_is_one_line_error(copy, tmp_path):
    def nan(weights):
        name = next(iter(weights))
        weights[name] = torch.full_like(weights[name], float("nan"))

    rewrite_weights(copy, nan)
    refreshed(copy, "model.safetensors")
    one_line_error(translate(copy, tmp_path), "not finite")


def test_a_release_from_before_manifests_still_translates(copy, release, tmp_path):
    (copy / MANIFEST).unlink(missing_ok=True)
    assert translate(copy, tmp_path, code=0).stdout == translate(release, tmp_path, code=0).stdout


def test_a_checkpoint_with_non_finite_weights_is_not_released(toy_run, tmp_path):
    state = read_checkpoint(toy_run)
    state["model"] = {k: torch.full_like(v, float("inf")) for k, v in state["model"].items()}
    write_state(tmp_path / "inf.pt", state)
    one_line_error(invoke("release", tmp_path / "inf.pt", "-o", tmp_path / "out", code=2), "not finite")
    assert not (tmp_path / "out").exists()


# -- exports ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exports(toy_run, tmp_path_factory) -> tuple[Path, Path]:
    """Exports of two snapshots of one run: same shapes, other weights."""
    pytest.importorskip("onnxruntime")
    folder = tmp_path_factory.mktemp("integrity-exports")
    invoke("export", toy_run / "checkpoints" / "last.pt", "-o", folder / "last")
    invoke("export", toy_run / "checkpoints" / "step-10.pt", "-o", folder / "early")
    return folder / "last", folder / "early"


@pytest.fixture
def exported(exports, tmp_path) -> Path:
    return Path(shutil.copytree(exports[0], tmp_path / "export"))


def onnx_translate(directory: Path, tmp_path: Path, code: int = 2):
    return translate(directory, tmp_path, "--engine", "onnx", code=code)


def test_an_export_names_its_files_and_both_graphs_carry_its_id(exports):
    import onnx

    config = json.loads((exports[0] / "config.json").read_text())
    assert sorted(config["files"]) == ["decoder_step.onnx", "encoder.onnx", "spm.model"]
    for graph in ("encoder.onnx", "decoder_step.onnx"):
        props = {p.key: p.value for p in onnx.load(exports[0] / graph).metadata_props}
        assert props["nmt.export_id"] == config["export_id"]
    other = json.loads((exports[1] / "config.json").read_text())
    assert other["export_id"] != config["export_id"]


def test_an_export_whose_config_is_not_json_is_one_line_error(exported, tmp_path):
    (exported / "config.json").write_text('{"format": "nmt-onnx",')
    one_line_error(onnx_translate(exported, tmp_path), str(exported / "config.json"), "JSON")


@pytest.mark.parametrize("key", ["decode", "max_len", "format"])
def test_an_export_whose_config_lacks_a_section_is_one_line_error(exported, tmp_path, key):
    config = json.loads((exported / "config.json").read_text())
    del config[key]
    (exported / "config.json").write_text(json.dumps(config))
    one_line_error(onnx_translate(exported, tmp_path), str(exported / "config.json"), key)


def test_an_export_with_the_decoder_graph_of_another_export_is_refused(exported, exports, tmp_path):
    shutil.copy(exports[1] / "decoder_step.onnx", exported / "decoder_step.onnx")
    one_line_error(onnx_translate(exported, tmp_path), "decoder_step.onnx")
    refreshed(exported, "decoder_step.onnx")  # even with its checksum made to match: the ids differ
    one_line_error(onnx_translate(exported, tmp_path), "decoder_step.onnx", "another export")


def test_an_export_with_non_finite_weights_is_one_line_error(exported, tmp_path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(exported / "decoder_step.onnx")
    for tensor in model.graph.initializer:
        values = numpy_helper.to_array(tensor)
        if values.dtype.kind == "f":
            values = values.copy()
            values[...] = float("nan")
            tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    onnx.save(model, exported / "decoder_step.onnx")
    refreshed(exported, "decoder_step.onnx")
    one_line_error(onnx_translate(exported, tmp_path), "not finite")


def test_an_export_with_a_tokenizer_of_another_vocabulary_is_one_line_error(exported, toy_dir, tmp_path):
    from nmt.config import TokenizerConfig
    from nmt.data.tokenizer import TokenizerPair
    from nmt.fileio import read_lines

    lines = [read_lines(toy_dir / f"train.{lang}")[:500] for lang in ("human", "iso")]
    smaller = TokenizerPair.train(list(zip(*lines, strict=True)), TokenizerConfig(vocab_size=60))
    (exported / "spm.model").write_bytes(smaller.src.model_bytes)
    refreshed(exported, "spm.model")
    one_line_error(onnx_translate(exported, tmp_path), "vocabulary")


def test_an_export_from_before_manifests_still_translates(exported, exports, tmp_path):
    config = json.loads((exported / "config.json").read_text())
    old = {k: v for k, v in config.items() if k not in ("files", "export_id")} | {"format_version": 1}
    (exported / "config.json").write_text(json.dumps(old))
    expected = onnx_translate(exports[0], tmp_path, code=0).stdout
    assert onnx_translate(exported, tmp_path, code=0).stdout == expected
