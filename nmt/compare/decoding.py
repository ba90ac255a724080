"""Each run's translations of every evaluation set, and its forced attention on one reference,
cached in the comparison's folder (`hyps/VARIANT/seedS/SET.CHECKPOINT.beamB.txt.gz`): gzipped
text (`zcat` reads it), small enough to keep with the report, redone only for another checkpoint
file (path, time, size) or other lines.

Length is what a comparison tests beyond the split, so no caps of the model's own stand in the
way: no source is cut to the training length limit and the output cap is only the config's
`max_len_ratio * source length + max_len_add`, not its absolute `max_len`.
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nmt.compare.plan import Run
from nmt.compare.sets import EvalSet
from nmt.errors import NMTError
from nmt.fileio import atomic_write, atomic_write_text, decode_lines, file_identity
from nmt.jsonvalues import JSONError, read_json
from nmt.rundir import CHECKPOINTS

if TYPE_CHECKING:
    from nmt.decode.translator import Translator

UNCAPPED = 10**6


@dataclass(frozen=True)
class DecodeSettings:
    checkpoint: str = "best"  # best, averaged or last: which of each run's checkpoints decodes
    beam: int | None = None  # None: the config's decode.beam
    device: str = "auto"
    heatmap: int | None = None  # 1-based line of the first set whose reference is forced


def forced_view(translator: Translator, source: str, reference: str) -> dict:
    """The attention on `reference` while the model is forced to produce it, merged into words:
    every system's rows are the same reference words, so their maps can be set side by side."""
    from nmt.words import merge_attention

    (forced,) = translator.score([source], [reference])
    matrix, src_words, tgt_words = merge_attention(forced.attention, forced.src_pieces, forced.tgt_pieces)
    return {
        "source_words": src_words,
        "target_words": tgt_words,
        "matrix": [[round(float(w), 3) for w in row] for row in matrix],
    }


def decode_run(
    run: Run, sets: list[EvalSet], settings: DecodeSettings, cache: Path
) -> tuple[dict[str, list[str]], dict]:
    """({set name: translations}, facts) for the run, decoding only what the cache lacks. Facts:
    parameters, beam, threads, device, per set its seconds and sentences/s, and `heatmap` (the
    forced view of the split's line `settings.heatmap`, when one is asked for)."""
    checkpoint = run.dir / CHECKPOINTS / f"{settings.checkpoint}.pt"
    if not checkpoint.is_file():
        need = " (written when train.average_last is 2 or more)" if settings.checkpoint == "averaged" else ""
        raise NMTError(f"{checkpoint}: no such checkpoint{need}")
    stem = f"{settings.checkpoint}.beam{settings.beam or 'cfg'}"
    facts_path = cache / f"{stem}.json"
    facts = cached_facts(facts_path, checkpoint)
    done = facts["sets"]
    paths = {s.name: cache / f"{s.name}.{stem}.txt.gz" for s in sets}
    todo = [s for s in sets if done.get(s.name, {}).get("digest") != s.digest or not paths[s.name].is_file()]
    wanted = None
    if settings.heatmap:
        line = settings.heatmap
        wanted = {"line": line, "source": sets[0].sources[line - 1], "reference": sets[0].refs[line - 1]}
    heatmap_stale = wanted is not None and {k: facts.get("heatmap", {}).get(k) for k in wanted} != wanted
    if todo or heatmap_stale:
        translator, about = load_uncapped(checkpoint, settings)
        facts |= about
        for s in todo:
            done[s.name] = translate_set(translator, s, paths[s.name])
            atomic_write_text(facts_path, json.dumps(facts) + "\n")  # each set kept as it is done
        if heatmap_stale:
            facts["heatmap"] = wanted | forced_view(translator, wanted["source"], wanted["reference"])
            atomic_write_text(facts_path, json.dumps(facts) + "\n")
    if wanted is None:
        facts.pop("heatmap", None)  # an earlier --heatmap's view is not this call's
    return {s.name: read_hyps(paths[s.name]) for s in sets}, facts


def cached_facts(path: Path, checkpoint: Path) -> dict:
    """The facts cached at `path` when they are this checkpoint's; otherwise (none, another
    checkpoint's, or not readable: a cache is rebuilt, not refused) a fresh start."""
    try:
        facts = read_json(path) if path.is_file() else {}
    except JSONError:
        facts = {}
    identity = file_identity(checkpoint)  # the cache is another model's otherwise
    if facts.get("checkpoint") != identity:
        facts = {"checkpoint": identity, "sets": {}}
    return facts


def load_uncapped(checkpoint: Path, settings: DecodeSettings) -> tuple[Translator, dict]:
    """The checkpoint's translator with no length cap of its own (see the module's docstring),
    and its facts: parameters, beam, threads and device."""
    import torch

    from nmt.decode.translator import load_translator

    overrides = {"max_len": UNCAPPED} | ({"beam": settings.beam} if settings.beam else {})
    translator = load_translator([checkpoint], overrides, settings.device)
    translator.src_limit = UNCAPPED
    return translator, {
        "parameters": translator.info.parameters,
        "beam": translator.cfg.beam,
        "threads": torch.get_num_threads(),
        "device": str(translator.device),
    }


def translate_set(translator: Translator, s: EvalSet, path: Path) -> dict:
    """The set translated into `path` (gzipped text); its digest and decoding speed."""
    start = time.perf_counter()
    hyps = [t.text for t in translator.translate(s.sources, attention=False)]
    seconds = time.perf_counter() - start
    text = "".join(h + "\n" for h in hyps).encode("utf-8")
    atomic_write(path, lambda f: f.write(gzip.compress(text, mtime=0)))
    return {
        "digest": s.digest,
        "seconds": round(seconds, 2),
        "sentences_per_s": round(len(hyps) / seconds, 1),
    }


def read_hyps(path: Path) -> list[str]:
    return decode_lines(gzip.decompress(path.read_bytes()), str(path))
