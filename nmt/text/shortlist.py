"""A lexical shortlist: for each source piece, the target pieces its translations use, so that a
decoder step scores a few thousand pieces of the vocabulary instead of all of them (Sockeye's
`--restrict-lexicon`, Marian's shortlists).

`Shortlist.build` estimates p(target piece | source piece) with IBM Model 1 (EM over every
source x target piece pair of each training sentence, a NULL source absorbing the pieces no
source piece explains), then keeps each source piece's `best` most probable target pieces and
the `frequent` most frequent target pieces. A sentence may then write the frequent pieces, its
source pieces' best ones, EOS and `<unk>` (`allowed`). The file names the vocabularies it was
built for (a digest of each side's pieces) and is refused for any other model; it is checked
whole when loaded (its arrays, their dtypes and shapes, every id within the vocabulary), so a
damaged one ends in one line at start-up, never mid-decode.

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
    return hashlib.sha256("\n".join(tok.pieces).encode("utf-8")).hexdigest()[:16]


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
        """The shortlist in `path`, checked before use (a damaged one would index past the
        vocabulary mid-decode): refused in one line unless it is a shortlist file of this format,
        built for `tok`'s vocabularies, holding whole-number target ids within them."""
        path = Path(path)
        if not path.is_file():
            raise NMTError(f"{path}: no such shortlist file; build one with `nmt shortlist`")
        arrays = read_arrays(path)
        if int(arrays["format"]) != FORMAT:
            raise NMTError(
                f"{path}: shortlist format {int(arrays['format'])}; this nmt reads {FORMAT}; {REBUILD}"
            )
        vocabularies = str(arrays["src_vocab"]), str(arrays["tgt_vocab"])
        if vocabularies != (fingerprint(tok.src), fingerprint(tok.tgt)):
            raise NMTError(
                f"{path}: this shortlist was built for other vocabularies than this model's; "
                "build one for it with `nmt shortlist -m MODEL ...`"
            )
        src, tgt = len(tok.src), len(tok.tgt)
        if int(arrays["tgt_size"]) != tgt:
            raise NMTError(
                f"{path}: built for a target vocabulary of {int(arrays['tgt_size'])} pieces, but this "
                f"model's has {tgt}; {REBUILD}"
            )
        best, frequent = arrays["best"], arrays["frequent"]
        if best.ndim != 2 or len(best) != src or frequent.ndim != 1:
            raise NMTError(
                f"{path}: its arrays have the shapes best {best.shape}, frequent {frequent.shape}, "
                f"not ({src}, k) and (n,) for this model's {src} source pieces; {REBUILD}"
            )
        for name, ids, least in (("best", best, -1), ("frequent", frequent, 0)):
            outside = ids[(ids < least) | (ids >= tgt)]
            if outside.size:
                raise NMTError(
                    f"{path}: its {name!r} array holds the target id {outside[0]}, outside this model's "
                    f"vocabulary ({least} to {tgt - 1}); {REBUILD}"
                )
        return cls(best, frequent, *vocabularies, tgt)


REBUILD = "build it again for this model with `nmt shortlist -m MODEL --src ... --tgt ... -o FILE`"
ARRAYS = {  # name -> (its dtype's kinds: integers, signed or not, or text; whether one value)
    "format": ("iu", True),
    "best": ("iu", False),
    "frequent": ("iu", False),
    "src_vocab": ("U", True),
    "tgt_vocab": ("U", True),
    "tgt_size": ("iu", True),
}


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of the shortlist file `path`, each read whole (a damaged member fails its
    CRC-32 here) and checked to hold its kind of values (one value where one is expected);
    anything else (another format, a file cut short, a pickle) refused in one line."""
    if not zipfile.is_zipfile(path):  # np.load would try a pickle, or raise EOFError on an empty file
        raise NMTError(
            f"{path}: not a shortlist written by `nmt shortlist` (not an .npz archive, or one cut short); "
            f"{REBUILD}"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files if name in ARRAYS}
    except Exception as e:  # zipfile and numpy raise many types for a damaged archive
        raise NMTError(f"{path}: a damaged shortlist file ({e or type(e).__name__}); {REBUILD}") from None
    for name, (kinds, scalar) in ARRAYS.items():
        array = arrays.get(name)
        if not isinstance(array, np.ndarray):  # absent, or a member that is not a .npy (bytes)
            raise NMTError(
                f"{path}: not a shortlist written by `nmt shortlist` (no {name!r} array); {REBUILD}"
            )
        if array.dtype.kind not in kinds or (scalar and array.ndim):
            expected = ("whole numbers" if kinds == "iu" else "text") + (", one value" if scalar else "")
            raise NMTError(
                f"{path}: its {name!r} array holds {array.dtype} of shape {array.shape}, not {expected}; "
                f"{REBUILD}"
            )
    return arrays


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
