"""`nmt distill` as a function: sequence-level knowledge distillation (Kim and Rush 2016). A
teacher (or an ensemble of teachers) translates the student's training sources with beam
search; its outputs, cleaned of degenerate ones, become the corpus a student trains on.

    DIR/data.parts/  the teacher's outputs, a chunk of lines a file, while it translates
    DIR/data/        the distilled corpus: train.{src,tgt} (kept pairs), valid and test copied,
                     distill.json (teachers, settings, what was dropped and why), dropped.tsv
                     (each dropped line: its number, why, its source and the teacher's output)
    DIR/student.yaml the student's config, reading DIR/data (and the references, if weighted)
    DIR/student/     the student's run

Each stage resumes: a chunk is written whole or not at all, so a killed distillation goes on
from its last chunk, and the student's run from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from nmt.commands.translate import DecodeOptions, load_engine
from nmt.config import Config, load_config
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text, count_lines, file_entry, iter_lines, staged_directory
from nmt.jsonvalues import read_json
from nmt.text.translation import TextTranslator
from nmt.version import VERSION
from nmt.words import text_words

CORPUS, PARTS, CONFIG, STUDENT = "data", "data.parts", "student.yaml", "student"
MANIFEST, SETTINGS, DROPPED = "distill.json", "settings.json", "dropped.tsv"
STAGES = ("all", "data", "train")


@dataclasses.dataclass(frozen=True)
class Filters:
    """Which teacher outputs are degenerate (dropped from the corpus, counted by reason)."""

    max_ratio: float = 3.0  # words of the longer side over the shorter one's, at most
    max_repeats: int = 2  # times a word trigram may occur in one output

    def reason(self, source: str, output: str) -> str | None:
        words, source_words = text_words(output), text_words(source)
        if not words:
            return "empty output"
        if max(len(words), len(source_words)) > self.max_ratio * max(1, min(len(words), len(source_words))):
            return f"length ratio above {self.max_ratio:g}"
        trigrams = Counter(zip(words, words[1:], words[2:], strict=False))
        if trigrams and max(trigrams.values()) > self.max_repeats:
            return f"a word trigram more than {self.max_repeats} times"
        return None


@dataclasses.dataclass(frozen=True)
class Plan:
    """What `nmt distill` was asked: teachers, student config, output folder and settings."""

    teachers: list[Path]
    config: Path | str
    overrides: list[str]
    out: Path
    decode: DecodeOptions
    filters: Filters = Filters()
    references: float = 0.0  # weight of the reference pairs beside the distilled ones; 0: none
    chunk: int = 5000  # lines translated between two saves
    device: str = "auto"
    precision: str | None = None
    plugins: list[Path] = dataclasses.field(default_factory=list)


def run_distill(
    plan: Plan, stage: str = "all", say: Callable[[str], None] | None = None, quiet: bool = False
) -> str:
    """The stages asked (`all`, `data` or `train`); returns the line it ends with. `StageStoppedError`
    when a signal or the student's training ended it early."""
    say = say or (lambda line: print(line, file=sys.stderr))
    if stage not in STAGES:
        raise NMTError(f"--stage: {stage!r} is not one of {', '.join(STAGES)}")
    cfg = load_config(plan.config, plan.overrides, plan.plugins)
    if cfg.data.corpora:
        raise NMTError(
            "nmt distill: the student's config trains on data.corpora; distillation translates one "
            "training split (data.train): give a config without corpora"
        )
    if plan.references and cfg.data.format != "text":
        raise NMTError("--references: mixing in the references needs data.format text (plain files)")
    ended = ""
    if stage in ("all", "data"):
        ended = distill_corpus(plan, cfg, say, quiet)
    if stage in ("all", "train"):
        ended = train_student(plan, cfg, say, quiet)
    return ended


def settings_of(plan: Plan, translator: TextTranslator) -> dict[str, Any]:
    """What the teacher's outputs depend on: a resumed distillation must have the same."""
    from nmt.checkpoint import weights_file

    return {
        "teachers": [{"path": str(t), **file_entry(weights_file(t))} for t in plan.teachers],
        "decode": dataclasses.asdict(translator.cfg),
        "precision": translator.precision.name,  # type: ignore[attr-defined]
        "chunk": plan.chunk,
    }


def distill_corpus(plan: Plan, cfg: Config, say: Callable[[str], None], quiet: bool = False) -> str:
    """DIR/data from the teacher's translations, resuming from DIR/data.parts; a corpus already
    distilled by the same teachers is kept as it is."""
    corpus, parts = plan.out / CORPUS, plan.out / PARTS
    if (corpus / MANIFEST).is_file():
        made = read_json(corpus / MANIFEST)
        teachers = [t["path"] for t in made["settings"]["teachers"]]
        if teachers != [str(t) for t in plan.teachers]:
            raise NMTError(
                f"{corpus}: already distilled by {', '.join(teachers)}; "
                "choose another --output for other teachers"
            )
        say(f"distilled corpus: {corpus} (already made: {made['pairs']['kept']} pairs)")
        return f"distilled corpus in {corpus}"
    if corpus.exists():
        raise NMTError(f"{corpus}: exists and is not a distilled corpus (no {MANIFEST}); move it away")
    overrides = DecodeOptions(
        **{**dataclasses.asdict(plan.decode), "beam": plan.decode.beam or 5}
    ).overrides()
    translator = load_engine(plan.teachers, overrides, plan.device, plan.precision, "torch")
    check_languages(plan.teachers, translator, cfg)
    settings = settings_of(plan, translator)
    parts.mkdir(parents=True, exist_ok=True)
    if (parts / SETTINGS).is_file() and read_json(parts / SETTINGS) != settings:
        raise NMTError(
            f"{parts}: holds outputs of other teachers or settings ({parts / SETTINGS}); "
            "remove the folder, or distill with the settings it was started with"
        )
    atomic_write_text(parts / SETTINGS, json.dumps(settings, indent=2) + "\n")
    start = time.perf_counter()
    translated = translate_chunks(plan, cfg, translator, parts, say, quiet)
    seconds = time.perf_counter() - start
    kept, dropped = write_corpus(plan, cfg, parts, settings, translated, seconds)
    shutil.rmtree(parts, ignore_errors=True)
    shown = ", ".join(f"{n} {why}" for why, n in sorted(dropped.items())) or "none"
    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    say(
        f"distilled corpus: {kept} of {translated} pairs in {corpus}/train.{src} and train.{tgt} "
        f"(dropped: {shown}; each in {corpus / DROPPED}); validation and test copied beside them; "
        f"{corpus / MANIFEST} says how; the teacher translated for {seconds:.0f} s"
    )
    return f"distilled corpus in {corpus}"


def check_languages(teachers: list[Path], translator: TextTranslator, cfg: Config) -> None:
    info = translator.info  # type: ignore[attr-defined]
    if (info.src_lang, info.tgt_lang) != (cfg.data.src_lang, cfg.data.tgt_lang):
        raise NMTError(
            f"--teacher {teachers[0]}: translates {info.src_lang}->{info.tgt_lang}, and the student's "
            f"config {cfg.data.src_lang}->{cfg.data.tgt_lang}; give a teacher of the student's languages"
        )


def translate_chunks(
    plan: Plan, cfg: Config, translator: TextTranslator, parts: Path, say: Callable[[str], None], quiet: bool
) -> int:
    """The teacher's outputs of every training source, a chunk a file (`NNNNNN.txt`, written
    whole); chunks already there are kept. Returns the lines translated."""
    from tqdm.auto import tqdm

    from nmt.data.sources import train_pairs

    source = train_pairs(cfg.data)
    total = source.scan().pairs
    saved = {path.name: count_lines(path) for path in parts.glob("*.txt")}
    done = sum(saved.values())
    if done:
        say(f"resuming: {done} of {total} training sources already translated in {parts}")
    else:
        say(f"the teacher's translations: {parts}, a file per {plan.chunk} lines until the corpus is made")
    bar = tqdm(total=total, initial=done, unit="sent", disable=True if quiet else None, mininterval=0.5)
    with bar:
        for index, chunk in enumerate(source.chunks(plan.chunk)):
            path = parts / f"{index:06d}.txt"
            if saved.get(path.name) == len(chunk):
                continue
            try:
                outputs = translator.iter_translate(chunk.sources, attention=False, progress=bar.update)
                text = "".join(t.text + "\n" for t in outputs)
            except KeyboardInterrupt:
                done = chunk.first - 1
                raise StageStoppedError(
                    f"interrupted: {done} of {total} training sources translated and kept in {parts}; "
                    "run the same command again to go on from there",
                    130,
                ) from None
            atomic_write_text(path, text)
    return total


def write_corpus(
    plan: Plan, cfg: Config, parts: Path, settings: dict, translated: int, seconds: float
) -> tuple[int, Counter]:
    """DIR/data: the kept pairs, the held-out splits as text, the manifest; whole or not at all."""
    from nmt.data.sources import load_split, train_pairs

    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    dropped: Counter = Counter()
    kept = 0
    outputs = (line for path in sorted(parts.glob("*.txt")) for line in iter_lines(path))
    with staged_directory(plan.out / CORPUS) as staging:
        with (
            open(staging / f"train.{src}", "w", encoding="utf-8") as sources,
            open(staging / f"train.{tgt}", "w", encoding="utf-8") as targets,
            open(staging / DROPPED, "w", encoding="utf-8") as shown,
        ):
            shown.write("line\treason\tsource\toutput\n")
            for chunk in train_pairs(cfg.data).chunks(plan.chunk):
                for number, (line, output) in enumerate(
                    zip(chunk.sources, outputs, strict=False), chunk.first
                ):
                    source = " ".join(line.split())
                    why = plan.filters.reason(source, output) if source else "empty source"
                    if why:
                        dropped[why] += 1
                        shown.write(f"{number}\t{why}\t{source}\t{output}\n")
                        continue
                    sources.write(source + "\n")
                    targets.write(output + "\n")
                    kept += 1
        for split in ("valid", "test"):
            pairs = load_split(cfg.data, split)
            for side, lang in enumerate((src, tgt)):
                atomic_write_text(staging / f"{split}.{lang}", "".join(p[side] + "\n" for p in pairs))
        manifest = {
            "nmt": VERSION,
            "settings": settings,
            "student_config": str(plan.config),
            "overrides": plan.overrides,
            "filters": dataclasses.asdict(plan.filters),
            "pairs": {"translated": translated, "kept": kept, "dropped": dict(dropped)},
            "teacher_seconds": round(seconds, 1),
        }
        atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return kept, dropped


def student_config(plan: Plan, cfg: Config) -> dict[str, Any]:
    """The student's config: the one given, reading the distilled corpus (and the references
    beside it with weight `references`)."""
    raw = cfg.to_dict()
    corpus = str((plan.out / CORPUS).resolve())
    data = raw["data"]
    references = {"train": data["train"], "dir": str(Path(data["dir"]).resolve()), "weight": plan.references}
    data.update(
        format="text", dir=corpus, train="train", valid="valid", test="test", hf_path="", hf_name=None
    )
    data["hf_data_files"] = None
    if plan.references:
        data["corpora"] = [{"train": "train", "dir": corpus, "weight": 1.0}, references]
    return raw


def train_student(plan: Plan, cfg: Config, say: Callable[[str], None], quiet: bool = False) -> str:
    """The student's run in DIR/student under DIR/student.yaml (resumed when it exists), in a
    process of its own: its clock, threads and memory are a training's alone, not shared with
    the teacher's, and a Ctrl-C reaches it and is answered as `nmt train` answers one."""
    if not (plan.out / CORPUS / MANIFEST).is_file():
        raise NMTError(
            f"{plan.out / CORPUS}: no distilled corpus yet; run nmt distill with --stage data first"
        )
    config, run = plan.out / CONFIG, plan.out / STUDENT
    resumed = (run / "config.yaml").is_file()
    if not resumed:
        atomic_write_text(
            config, yaml.safe_dump(student_config(plan, cfg), sort_keys=False, allow_unicode=True)
        )
    say(f"student config: {config}; student run: {run}")
    where = ["--resume", str(run)] if resumed else ["--config", str(config), "--output", str(run)]
    plugins = [x for p in plan.plugins for x in ("--plugin", str(p))]
    command = [sys.executable, "-m", "nmt", "train", *where, *plugins, *(["--quiet"] if quiet else [])]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    with _ignoring_interrupts():  # the child has the terminal's Ctrl-C too: it saves, then exits
        out, _ = child.communicate()
    if child.returncode:
        raise StageStoppedError(
            f"the student's training stopped (exit {child.returncode}); run the same command again to resume",
            child.returncode,
        )
    return out.strip()


class StageStoppedError(Exception):
    """A stage that ended early: its line, and the exit code `nmt distill` ends with."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


@contextlib.contextmanager
def _ignoring_interrupts() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
