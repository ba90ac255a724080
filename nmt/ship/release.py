"""`nmt release`: a training checkpoint -> a directory to ship: `model.safetensors` (weights only,
fp32 or fp16), `config.yaml` (what translating needs: model, decoding, data limits), the
SentencePiece model(s), optionally a lexical shortlist for it (`shortlist.npz`, `nmt shortlist`),
`manifest.json` (the sha256 of the weights, tokenizers and shortlist, checked whenever the release
loads), a model card (`README.md`) and, with a test set, the BLEU check that lets `auto` decode it
in int8 (`model.safetensors.bleu-check.json`). Every `-m` option loads it
(`nmt.checkpoint.load_model`) without any pickle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from nmt.checkpoint import (
    PLUGINS,
    RELEASE_CONFIG,
    RELEASE_MANIFEST,
    RELEASE_WEIGHTS,
    LoadedModel,
    load_checkpoint,
    resolve_checkpoint,
)
from nmt.config import Config
from nmt.errors import NMTError
from nmt.fileio import atomic_copy, atomic_write, atomic_write_text, file_entry, read_lines, staged_directory
from nmt.model.precision import BleuCheck
from nmt.rundir import CHECKPOINTS, METRICS, read_metrics
from nmt.ship.card import TestScores, model_card
from nmt.text.shortlist import Shortlist

CARD = "README.md"
SHORTLIST = "shortlist.npz"  # `nmt translate -m RELEASE --shortlist RELEASE/shortlist.npz`


@dataclass
class ReleaseSummary:
    directory: Path
    checkpoint: Path
    checkpoint_bytes: int
    release_bytes: int
    weights_bytes: int
    scores: TestScores | None
    check: BleuCheck | None = None  # the release's BLEU in each CPU precision, kept beside it

    def lines(self) -> list[str]:
        ratio = self.checkpoint_bytes / self.release_bytes
        out = [
            f"wrote {self.directory}: {self.release_bytes / 1e6:.2f} MB ({RELEASE_WEIGHTS} "
            f"{self.weights_bytes / 1e6:.2f} MB) from {self.checkpoint} {self.checkpoint_bytes / 1e6:.2f} MB "
            f"({ratio:.1f}x smaller)"
        ]
        if self.scores:
            out.append(f"test BLEU {self.scores.bleu:.2f} chrF {self.scores.chrf:.2f} ({self.scores.source})")
        if self.check:
            verdict = "may take int8 where it runs faster" if self.check.allows_int8 else "stays off int8"
            out.append(f"BLEU check: {self.check}; auto {verdict}")
        return out


def release_config(cfg: Config, plugin_files: list[str]) -> dict:
    """The parts of a run's config that translating needs: no paths (but the release's own
    plugin files), no training settings."""
    full = cfg.to_dict()
    data_keys = ("src_lang", "tgt_lang", "max_len", "normalize")
    return {
        "data": {k: full["data"][k] for k in data_keys},
        "tokenizer": {k: full["tokenizer"][k] for k in ("type", "vocab_size", "joint")},
        "model": full["model"],
        "decode": full["decode"],
        **({"plugins": plugin_files} if plugin_files else {}),
    }


def write_plugins(directory: Path, records: list[dict[str, str]]) -> list[str]:
    """The model's plugin sources as files of the release's `plugins/` folder; their names."""
    names = []
    for record in records:
        name = f"{PLUGINS}/{record['name']}"
        atomic_write(directory / name, lambda f, source=record["source"]: f.write(source.encode("utf-8")))
        names.append(name)
    return names


def release_weights(loaded: LoadedModel, fp16: bool) -> bytes:
    """The model's weights as safetensors bytes; a tied tensor is stored once (the loader re-ties)."""
    from safetensors.torch import save

    tensors, seen = {}, set()
    for name, value in loaded.model.state_dict().items():
        if value.data_ptr() in seen:
            continue
        seen.add(value.data_ptr())
        value = value.detach().cpu().contiguous()
        tensors[name] = value.half() if fp16 and value.is_floating_point() else value
    return save(tensors, metadata={"format": "nmt-release", "dtype": "fp16" if fp16 else "fp32"})


def run_dir_of(source: Path, checkpoint: Path) -> Path | None:
    """The run directory a checkpoint belongs to, if it is in one (for its metrics)."""
    for candidate in (source, checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS else None):
        if candidate is not None and candidate.is_dir() and (candidate / METRICS).is_file():
            return candidate
    return None


def test_files(cfg: Config, test_src: Path | None, test_ref: Path | None) -> tuple[Path, Path] | None:
    """The test set to score the card with: the given files, or the run's own test split when
    its text files are here."""
    if (test_src is None) != (test_ref is None):
        raise NMTError("release: give both --test-src and --test-ref, or neither")
    if test_src is not None:
        return test_src, test_ref
    return cfg.data.text_files(cfg.data.test)


def score_release(directory: Path, files: tuple[Path, Path], device: str) -> TestScores:
    """Translate the test set with the release as written (so fp16 is what gets scored)."""
    from nmt.decode.translator import load_translator
    from nmt.evaluate.scoring import EvalOptions, evaluate

    src_lines, ref_lines = read_lines(files[0]), read_lines(files[1])
    translator = load_translator([directory], {}, device)
    hyps = [t.text for t in translator.translate(src_lines, attention=False)]
    report = evaluate({"release": hyps}, [ref_lines], EvalOptions(bootstrap=0))
    scores, signatures = report.systems[0].scores, report.signatures
    chrf = next(k for k in scores if k.startswith("chrF"))
    return TestScores(
        str(files[0]),
        len(src_lines),
        translator.cfg.beam,
        scores["BLEU"],
        scores[chrf],
        signatures["BLEU"],
        signatures[chrf],
    )


def check_release(directory: Path, files: tuple[Path, Path], beam: int) -> BleuCheck:
    """The release's BLEU check on the test set (`nmt.decode.bleucheck`), beside its weights and
    outside the manifest (`nmt precision` may write it again), so `auto` may take int8 for it
    wherever it is served on a CPU whose int8 quantises as this one's (`nmt.machine.int8_scheme`)."""
    from nmt.decode.bleucheck import check_model

    src_lines, refs = read_lines(files[0]), read_lines(files[1])
    return check_model(directory, directory / RELEASE_WEIGHTS, files[0], src_lines, refs, {}, beam)[0]


def write_manifest(directory: Path, names: list[str]) -> None:
    """manifest.json: the size and sha256 of the files a translator reads as bytes, written
    after them. config.yaml and the card are left out: text a user may edit on purpose, and
    checked when read (the config against the weights' shapes)."""
    files = {name: file_entry(directory / name) for name in names}
    manifest = {"format": "nmt-release", "files": files}
    atomic_write_text(directory / RELEASE_MANIFEST, json.dumps(manifest, indent=1) + "\n")


def directory_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def release(
    source: Path,
    output: Path,
    fp16: bool = False,
    test_src: Path | None = None,
    test_ref: Path | None = None,
    device: str = "cpu",
    shortlist: Path | None = None,
) -> ReleaseSummary:
    """Write the release of `source` (a checkpoint or run directory) into the new directory `output`.

    The directory is assembled under a temporary name beside `output` and renamed at the end, so
    a failure leaves nothing half-written, and an existing non-empty `output` is never touched.
    `shortlist`: a lexical shortlist built for this model, stored beside it.
    """
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise NMTError(f"{output}: already exists and is not empty; choose a new --output directory")
    checkpoint = resolve_checkpoint(source)
    loaded = load_checkpoint(checkpoint)
    run_dir = run_dir_of(Path(source), checkpoint)
    if shortlist:
        Shortlist.load(shortlist, loaded.tokenizers)  # refused unless built for this model
    with staged_directory(output) as tmp:
        weights = release_weights(loaded, fp16)
        atomic_write(tmp / RELEASE_WEIGHTS, lambda f: f.write(weights))
        plugin_files = write_plugins(tmp, loaded.state.get("plugins") or [])
        config = yaml.safe_dump(
            release_config(loaded.config, plugin_files), sort_keys=False, allow_unicode=True
        )
        atomic_write_text(tmp / RELEASE_CONFIG, config)
        if shortlist:
            atomic_copy(shortlist, tmp / SHORTLIST)
        stored = [SHORTLIST] if shortlist else []
        write_manifest(tmp, [RELEASE_WEIGHTS, *loaded.tokenizers.save(tmp), *stored, *plugin_files])
        files = test_files(loaded.config, test_src, test_ref)
        scores = score_release(tmp, files, device) if files else None  # loads it, manifest checked
        check = check_release(tmp, files, loaded.config.decode.beam) if files else None
        metrics = read_metrics(run_dir) if run_dir else []
        card = model_card(loaded, metrics, scores, fp16, len(weights), output.name)
        atomic_write_text(tmp / CARD, card)
    return ReleaseSummary(
        output, checkpoint, checkpoint.stat().st_size, directory_bytes(output), len(weights), scores, check
    )
