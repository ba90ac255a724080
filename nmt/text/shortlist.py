"""A lexical shortlist: for each source piece, the target pieces its translations use, so that a
decoder step scores a few thousand pieces of the vocabulary instead of all of them (Sockeye's
`--restrict-lexicon`, Marian's shortlists).

`Shortlist.build` estimates p(target piece | source piece) with IBM Model 1 (EM over every
source x target piece pair of each training sentence, a NULL source absorbing the pieces no
source piece explains), then keeps each source piece's `best` most probable target pieces and
the `frequent` most frequent target pieces. A sentence may then write the frequent pieces, its
source pieces' best ones, EOS and `<unk>` (`allowed`). The file names the vocabularies it was
built for (a digest of each side's pieces) and is refused for any other model.

No torch here: the shortlist is data, read by the torch search (`nmt.decode.search`).
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.data.tokenizer import Tokenizer, TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import atomic_write
from nmt.vocab import EOS, UNK

FORMAT = 1


def fingerprint(tok: Tokenizer) -> str:
    """A digest of a vocabulary's pieces in id order: equal for the same SentencePiece model."""
    pieces = "\n".join(tok.sp.id_to_piece(i) for i in range(len(tok)))
    return hashlib.sha256(pieces.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Shortlist:
    best: np.ndarray  # (source vocabulary, k) target ids, most probable first; -1: none
    frequent: np.ndarray  # target ids every sentence may write
    src_vocab: str  # `fingerprint` of the source vocabulary
    tgt_vocab: str  # and of the target one
    tgt_size: int  # the target vocabulary's size

    @classmethod
    def build(
        cls,
        pairs: Iterable[tuple[list[int], list[int]]],
        tok: TokenizerPair,
        best: int = 20,
        frequent: int = 100,
        iterations: int = 5,
    ) -> Shortlist:
        """From training pairs as piece ids (no EOS): IBM Model 1's `best` target pieces per
        source piece and the `frequent` most frequent target pieces."""
        src_size, tgt_size = len(tok.src), len(tok.tgt)
        table = LexicalTable.estimate(list(pairs), src_size, tgt_size, iterations)
        return cls(
            table.best(best, src_size),
            np.argsort(-table.target_counts, kind="stable")[:frequent].astype(np.int32),
            fingerprint(tok.src),
            fingerprint(tok.tgt),
            tgt_size,
        )

    def allowed(self, src_ids: list[int], extra: Iterable[int] = ()) -> np.ndarray:
        """(target vocabulary,) bool: the pieces a sentence of source `src_ids` may write: the
        frequent pieces, each source piece's best ones, EOS, `<unk>` and `extra` (its prefix
        and constraints)."""
        known = [i for i in src_ids if 0 <= i < len(self.best)]
        rows = self.best[known].ravel()
        allowed = np.zeros(self.tgt_size, dtype=bool)
        allowed[self.frequent] = True
        allowed[rows[rows >= 0]] = True
        allowed[[EOS, UNK, *extra]] = True
        return allowed

    def save(self, path: Path) -> None:
        buffer = io.BytesIO()
        np.savez_compressed(
            buffer,
            format=np.array(FORMAT),
            best=self.best,
            frequent=self.frequent,
            src_vocab=np.array(self.src_vocab),
            tgt_vocab=np.array(self.tgt_vocab),
            tgt_size=np.array(self.tgt_size),
        )
        atomic_write(Path(path), lambda f: f.write(buffer.getvalue()))

    @classmethod
    def load(cls, path: Path, tok: TokenizerPair) -> Shortlist:
        """The shortlist in `path`, refused in one line unless it was built for `tok`'s
        vocabularies."""
        if not Path(path).is_file():
            raise NMTError(f"{path}: no such shortlist file; build one with `nmt shortlist`")
        try:
            with np.load(path, allow_pickle=False) as data:
                if int(data["format"]) != FORMAT:
                    raise NMTError(f"{path}: shortlist format {int(data['format'])}; this nmt reads {FORMAT}")
                shortlist = cls(
                    data["best"],
                    data["frequent"],
                    str(data["src_vocab"]),
                    str(data["tgt_vocab"]),
                    int(data["tgt_size"]),
                )
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
            raise NMTError(f"{path}: not a shortlist written by `nmt shortlist` ({e})") from None
        if (shortlist.src_vocab, shortlist.tgt_vocab) != (fingerprint(tok.src), fingerprint(tok.tgt)):
            raise NMTError(
                f"{path}: this shortlist was built for other vocabularies than this model's; "
                "build one for it with `nmt shortlist -m MODEL ...`"
            )
        return shortlist


@dataclass
class LexicalTable:
    """IBM Model 1's p(target | source) over the source x target piece pairs seen together."""

    keys: np.ndarray  # (U,) source * target_size + target, sorted: the pairs seen together
    prob: np.ndarray  # (U,) p(target | source) of each
    target_counts: np.ndarray  # (target vocabulary,) occurrences in the training targets
    tgt_size: int

    @classmethod
    def estimate(
        cls, pairs: list[tuple[list[int], list[int]]], src_size: int, tgt_size: int, iterations: int
    ) -> LexicalTable:
        """EM from a uniform start; the NULL source is id `src_size`. Every step is a numpy pass
        over all (source, target) co-occurrences: U unique pairs, N occurrences in all."""
        null = src_size
        sources, targets, segments = [], [], []  # per co-occurrence; segment: the target token
        token = 0
        for src, tgt in pairs:
            if not src or not tgt:
                continue
            s = np.asarray([*src, null], dtype=np.int64)
            t = np.asarray(tgt, dtype=np.int64)
            sources.append(np.tile(s, len(t)))
            targets.append(np.repeat(t, len(s)))
            segments.append(np.repeat(np.arange(token, token + len(t)), len(s)))
            token += len(t)
        if not sources:
            raise NMTError("shortlist: no training pair has text on both sides")
        src_of, tgt_of, segment = (np.concatenate(a) for a in (sources, targets, segments))
        keys, pair = np.unique(src_of * tgt_size + tgt_of, return_inverse=True)
        key_source = keys // tgt_size
        prob = np.ones(len(keys))
        for _ in range(iterations):
            weight = prob[pair]
            posterior = weight / np.bincount(segment, weight)[segment]  # over each token's sources
            counts = np.bincount(pair, posterior, minlength=len(keys))
            prob = counts / np.bincount(key_source, counts, minlength=null + 1)[key_source]
        target_tokens = np.concatenate([np.asarray(t, dtype=np.int64) for _, t in pairs if t] or [[]])
        return cls(keys, prob, np.bincount(target_tokens, minlength=tgt_size), tgt_size)

    def best(self, k: int, src_size: int) -> np.ndarray:
        """(src_size, k) the `k` most probable target ids of each source id (-1 past its pairs)."""
        source, target = self.keys // self.tgt_size, self.keys % self.tgt_size
        order = np.lexsort((-self.prob, source))  # by source, then most probable first
        source, target = source[order], target[order]
        first = np.searchsorted(source, source)  # where each source's run starts
        rank = np.arange(len(source)) - first
        kept = (rank < k) & (source < src_size)
        table = np.full((src_size, k), -1, dtype=np.int32)
        table[source[kept], rank[kept]] = target[kept]
        return table
