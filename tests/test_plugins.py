"""A user's own attention from a file of theirs (`nmt.plugins`): named by a config or --plugin,
checked with the config, recorded in every model, refused or run on load as the user says; a
plugin run trains, resumes exactly and decodes the same from a fresh process."""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from nmt import plugins
from nmt.checkpoint import read_checkpoint
from nmt.cli import app
from nmt.config import load_config
from nmt.errors import NMTError
from nmt.rundir import CHECKPOINTS, LAST, read_metrics
from tests.conftest import assert_resumed_at
from tests.plugins import STATEFUL, load_examples
from tests.test_faults import ROOT, fails_cleanly, losses, nmt_process, wait_for_step

runner = CliRunner()
load_examples()  # this process has them; the processes a test starts are given them


def plugin_config(folder: Path, toy_dir: Path, attention: str = "location", **options) -> Path:
    """A config beside its own copy of the example plugin, naming it by a relative path."""
    (folder / "mine").mkdir(parents=True, exist_ok=True)
    shutil.copy(STATEFUL[attention], folder / "mine" / f"{attention}.py")
    config = {
        "base": "toy-luong.yaml",
        "plugins": [f"mine/{attention}.py"],
        "data": {"dir": str(toy_dir)},
        "tokenizer": {"vocab_size": 120},
        "model": {
            "embedding": 16,
            "dropout": 0.3,
            "encoder": {"hidden": 16},
            "decoder": {"hidden": 32},
            "attention": {"type": attention, "options": options},
        },
        "train": {"log_every": 5, "valid_every": 10, "max_steps": 30},
        "decode": {"max_len": 16},
    }
    path = folder / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def plugin_run(toy_dir, tmp_path_factory):
    """An uninterrupted run of a plugin attention, trained in its own process."""
    folder = tmp_path_factory.mktemp("plugin")
    config = plugin_config(folder, toy_dir, filters=4, width=5)
    proc = nmt_process(["train", "-c", config, "-o", folder / "run", "-q"])
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return folder


def test_a_config_names_its_plugin_relative_to_itself_and_checks_its_options(tmp_path, toy_dir):
    cfg = load_config(plugin_config(tmp_path, toy_dir), ["model.attention.options.width=9"])
    assert cfg.plugins == [str((tmp_path / "mine" / "location.py").resolve())]
    assert cfg.model.attention.options == {"width": 9}
    config = tmp_path / "mine.yaml"
    for overrides, fragment in [
        (["model.attention.options.wdith=9"], "options.wdith: unknown key (did you mean width?)"),
        (["model.attention.options.width=4"], "width an odd number"),
        (["model.attention.options.width=x"], "options.width: expected int"),
        (
            ["model.attention.type=dot", "model.attention.options.width=3"],
            "the dot attention takes no options",
        ),
        (["model.attention.type=locashun"], "name its file under plugins: in the config or give --plugin"),
    ]:
        with pytest.raises(NMTError, match="model.attention") as caught:
            load_config(config, overrides)
        assert fragment in str(caught.value)


def test_a_run_started_with_plugin_resumes_with_the_same_plugin(tmp_path, toy_dir):
    """`nmt compare` resumes its runs as it started them: --config and --plugin again."""
    from nmt.rundir import CONFIG, resume_config

    config = plugin_config(tmp_path, toy_dir, attention="coverage")
    raw = yaml.safe_load(config.read_text())
    raw.pop("plugins")
    config.write_text(yaml.safe_dump(raw))
    extra = [tmp_path / "mine" / "coverage.py"]
    started = load_config(config, [], extra)
    run = tmp_path / "run"
    run.mkdir()
    (run / CONFIG).write_text(started.to_yaml())
    for named in (config, None):
        cfg, changes = resume_config(run, named, [], False, started.to_dict(), plugins=extra)
        assert cfg.plugins == started.plugins and changes == []
    with pytest.raises(NMTError, match="trained with other settings: plugins"):
        resume_config(run, config, [], False, started.to_dict())


def test_configs_show_prints_a_plugin_s_options_with_their_descriptions(tmp_path, toy_dir):
    result = runner.invoke(app, ["configs", "--show", str(plugin_config(tmp_path, toy_dir, width=3))])
    assert result.exit_code == 0, result.output
    assert "type: location" in result.stdout
    assert "filters: 10  # k: filters convolved over the previous weights" in result.stdout
    assert "width: 3  # r: each filter's width" in result.stdout


@pytest.mark.parametrize(
    "source,fragment",
    [
        ("class Broken(:\n", "line 1: invalid syntax"),
        ("x = 1\nraise RuntimeError('no GPU here')\n", "line 2: RuntimeError: no GPU here"),
        (
            "from nmt.model.attention import Attention\nclass Dot(Attention, name='dot'):\n    pass\n",
            "the name 'dot' is taken by nmt.model.attention.DotAttention",
        ),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
    ids=["syntax", "raises", "a built-in name", "not UTF-8"],
)
def test_a_plugin_that_cannot_be_imported_is_one_line(tmp_path, source, fragment):
    bad = tmp_path / "bad.py"
    bad.write_bytes(source if isinstance(source, bytes) else source.encode())
    line = fails_cleanly(["translate", "-m", tmp_path / "none", "--plugin", bad], str(bad))
    assert fragment in line


def test_a_plugin_that_fails_half_way_leaves_none_of_its_classes_registered(tmp_path):
    from nmt.model.attention import Attention

    half = tmp_path / "half.py"
    half.write_text(
        "from nmt.model.attention import DotAttention\n"
        "class Early(DotAttention, name='early'):\n    pass\n"
        "raise ImportError('no such library')\n"
    )
    with pytest.raises(NMTError, match="line 4: ImportError: no such library"):
        plugins.load_file(half)
    assert "early" not in Attention.registry
    fails_cleanly(["translate", "-m", tmp_path / "none", "--plugin", tmp_path / "gone.py"], "not found")


def test_a_signal_mid_run_resumes_exactly_with_the_plugin(plugin_run, tmp_path, toy_dir):
    config = plugin_config(tmp_path, toy_dir, filters=4, width=5)
    run = tmp_path / "run"
    proc = nmt_process(["train", "-c", config, "-o", run, "-q"])
    wait_for_step(run, proc, 12)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    step = read_checkpoint(run / CHECKPOINTS / LAST)["progress"]["step"]
    before = read_metrics(run)
    resumed = subprocess.run(
        [sys.executable, "-m", "nmt", "train", "--resume", str(run), "-q"],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert resumed.returncode == 0, resumed.stderr
    assert_resumed_at(run, before, step, 5)
    assert losses(run) == losses(plugin_run / "run")
    record = read_checkpoint(run / CHECKPOINTS / LAST)["plugins"]
    assert [r["name"] for r in record] == ["location.py"]
    assert record[0]["source"] == STATEFUL["location"].read_text()

    (tmp_path / "mine" / "location.py").write_text(STATEFUL["location"].read_text() + "# edited\n")
    changed = subprocess.run(
        [sys.executable, "-m", "nmt", "train", "--resume", str(run), "--set", "train.max_steps=35", "-q"],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert changed.returncode == 2 and "changed since the run began" in changed.stderr, changed.stderr


def fresh_translate(model, source, *args) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "nmt", "translate", "-m", str(model), "-i", str(source), "-q", *args]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, env=env)


@pytest.mark.parametrize("search", [["--scores"], ["--beam", "3", "--nbest", "3"]], ids=["greedy", "beam"])
def test_a_fresh_process_decodes_what_this_one_does(plugin_run, toy_dir, search):
    model, plugin = plugin_run / "run", plugin_run / "mine" / "location.py"
    source = toy_dir / "test.human"
    here = runner.invoke(app, ["translate", "-m", str(model), "-i", str(source), "-q", *search])
    assert here.exit_code == 0, here.output
    fresh = fresh_translate(model, source, "--plugin", str(plugin), *search)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout == here.stdout and len(here.stdout.splitlines()) >= 60


def test_a_model_runs_no_code_of_its_own_unless_asked(plugin_run, toy_dir, tmp_path):
    model, source = plugin_run / "run", toy_dir / "test.human"
    refused = fresh_translate(model, source)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "needs the plugin location.py (sha256 " in line and "--trust-plugin" in line

    edited = tmp_path / "location.py"
    edited.write_text(STATEFUL["location"].read_text() + "# edited\n")
    mismatched = fresh_translate(model, source, "--plugin", str(edited))
    assert mismatched.returncode == 2
    (line,) = mismatched.stderr.strip().splitlines()
    recorded = read_checkpoint(model / CHECKPOINTS / "best.pt")["plugins"][0]["sha256"]
    assert recorded[:16] in line and plugins.sha256(edited.read_bytes())[:16] in line

    trusted = fresh_translate(model, source, "--trust-plugin", "--scores")
    assert trusted.returncode == 0, trusted.stderr
    assert "running the source recorded in" in trusted.stderr
    here = runner.invoke(app, ["translate", "-m", str(model), "-i", str(source), "-q", "--scores"])
    assert trusted.stdout == here.stdout


def test_a_damaged_record_is_refused_before_anything_runs(plugin_run, tmp_path):
    import torch

    from nmt.checkpoint import write_state

    state = torch.load(plugin_run / "run" / CHECKPOINTS / "best.pt", weights_only=True)
    state["plugins"][0]["source"] += "\nimport os; os.remove('everything')\n"
    write_state(tmp_path / "edited.pt", state)  # checksums rewritten: the sha256 still differs
    fails_cleanly(
        ["translate", "-m", tmp_path / "edited.pt", "--trust-plugin"],
        "does not have the sha256 recorded with it",
    )


def test_release_export_align_explore_and_average_take_the_plugin(plugin_run, toy_dir, tmp_path):
    model, plugin = plugin_run / "run", str(plugin_run / "mine" / "location.py")
    source, ref = toy_dir / "test.human", toy_dir / "test.iso"
    released = tmp_path / "release"
    result = runner.invoke(app, ["release", str(model), "-o", str(released)])
    assert result.exit_code == 0, result.output
    assert (released / "plugins" / "location.py").read_text() == STATEFUL["location"].read_text()
    assert fresh_translate(released, source).returncode == 2
    from_release = fresh_translate(released, source, "--plugin", plugin, "--scores")
    assert from_release.returncode == 0, from_release.stderr
    here = runner.invoke(app, ["translate", "-m", str(model), "-i", str(source), "-q", "--scores"])
    assert from_release.stdout == here.stdout
    (released / "plugins" / "location.py").write_text("import os\n")
    assert "manifest" in fresh_translate(released, source, "--trust-plugin").stderr

    exported = tmp_path / "onnx"
    result = runner.invoke(app, ["export", str(model), "-o", str(exported)])
    assert result.exit_code == 0, result.output
    onnx = runner.invoke(app, ["translate", "-m", str(exported), "--engine", "onnx", "-i", str(source), "-q"])
    torch_out = runner.invoke(app, ["translate", "-m", str(model), "-i", str(source), "-q"])
    assert onnx.stdout == torch_out.stdout

    links = tmp_path / "links.align"
    args = ["align", "-m", str(model), "--src", str(source), "--ref", str(ref), "-o", str(links)]
    result = runner.invoke(app, [*args, "--gold", str(toy_dir / "test.align")])
    assert result.exit_code == 0 and "AER" in result.stdout, result.output
    page = tmp_path / "explore.html"
    args = ["explore", "-m", str(model), "--src", str(source), "--ref", str(ref), "-o", str(page)]
    assert runner.invoke(app, args).exit_code == 0 and page.stat().st_size > 1000

    averaged = tmp_path / "avg.pt"
    snapshots = [str(model / CHECKPOINTS / name) for name in ("best.pt", LAST)]
    assert runner.invoke(app, ["average", *snapshots, "-o", str(averaged)]).exit_code == 0
    assert read_checkpoint(averaged)["plugins"] == read_checkpoint(model / CHECKPOINTS / LAST)["plugins"]


def test_compare_trains_a_plugin_system_beside_a_built_in_one(tmp_path, toy_dir):
    from nmt.compare.plan import plan
    from nmt.compare.runner import train_command

    config = plugin_config(tmp_path, toy_dir)
    systems = ["general: model.attention.type=general", "coverage: model.attention.type=coverage"]
    extra = STATEFUL["coverage"]
    made = plan(str(config), (), systems, (), "1", None, tmp_path, [extra])
    assert made.run_config(made.runs[1]).plugins == [str(tmp_path / "mine" / "location.py"), str(extra)]
    command = train_command(made, made.runs[1])
    assert command[command.index("--plugin") + 1] == str(extra)


def test_the_server_serves_a_plugin_model_as_nmt_translate_translates(plugin_run, toy_dir, tmp_path):
    from tests.serve.test_server import running_server

    model, plugin = plugin_run / "run", str(plugin_run / "mine" / "location.py")
    lines = (toy_dir / "test.human").read_text().splitlines()[:8]
    with running_server(model, tmp_path / "serve.log", "--plugin", plugin) as server:
        status, _, body = server.post({"texts": lines})
    assert status == 200, body
    expected = runner.invoke(app, ["translate", "-m", str(model), "-q"], input="\n".join(lines) + "\n")
    assert [t["text"] for t in body["translations"]] == expected.stdout.splitlines()
