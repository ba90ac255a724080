"""The package's layering (docs/architecture.md): every import, lazy ones inside functions
included, points down the stack or stays inside its own package; and every registry offers
exactly the names its config field accepts."""

import ast
import typing
from pathlib import Path

import pytest

import nmt

PACKAGE = Path(nmt.__file__).parent

# Two storeys (docs/architecture.md). The core, lowest layer first: a module may import from a
# lower layer or from its own unit, never sideways within a layer nor up.
CORE = [
    ["nmt.errors", "nmt.vocab", "nmt.words", "nmt.allocator", "nmt.version", "nmt.assets"],
    ["nmt.registry"],
    ["nmt.plugins"],
    ["nmt.fileio", "nmt.config", "nmt.device", "nmt.machine", "nmt.hub", "nmt.pharaoh"],
    ["nmt.jsonvalues"],
    ["nmt.plots", "nmt.rundir", "nmt.measured"],
    ["nmt.data", "nmt.evaluate"],
    ["nmt.model"],
    ["nmt.checkpoint", "nmt.text"],
    ["nmt.decode", "nmt.runtime"],
    ["nmt.train"],
]
# The applications: each uses the core and never another application.
APPLICATIONS = ["nmt.commands", "nmt.explore", "nmt.ship", "nmt.compare", "nmt.serve"]
# The front ends: the command line dispatches to the applications and the core.
FRONT = [["nmt.cli"], ["nmt.__main__"]]
LAYERS = [*CORE, APPLICATIONS, *FRONT]


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the unit it belongs to) of a dotted module name inside nmt."""
    for index, units in enumerate(LAYERS):
        for unit in units:
            if module == unit or module.startswith(unit + "."):
                return index, unit
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")


def allowed(importer: str, target: str) -> bool:
    """Down the stack, or inside the importer's own unit."""
    (my_layer, my_unit), (layer, unit) = layer_of(importer), layer_of(target)
    return layer < my_layer or unit == my_unit


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


# the package facade (nmt/__init__.py) is the Python API's door: it may name anything, lazily
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_imports_point_down_the_stack(path):
    me = module_name(path)
    for line, target in imports(path):
        assert allowed(me, target), (
            f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} (layer {layer_of(target)}) "
            f"from layer {layer_of(me)}: imports must point down the stack, never between applications"
        )


def test_nothing_imports_the_package_facade():
    """`import nmt` inside the package would tie every module to the facade's lazy names."""
    for path in SOURCES:
        assert "nmt" not in [target for _, target in imports(path)], path


def test_every_unit_is_in_one_layer_and_every_package_in_a_unit():
    units = [unit for layer in LAYERS for unit in layer]
    assert len(units) == len(set(units))
    for path in SOURCES:
        layer_of(module_name(path))


def test_applications_use_the_core_and_not_each_other():
    assert allowed("nmt.serve.app", "nmt.decode.translator")
    assert not allowed("nmt.serve.app", "nmt.explore.page")
    assert not allowed("nmt.ship.release", "nmt.commands.evaluate")
    assert not allowed("nmt.decode.search", "nmt.runtime.search")  # the two engines share nmt.text
    assert allowed("nmt.cli.serve", "nmt.serve.server")


def test_the_layer_test_catches_a_lazy_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from nmt.train.trainer import Trainer\n")
    assert (2, "nmt.train.trainer") in imports(bad)
    assert not allowed("nmt.model.decoder", "nmt.train.trainer")


def test_the_model_does_not_import_sentencepiece_or_the_data_layer():
    import subprocess
    import sys

    code = "import sys, nmt.model.seq2seq; print('sentencepiece' in sys.modules, 'nmt.data' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def registries():
    from nmt.config import PLUGGABLE, ModelConfig, TrainConfig
    from nmt.model.attention import Attention
    from nmt.model.bridge import Bridge
    from nmt.model.decoder import Decoder
    from nmt.model.init import INITIALISERS
    from nmt.train.schedule import OPTIMIZERS, Schedule

    def choices(cls, name):
        return set(typing.get_args(typing.get_type_hints(cls)[name]))

    def builtin(root):  # a plugin's classes, registered by a test, are not the config's built-ins
        return {name for name, cls in root.registry.items() if cls.__module__.startswith("nmt.")}

    return [
        ("attention", builtin(Attention), set(PLUGGABLE["model.attention.type"][1])),
        ("bridge", builtin(Bridge), set(PLUGGABLE["model.decoder.bridge"][1])),
        ("decoder", builtin(Decoder), set(PLUGGABLE["model.decoder.style"][1])),
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


LONGEST_FUNCTION = 60  # lines, from `def` to the end of the body


def test_no_function_is_longer_than_a_screen():
    """A function a reader can see whole: split the longer ones along their seams."""
    functions = [
        (path.relative_to(PACKAGE.parent), node.lineno, node.name, node.end_lineno - node.lineno + 1)
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    too_long = [
        f"{path}:{line} {name} ({n} lines)" for path, line, name, n in functions if n > LONGEST_FUNCTION
    ]
    assert not too_long, too_long
