"""scripts/gpu/side_by_side.sh, without a GPU: its larger model is the same size in both toolkits,
and a wrong setting is refused in one line before anything is touched. (Its DEVICE=cpu dry run
trains both toolkits, minutes too long for the suite: docs/performance.md says how to run it.)"""

import os
import subprocess
from pathlib import Path

import yaml

from nmt.config import load_config

GPU = Path(__file__).resolve().parents[1] / "scripts" / "gpu"


def test_the_larger_model_is_the_same_size_in_both_toolkits():
    nmt = load_config(GPU / "nmt-large.yaml")
    onmt = yaml.safe_load((GPU / "onmt-large.yaml").read_text())
    model = nmt.model
    assert (model.embedding, model.encoder.layers, model.decoder.layers) == (512, 2, 2)
    assert (model.encoder.hidden, model.decoder.hidden, nmt.train.batch_size) == (512, 1024, 128)
    assert onmt["src_word_vec_size"] == onmt["tgt_word_vec_size"] == model.embedding
    assert onmt["enc_layers"] == model.encoder.layers and onmt["dec_layers"] == model.decoder.layers
    # OpenNMT-py's brnn splits hidden_size between the two directions; its decoder is as wide.
    assert onmt["hidden_size"] == 2 * model.encoder.hidden == model.decoder.hidden
    assert onmt["batch_size"] == nmt.train.batch_size
    assert model.attention.type == "general" and model.decoder.input_feeding  # the bench model's kind


def refusal(tmp_path: Path, **env) -> subprocess.CompletedProcess:
    """The script run with `env` over a work folder holding a file of the user's."""
    work = tmp_path / "work"
    work.mkdir(parents=True)
    (work / "kept").write_text("mine")
    settings = {**os.environ, "WORK": str(work), "OUT": str(tmp_path / "out"), **env}
    script = GPU / "side_by_side.sh"
    return subprocess.run(["bash", str(script)], env=settings, capture_output=True, text=True, check=False)


def test_a_wrong_setting_is_refused_before_anything_is_touched(tmp_path):
    """A wrong model, a missing kit, a phase it does not have, or a work folder of someone
    else's (the script empties it)."""
    kit = tmp_path / "kit"
    (kit / "peer").mkdir(parents=True)
    cases = {
        "MODEL=bench or MODEL=large": {"MODEL": "huge"},
        "copy ../shared/gpu there": {"KIT": "/no/kit"},
        "decode, bulk, precision or tests": {"KIT": str(kit), "PHASES": "budget bulky"},
        "holds files this script did not make": {"KIT": str(kit)},
    }
    for i, (says, env) in enumerate(cases.items()):
        refused = refusal(tmp_path / str(i), **env)
        assert refused.returncode == 2 and says in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert (tmp_path / str(i) / "work" / "kept").read_text() == "mine"
        assert not (tmp_path / str(i) / "out").exists()


def test_decode_share_splits_a_fixed_row_search_into_the_device_and_the_host(translating_model, toy_dir):
    """scripts/gpu/decode_share.py on a CPU: one line, every part a number of seconds."""
    import re
    import sys

    script = GPU / "decode_share.py"
    lines = toy_dir / "test.human"
    args = [sys.executable, str(script), str(translating_model.last), str(lines), "--device", "cpu"]
    done = subprocess.run([*args, "beam=3", "batch_size=8"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith("decode_share beam 3 batch 8, 60 lines: loop "), line
    names = r"loop|device|waiting|following the records|refilling|launching|the rest"
    parts = re.findall(rf"({names}) ([\d.]+) s", line)
    assert [name for name, _ in parts] == [
        "loop",
        "device",
        "waiting",
        "following the records",
        "refilling",
        "launching",
        "the rest",
    ]
    seconds = {name: float(value) for name, value in parts}
    assert 0 < seconds["device"] <= seconds["loop"]
