"""Corpus scores through sacreBLEU's API, and BLEU by reference length.

Each length bucket is a real corpus BLEU over that bucket's sentences (not a mean of sentence
BLEUs), so a bucket's figure is exactly what sacreBLEU prints on those lines alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from nmt.errors import NMTError

DEFAULT_BUCKETS = (10, 20, 30, 40, 50)  # upper bounds: 1-10, 11-20, ..., 41-50, 51+


@dataclass
class BucketScore:
    label: str
    sentences: int
    bleu: float | None  # None for an empty bucket


@dataclass
class Report:
    sentences: int
    bleu: float
    bleu_signature: str
    chrf: float
    chrf_signature: str
    exact_match: float  # share of hypotheses identical to the reference (after strip)
    buckets: list[BucketScore] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def table(self) -> str:
        lines = [
            f"BLEU  {self.bleu:6.2f}  {self.bleu_signature}",
            f"chrF  {self.chrf:6.2f}  {self.chrf_signature}",
            f"exact match {100 * self.exact_match:.2f}% of {self.sentences} sentences",
            "",
            "BLEU by reference length (words)",
            f"{'length':>8}  {'sentences':>9}  {'BLEU':>6}",
        ]
        for b in self.buckets:
            bleu = "-" if b.bleu is None else f"{b.bleu:6.2f}"
            lines.append(f"{b.label:>8}  {b.sentences:>9}  {bleu:>6}")
        return "\n".join(lines)


def bucket_labels(bounds: tuple[int, ...]) -> list[str]:
    lows = (0, *bounds)
    return [f"{lo + 1}-{hi}" for lo, hi in zip(lows, bounds, strict=False)] + [f"{bounds[-1] + 1}+"]


def bucket_of(length: int, bounds: tuple[int, ...]) -> int:
    for i, hi in enumerate(bounds):
        if length <= hi:
            return i
    return len(bounds)


def score(hyps: list[str], refs: list[str], bounds: tuple[int, ...] = DEFAULT_BUCKETS) -> Report:
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise NMTError(f"hypotheses have {len(hyps)} lines but references have {len(refs)}")
    if not refs:
        raise NMTError("nothing to score: the reference is empty")
    bleu, chrf = BLEU(), CHRF()
    corpus_bleu = bleu.corpus_score(hyps, [refs])
    corpus_chrf = chrf.corpus_score(hyps, [refs])
    groups: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    for i, ref in enumerate(refs):
        groups[bucket_of(len(ref.split()), bounds)].append(i)
    buckets = []
    for label, idx in zip(bucket_labels(bounds), groups, strict=True):
        value = None
        if idx:
            value = BLEU().corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score
        buckets.append(BucketScore(label, len(idx), value))
    exact = sum(h.strip() == r.strip() for h, r in zip(hyps, refs, strict=True)) / len(refs)
    return Report(
        sentences=len(refs),
        bleu=corpus_bleu.score,
        bleu_signature=str(bleu.get_signature()),
        chrf=corpus_chrf.score,
        chrf_signature=str(chrf.get_signature()),
        exact_match=exact,
        buckets=buckets,
    )
