"""Test set-up: keep every cache out of $HOME and never wait on the network."""

import os
import tempfile

os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="nmt-hf-"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="nmt-mpl-"))
# The cores, fixed: nmt would take fewer threads while other processes run (nmt.machine), and
# tests compare runs bit for bit, which holds only at one thread count (tests/test_machine.py
# tests the choice itself). Shared out between pytest-xdist's workers (`make test` runs two):
# two workers of two threads on two cores stall each other's OpenMP threads. The workers inherit
# the environment of the process that starts them, whose conftest counted one worker, so
# NMT_TESTS_THREADS says whose the count is, and only a user's OMP_NUM_THREADS stands.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if "OMP_NUM_THREADS" in os.environ and "NMT_TESTS_THREADS" not in os.environ:
    os.environ["NMT_TESTS_THREADS"] = "user"
if os.environ.get("NMT_TESTS_THREADS") != "user":
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // WORKERS))
    os.environ["NMT_TESTS_THREADS"] = "shared out"
# fp32 for `--precision auto`: tests compare outputs across engines and searches byte for byte,
# which a CPU whose bf16 units `auto` would take changes (tests/model/test_precision.py tests auto)
os.environ["NMT_PRECISION"] = "fp32"

import xml.etree.ElementTree as ET  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from nmt.config import Config, config_from_dict  # noqa: E402
from nmt.data.toy import write_toy_corpus  # noqa: E402
from nmt.rundir import read_metrics  # noqa: E402

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
needs_multi30k = pytest.mark.skipif(
    not (MULTI30K / "train.de").is_file(),
    reason=f"Multi30k not found at {MULTI30K} (only the project's own machines have ../shared)",
)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_image(path: Path | str, fmt: str | None = None) -> tuple[int, int] | None:
    """`path` is a whole image in the format its name asks for (or `fmt`: png, pdf, svg): a PNG's
    signature, IHDR chunk and IEND trailer, a PDF's header and %%EOF, an SVG that parses as XML
    with an <svg> root. Returns a PNG's (width, height), both checked to be > 0."""
    path = Path(path)
    assert path.is_file(), f"{path} was not written"
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    data = path.read_bytes()
    if fmt == "png":
        assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG: {data[:8]!r}"
        assert data[12:16] == b"IHDR", f"{path}: no IHDR chunk first"
        assert data.endswith(b"IEND\xaeB`\x82"), f"{path}: no IEND chunk at the end (cut short?)"
        size = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert size[0] > 0 and size[1] > 0, f"{path}: an empty image {size}"
        return size
    if fmt == "pdf":
        assert data.startswith(b"%PDF-"), f"{path} is not a PDF: {data[:8]!r}"
        assert data.rstrip().endswith(b"%%EOF"), f"{path}: no %%EOF at the end (cut short?)"
        return None
    if fmt == "svg":
        root = ET.fromstring(data)  # raises on anything that is not well-formed XML
        assert root.tag.rsplit("}", 1)[-1] == "svg", f"{path}: the XML root is <{root.tag}>, not <svg>"
        assert len(root), f"{path}: an empty <svg>"
        return None
    raise AssertionError(f"assert_image: unknown format {fmt!r}")


def assert_resumed_at(run: Path | str, before: list[dict], step: int, log_every: int) -> None:
    """After `nmt train --resume RUN`: the resumed session began at `step` (the step of the
    last.pt it resumed from), not at 0 nor anywhere else. `before` is RUN's metrics as the
    interrupted session left them (`read_metrics`). Every line up to `step` is still that
    session's own, unchanged (retrained steps would log other speeds and times), and the first
    line after them is new and at the first log step after `step`; train.log, which every
    session appends to, reports each validation up to `step` once."""
    after = read_metrics(run)
    kept = [m for m in before if m["step"] <= step]
    assert kept, f"the interrupted session logged nothing up to step {step}: nothing to tell a restart by"
    assert after[: len(kept)] == kept, f"the lines up to step {step} were rewritten: steps re-trained"
    new = after[len(kept) :]
    assert new, "the resumed session logged nothing"
    assert new[0] not in before, "the resumed session logged no line of its own"
    first = (step // log_every + 1) * log_every
    assert new[0]["step"] == first, f"the resumed session's first line is at step {new[0]['step']}"
    assert new[0]["time"] >= kept[-1]["time"], "the resumed session's clock started again"
    log = (Path(run) / "train.log").read_text()  # appended by every session, never rewritten
    for valid_step in [m["step"] for m in kept if "valid_loss" in m]:
        times = log.count(f" step {valid_step}: valid loss ")
        assert times == 1, f"step {valid_step} was validated {times} times: the resume re-trained it"


def assert_started_afresh(run: Path | str, before: list[dict], log_every: int) -> None:
    """After `nmt train --resume RUN` of a run that had no checkpoint yet: the session started at
    step 0. None of the metrics lines the killed session left (`before`) remain, and the first
    line is at the first log step."""
    after = read_metrics(run)
    assert before, "the killed session logged nothing: nothing to tell a fresh start by"
    assert not [m for m in after if m in before], "lines of the killed session were kept"
    assert after, "no metrics line: the restarted session logged nothing"
    assert after[0]["step"] == log_every, f"the first line is at step {after[0]['step']}"
    assert "no checkpoint yet: starting the run afresh" in (Path(run) / "train.log").read_text()


# `--set` values of a small, fast toy run (tests that train through the command line)
TINY = [
    "model.embedding=16",
    "model.encoder.hidden=16",
    "model.decoder.hidden=32",
    "tokenizer.vocab_size=120",
    "train.log_every=5",
    "train.valid_every=5",
    "train.max_steps=10",
    "decode.max_len=16",
]


def sets(items) -> list[str]:
    """`--set` options, one per `section.key=value` of `items`."""
    return [x for item in items for x in ("--set", item)]


def one_line_error(result, *fragments: str) -> str:
    """A command (a CliRunner result or a finished process) that failed with exit code 2 and one
    line on stderr holding every fragment: that line."""
    code = result.returncode if hasattr(result, "returncode") else result.exit_code
    assert code == 2, (result.stderr, getattr(result, "exception", None))
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def refuse_reading(monkeypatch, path: Path) -> None:
    """`path` cannot be read from now on (PermissionError), every other file as before: tests run
    as root, whom no file mode stops, so the refusal is simulated."""
    read_bytes = Path.read_bytes

    def refused(self: Path) -> bytes:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", refused)


def tiny_config(data_dir: Path | str = "data", **sections) -> Config:
    """A small, fast model on the toy task; `sections` override whole config sections."""
    raw = {
        "data": {"src_lang": "human", "tgt_lang": "iso", "dir": str(data_dir), "max_len": 60},
        "tokenizer": {"vocab_size": 120},
        "model": {
            "embedding": 16,
            "dropout": 0.0,
            "encoder": {"hidden": 16},
            "decoder": {"hidden": 32},
            "attention": {"type": "general"},
        },
        "train": {"max_steps": 20, "log_every": 5, "valid_every": 10, "device": "cpu", "lr": 0.01},
        "decode": {"max_len": 16, "batch_size": 50},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return config_from_dict(raw)


@pytest.fixture(scope="session", autouse=True)
def _work_in_a_temp_dir(tmp_path_factory):
    """Relative outputs (data/cache, runs/) land in a temp dir, never in the checkout, and so
    does the cache of measured backends (`nmt.train.backends`), never in the user's home."""
    os.chdir(tmp_path_factory.mktemp("cwd"))
    os.environ["NMT_CACHE_DIR"] = str(tmp_path_factory.mktemp("nmt-cache"))


@pytest.fixture(autouse=True)
def _weight_gradients_put_back():
    """A CPU training installs its measured backend choices for the process
    (`nmt.train.backends`): each test starts from, and leaves, the default, also after a
    module's fixture trained a model."""
    from nmt.model import linear

    linear.choose_weight_gradient = linear.choose_output_product = linear._onednn_always
    yield
    linear.choose_weight_gradient = linear.choose_output_product = linear._onednn_always


@pytest.fixture(scope="session")
def toy_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("toy")
    write_toy_corpus(out, seed=3, sizes={"train": 1500, "valid": 60, "test": 60})
    return out


@pytest.fixture(scope="session")
def toy_model(toy_dir, tmp_path_factory):
    """A small toy model trained briefly through the Trainer (shared by the forced decoding,
    alignment and explorer tests), with the validation loss the trainer reports for its weights."""
    from types import SimpleNamespace

    from nmt.rundir import prepare_run_dir
    from nmt.train.trainer import Trainer

    cfg = tiny_config(
        toy_dir, train={"max_steps": 80, "valid_every": 80, "log_every": 40, "device": "cpu", "lr": 0.01}
    )
    run = tmp_path_factory.mktemp("toy-model") / "run"
    prepare_run_dir(run, cfg)
    trainer = Trainer(cfg, run, quiet=True)
    trainer.train()
    scores, _ = trainer.evaluate_model()
    return SimpleNamespace(run=run, last=run / "checkpoints" / "last.pt", valid_loss=scores["valid_loss"])


@pytest.fixture(scope="session")
def translating_model(toy_dir, tmp_path_factory):
    """A model that translates: two-layer encoder and decoder (the case the ONNX exporter needs
    care with), trained 200 steps, after which it writes a different date for each of the 60
    test sentences (about a third of them right). `toy_model` and the shipping tests' `toy_run`
    are too short for that: they write one string (or nothing) for every input, so two engines
    compared on them agree whatever their bugs."""
    from types import SimpleNamespace

    from nmt.rundir import prepare_run_dir
    from nmt.train.trainer import Trainer

    cfg = tiny_config(
        toy_dir,
        model={
            "embedding": 32,
            "encoder": {"hidden": 64, "layers": 2},
            "decoder": {"hidden": 128, "layers": 2},
        },
        train={"max_steps": 200, "valid_every": 200, "log_every": 50, "device": "cpu", "lr": 0.01},
    )
    run = tmp_path_factory.mktemp("translating-model") / "run"
    prepare_run_dir(run, cfg)
    Trainer(cfg, run, quiet=True).train()
    return SimpleNamespace(run=run, last=run / "checkpoints" / "last.pt")
