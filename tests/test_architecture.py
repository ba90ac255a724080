"""The package's layering (docs/architecture.md): every import, lazy ones inside functions
included, points down the stack or stays inside its own package; and every registry offers
exactly the names its config field accepts."""

import ast
import typing
from pathlib import Path

import pytest

import nmt

PACKAGE = Path(nmt.__file__).parent

# Lowest first; a module may import from a lower layer, or from its own package (the same prefix).
LAYERS = [
    ["nmt.errors", "nmt.vocab", "nmt.registry", "nmt.words", "nmt.allocator"],
    ["nmt.fileio", "nmt.config", "nmt.device", "nmt.hub"],
    ["nmt.plots", "nmt.rundir"],
    ["nmt.data"],
    ["nmt.model"],
    ["nmt.checkpoint"],
    ["nmt.decode"],
    ["nmt.runtime"],
    ["nmt.evaluate"],
    ["nmt.ship"],
    ["nmt.train"],
    ["nmt.compare"],
    ["nmt.serve"],
    ["nmt.cli"],
    ["nmt.__main__"],
]


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the unit it belongs to) of a dotted module name inside nmt."""
    for index, units in enumerate(LAYERS):
        for unit in units:
            if module == unit or module.startswith(unit + "."):
                return index, unit
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every nmt import in the file, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nmt"):
            names = [f"{node.module}.{a.name}" for a in node.names]
            # `from nmt.cli import train` imports the module nmt.cli.train
            found += [
                (node.lineno, n if (PACKAGE.parent / n.replace(".", "/")).exists() else node.module)
                for n in names
            ]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("nmt")]
    return found


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_imports_point_down_the_stack(path):
    me = module_name(path)
    my_layer, my_unit = layer_of(me)
    for line, target in imports(path):
        if target == "nmt":  # the version string
            continue
        layer, unit = layer_of(target)
        assert layer < my_layer or unit == my_unit, (
            f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} (layer {layer}, {unit}) "
            f"from layer {my_layer} ({my_unit}): imports must point down the stack"
        )


def test_the_layer_test_catches_a_lazy_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from nmt.train.trainer import Trainer\n")
    assert (2, "nmt.train.trainer") in imports(bad)
    assert layer_of("nmt.train.trainer")[0] > layer_of("nmt.model.decoder")[0]


def test_the_model_does_not_import_sentencepiece_or_the_data_layer():
    import subprocess
    import sys

    code = "import sys, nmt.model.seq2seq; print('sentencepiece' in sys.modules, 'nmt.data' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def registries():
    from nmt.config import AttentionConfig, DecoderConfig, ModelConfig, TrainConfig
    from nmt.model.attention import Attention
    from nmt.model.bridge import Bridge
    from nmt.model.decoder import Decoder
    from nmt.model.init import INITIALISERS
    from nmt.train.schedule import OPTIMIZERS, Schedule

    def choices(cls, name):
        return set(typing.get_args(typing.get_type_hints(cls)[name]))

    return [
        ("attention", set(Attention.registry), choices(AttentionConfig, "type")),
        ("bridge", set(Bridge.registry), choices(DecoderConfig, "bridge")),
        ("decoder", set(Decoder.registry), choices(DecoderConfig, "style")),
        ("schedule", set(Schedule.registry), choices(TrainConfig, "schedule")),
        ("init", set(INITIALISERS), choices(ModelConfig, "init")),
        ("optimizer", set(OPTIMIZERS), choices(TrainConfig, "optimizer")),
    ]


@pytest.mark.parametrize(
    "name,registered,accepted", registries(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_every_registry_matches_its_config_choices(name, registered, accepted):
    assert registered == accepted, name


def test_registries_are_separate():
    from nmt.model.attention import Attention
    from nmt.model.bridge import Bridge

    assert not set(Attention.registry) & set(Bridge.registry) - {"none"}
    assert Attention.registry["none"] is not Bridge.registry["none"]
