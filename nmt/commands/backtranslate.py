"""`nmt backtranslate` as a function: monolingual target-side text translated by a reverse model
into synthetic sources, tagged (tagged back-translation, Caswell et al. 2019), written as a
corpus folder `nmt train` reads, with a manifest of how it was made.

With `parallel`, the folder also holds that corpus's splits, its training split followed by the
synthetic pairs, so `--set data.dir=OUT` trains on both at once.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

from nmt.commands.translate import DecodeOptions, load_engine
from nmt.config import SPECIAL_PIECES
from nmt.errors import NMTError
from nmt.fileio import (
    atomic_write_text,
    check_outputs,
    check_same_counts,
    count_lines,
    file_entry,
    iter_lines,
    line_chunks,
    staged_directory,
)
from nmt.text.translation import TextTranslator
from nmt.version import VERSION

CHECK_CHUNK = 10_000  # monolingual lines tokenised at a time while they are checked
MANIFEST = "backtranslation.json"
SPLIT_NAME = re.compile(r"[\w-][\w.-]*")  # a file name's stem in the output folder, never a path


@dataclasses.dataclass(frozen=True)
class Languages:
    """The reverse model translates `mono` (the corpus's target side) into `synthetic` (its source)."""

    mono: str
    synthetic: str


def run_backtranslate(
    model: Path,
    mono: Path,
    out: Path,
    decode: DecodeOptions,
    tag: str = "<BT>",
    parallel: Path | None = None,
    split: str = "train",
    device: str = "auto",
    quiet: bool = False,
    precision: str | None = None,
) -> str:
    """The whole `nmt backtranslate`; returns the line it ends with. Nothing is written unless
    every check passes and every line is translated (`out` appears whole or not at all)."""
    check_names(split, tag)
    if out.exists():
        raise NMTError(f"{out}: already exists; back-translation writes a new folder (choose another -o)")
    check_outputs({"-o": out}, {"--mono": mono, "-m": model, "--parallel": parallel})
    translator = load_engine([model], decode.overrides(), device, precision, "torch")
    info = translator.info  # type: ignore[attr-defined]
    if not quiet:
        print(translator.precision.why, file=sys.stderr)  # type: ignore[attr-defined]
    langs = Languages(mono=info.src_lang, synthetic=info.tgt_lang)
    lines = check_mono(mono, translator, tag)
    copies = parallel_files(parallel, split, langs, tag) if parallel else {}
    with staged_directory(out) as staging:
        for name, source in copies.items():
            shutil.copyfile(source, staging / name)
        pairs = write_synthetic(translator, mono, lines, staging, split, langs, tag, quiet)
        manifest = {
            "nmt": VERSION,
            "model": str(model),
            "mono": {"path": str(mono), "lines": lines, **file_entry(mono)},
            "languages": {"source": langs.synthetic, "target": langs.mono},
            "tag": tag,
            "decode": dataclasses.asdict(translator.cfg),
            "precision": translator.precision.name,  # type: ignore[attr-defined]
            "parallel": str(parallel) if parallel else None,
            "pairs": {
                "parallel": count_lines(copies[f"{split}.{langs.mono}"]) if copies else 0,
                "synthetic": pairs,
            },
        }
        atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    symbols = f" --set 'tokenizer.user_symbols=[\"{tag}\"]'" if tag else ""
    return (
        f"{pairs} synthetic {langs.synthetic}-{langs.mono} pairs in {out}/{split}.*"
        + (f" after {manifest['pairs']['parallel']} parallel ones" if copies else "")
        + f"; train on it with: nmt train -c CONFIG --set data.dir={out}{symbols}"
    )


def check_names(split: str, tag: str) -> None:
    """The split names files inside the output folder (`../x` or '' would write beside it, or
    hidden files); the tag stays one piece of its own, never a special one (`</s>` would end
    every synthetic source before it began)."""
    if not SPLIT_NAME.fullmatch(split):
        raise NMTError(
            f"--split: {split!r} is not a plain name; use letters, digits, '_', '-' and '.' "
            "(not first), e.g. train"
        )
    if tag and (tag != tag.strip() or len(tag.split()) != 1):
        raise NMTError(
            f"--tag: {tag!r} must be one word without spaces (or '' for untagged back-translation)"
        )
    if tag in SPECIAL_PIECES:
        raise NMTError(f"--tag: {tag!r} is a special piece of every tokenizer; choose another tag, e.g. <BT>")


def check_mono(mono: Path, translator: TextTranslator, tag: str) -> int:
    """The monolingual file's line count, once every line is checked: not empty, within the
    reverse model's source limit (a longer one would be translated truncated, a synthetic source
    for part of its target), and without the tag."""
    if not mono.is_file():
        raise NMTError(f"{mono}: file not found")
    count = 0
    with open(mono, "rb") as f:
        for first, chunk in line_chunks(f, str(mono), CHECK_CHUNK):
            for number, line in enumerate(chunk, first):
                if not line.strip():
                    raise NMTError(
                        f"{mono}: line {number} is empty; give one sentence a line (drop empty lines)"
                    )
                if tag and tag in line.split():
                    raise NMTError(f"{mono}: line {number} holds the tag {tag!r}; choose another --tag")
            _, cut = translator.encode_sources(chunk)
            if cut:
                raise NMTError(
                    f"{mono}: line {first + min(cut)} is longer than the reverse model's limit of "
                    f"{translator.src_limit} pieces; split or drop such lines"
                )
            count += len(chunk)
    if not count:
        raise NMTError(f"{mono}: no lines to back-translate")
    return count


def parallel_files(parallel: Path, split: str, langs: Languages, tag: str) -> dict[str, Path]:
    """The parallel corpus's split files to copy beside the synthetic pairs (both sides of every
    split), checked: the training split is there and no source line holds the tag."""
    sides = (langs.synthetic, langs.mono)
    names = sorted({p.stem for p in parallel.glob("*.*") if p.suffix[1:] in sides})
    files = {f"{name}.{lang}": parallel / f"{name}.{lang}" for name in names for lang in sides}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing or f"{split}.{langs.synthetic}" not in files:
        absent = missing[0] if missing else parallel / f"{split}.{langs.synthetic}"
        raise NMTError(f"--parallel: {absent} not found; the folder needs both sides of each split")
    for name in names:  # misaligned sides would make a misaligned corpus
        check_same_counts({files[f"{name}.{lang}"]: count_lines(files[f"{name}.{lang}"]) for lang in sides})
    if tag:
        for number, line in enumerate(iter_lines(files[f"{split}.{langs.synthetic}"]), 1):
            if tag in line.split():
                where = files[f"{split}.{langs.synthetic}"]
                raise NMTError(f"{where}: line {number} holds the tag {tag!r}; choose another --tag")
    return files


def write_synthetic(
    translator: TextTranslator,
    mono: Path,
    lines: int,
    folder: Path,
    split: str,
    langs: Languages,
    tag: str,
    quiet: bool,
) -> int:
    """The synthetic pairs of `mono`'s `lines` lines appended to `folder`'s `split` files (made
    if absent); their count."""
    from tqdm.auto import tqdm

    prefix = f"{tag} " if tag else ""
    pairs = 0
    with (
        open(folder / f"{split}.{langs.synthetic}", "a", encoding="utf-8") as sources,
        open(folder / f"{split}.{langs.mono}", "a", encoding="utf-8") as targets,
        tqdm(total=lines, unit="sent", disable=quiet or None, mininterval=0.5) as bar,
    ):
        _ensure_newline(folder / f"{split}.{langs.synthetic}", sources)
        _ensure_newline(folder / f"{split}.{langs.mono}", targets)
        results = translator.iter_translate(iter_lines(mono), attention=False, progress=bar.update)
        for line, t in zip(iter_lines(mono), results, strict=True):
            sources.write(prefix + t.text + "\n")
            targets.write(line + "\n")
            pairs += 1
    return pairs


def _ensure_newline(path: Path, f) -> None:
    """A copied file whose last line has no newline gets one, so the appended pairs start afresh."""
    size = path.stat().st_size
    if size:
        with open(path, "rb") as read:
            read.seek(size - 1)
            if read.read(1) != b"\n":
                f.write("\n")
