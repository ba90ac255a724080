"""Word alignments of the training pairs, as attention targets: guided alignment (Chen et al.
2016, `train.guided_alignment`).

The links (Pharaoh `i-j`, one line per training pair, words counted as `nmt align` counts them:
`nmt.words`) are read and checked against the raw training text once, at start-up. A batch's
targets are made when the batch is: each target piece's row spreads its mass evenly over the
source pieces of the words its word links to, so a row sums to 1; pieces of unlinked words, the
final `</s>` and joined pairs (`data.join`) have empty rows, which the loss skips.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmt.config import Config
from nmt.data.cleaning import normalize
from nmt.data.corpus import EncodedCorpus, Side
from nmt.data.sources import train_pairs
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import iter_lines
from nmt.pharaoh import parse_inside
from nmt.words import WordMap, text_words

CHUNK = 20_000  # training pairs read at a time while the links are checked


@dataclass
class Links:
    """Each training line's links as a flat row [i0, j0, i1, j1, ...] (row k: line k + 1), the
    source indices shifted past a corpus's tag; `linked`: lines with at least one link."""

    rows: Side
    linked: int
    files: list[Path]

    def note(self, weight: float) -> str:
        return (
            f"guided alignment: links for {self.linked} of {len(self.rows)} training pairs from "
            f"{', '.join(map(str, self.files))} (weight {weight:g})"
        )


def read_links(cfg: Config) -> Links:
    """The links of every training line, each checked to fall inside its pair; a file with
    another line count than its corpus, or a link out of range, is one line naming both."""
    files = [Path(p) for p in cfg.train.guided_alignment.links]
    for path in files:
        if not path.is_file():
            raise NMTError(f"train.guided_alignment.links: {path}: file not found")
    tags = [c.tag for c in cfg.data.corpora] or [""]
    rows: list[list[int]] = []
    lines = [enumerate(iter_lines(path), 1) for path in files]
    counts = [0] * len(files)
    for chunk in train_pairs(cfg.data).chunks(CHUNK):
        part, shift = chunk.part, len(text_words(tags[chunk.part]))
        for src, tgt in zip(chunk.sources, chunk.targets, strict=True):
            counts[part] += 1
            number, line = next(lines[part], (0, None))
            if line is None:
                raise _short(files[part], counts[part] - 1, cfg, part)
            n_src = len(text_words(normalize(src, cfg.data.normalize))) - shift
            n_tgt = len(text_words(normalize(tgt, cfg.data.normalize)))
            where = f"train.guided_alignment.links: {files[part]}:{number}"
            rows.append(_parsed(line, where, n_src, n_tgt, shift))
    for part, remaining in enumerate(lines):
        if next(remaining, None) is not None:
            raise _short(files[part], counts[part], cfg, part, longer=True)
    return Links(Side.from_lists(rows), sum(1 for r in rows if r), files)


def _short(path: Path, pairs: int, cfg: Config, part: int, longer: bool = False) -> NMTError:
    """A links file that ends before its corpus (after `pairs` lines), or goes on past its `pairs`."""
    corpus = cfg.data.corpora[part].train if cfg.data.corpora else cfg.data.train
    count = f"more lines than the {pairs} pairs" if longer else f"{pairs} lines, fewer than the pairs"
    return NMTError(
        f"train.guided_alignment.links: {path} has {count} of the training split {corpus}; "
        "give one line of links per training pair"
    )


def _parsed(line: str, where: str, n_src: int, n_tgt: int, shift: int) -> list[int]:
    """One line's links (sure and possible alike), flat, source indices moved past the tag."""
    possible = parse_inside(line, where, n_src, n_tgt, unit="pair")[1]
    return [x for i, j in sorted(possible) for x in (i + shift, j)]


class GuidedTargets:
    """Attention targets of training batches from the `Links` of their lines."""

    def __init__(self, links: Links, tok: TokenizerPair):
        self.links, self.tok = links, tok

    def batch(self, corpus: EncodedCorpus, indices, target_len: int, source_len: int) -> torch.Tensor:
        """(B, T, S) targets of the pairs `indices` of `corpus` (its `lines` name their links)."""
        out = np.zeros((len(indices), target_len, source_len), dtype=np.float32)
        for b, index in enumerate(indices):
            line = int(corpus.lines[index]) if corpus.lines is not None else 0
            flat = self.links.rows[line - 1] if line else ()
            if len(flat):
                src, tgt = (
                    self.tok.src.id_to_piece(corpus.src[index]),
                    self.tok.tgt.id_to_piece(corpus.tgt[index]),
                )
                rows = piece_targets(np.asarray(flat).reshape(-1, 2), src, tgt)
                out[b, : rows.shape[0], : rows.shape[1]] = rows
        return torch.from_numpy(out)


def piece_targets(links: np.ndarray, src_pieces: list[str], tgt_pieces: list[str]) -> np.ndarray:
    """(target pieces, source pieces): word links (i, j) spread over the pieces of each word,
    each row normalised to sum to 1 (empty rows stay zero)."""
    src, tgt = WordMap.of(src_pieces), WordMap.of(tgt_pieces)
    src_words, tgt_words = src.text_indices, tgt.text_indices
    words = np.zeros((len(tgt.words), len(src.words)))
    for i, j in links:
        if i < len(src_words) and j < len(tgt_words):  # an <unk> piece can swallow a word
            words[tgt_words[j], src_words[i]] = 1.0
    rows = (tgt.share > 0) @ words @ (src.share > 0).T
    return rows / np.maximum(rows.sum(1, keepdims=True), 1e-12)
