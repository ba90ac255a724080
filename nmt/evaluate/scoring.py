"""Corpus scores through sacreBLEU's API, BLEU by sentence length, and paired significance tests.

Each length bucket is a real corpus score over that bucket's sentences (not a mean of sentence
scores), so a bucket's figure is exactly what sacreBLEU prints on those lines alone.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from nmt.errors import NMTError

DEFAULT_BUCKETS = (10, 20, 30, 40, 50)  # upper bounds: 1-10, 11-20, ..., 41-50, 51+


@dataclass
class EvalOptions:
    tokenize: str = "13a"
    lowercase: bool = False
    chrf_word_order: int = 0  # 2 gives chrF++
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    by: Literal["ref", "src"] = "ref"  # which side's length (in words) puts a sentence in a bucket
    bootstrap: int = 1000  # paired bootstrap resamples for p-values (0: no test)
    seed: int = 12345


@dataclass
class BucketScore:
    label: str
    sentences: int
    bleu: float | None  # None for an empty bucket
    chrf: float | None
    p_bleu: float | None = None  # paired bootstrap p-value against the first system


@dataclass
class SystemReport:
    name: str
    scores: dict[str, float]  # BLEU, chrF (or chrF++), TER
    exact_match: float  # share of hypotheses identical to the (first) reference, after strip
    p_values: dict[str, float] = field(default_factory=dict)  # against the first system
    buckets: list[BucketScore] = field(default_factory=list)


@dataclass
class Report:
    sentences: int
    signatures: dict[str, str]
    bucket_by: str
    significance: str  # how p-values were computed ('' when there is one system)
    systems: list[SystemReport]

    def to_dict(self) -> dict:
        return asdict(self)


def bucket_labels(bounds: tuple[int, ...]) -> list[str]:
    lows = (0, *bounds)
    return [f"{lo + 1}-{hi}" for lo, hi in zip(lows, bounds, strict=False)] + [f"{bounds[-1] + 1}+"]


def bucket_of(length: int, bounds: tuple[int, ...]) -> int:
    for i, hi in enumerate(bounds):
        if length <= hi:
            return i
    return len(bounds)


def bucket_indices(lines: list[str], bounds: tuple[int, ...]) -> list[list[int]]:
    """The indices of the lines in each length bucket, by their words."""
    groups: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    for i, line in enumerate(lines):
        groups[bucket_of(len(line.split()), bounds)].append(i)
    return groups


def parse_buckets(text: str) -> tuple[int, ...]:
    try:
        bounds = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise NMTError(f"--buckets {text}: expected increasing integers such as 10,20,30") from None
    if not bounds or any(b <= a for a, b in zip((0, *bounds), bounds, strict=False)):
        raise NMTError(f"--buckets {text}: expected increasing positive integers such as 10,20,30")
    return bounds


# What sacreBLEU's tokenizers need beyond sacreBLEU itself, and how to get it ({reason}: the error).
TOKENIZER_NEEDS = {
    "ja-mecab": "it needs MeCab and its IPA dictionary: pip install 'sacrebleu[ja]'",
    "ko-mecab": "it needs MeCab-ko and its dictionary: pip install 'sacrebleu[ko]'",
    **dict.fromkeys(
        ("spm", "flores101", "flores200", "spBLEU-1K"),
        "it needs its SentencePiece model in ~/.sacrebleu/models, and the download failed ({reason}): "
        "connect to the network once",
    ),
}


def bleu_metric(opts: EvalOptions, **settings) -> Any:
    """sacreBLEU's BLEU with the options' tokenizer (and `settings`). A tokenizer that cannot load
    (its optional package missing, its model not downloadable) is one line that says what it
    needs, not sacreBLEU's traceback; build the metric before any long work to find out early."""
    from sacrebleu.metrics import BLEU

    if opts.tokenize not in BLEU.TOKENIZERS:
        raise NMTError(f"--tokenize {opts.tokenize}: unknown tokenizer (one of {', '.join(BLEU.TOKENIZERS)})")
    try:
        return BLEU(tokenize=opts.tokenize, lowercase=opts.lowercase, **settings)
    except (ImportError, RuntimeError, AssertionError, OSError) as e:
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        needs = TOKENIZER_NEEDS.get(opts.tokenize, "{reason}").format(reason=reason)
        raise NMTError(
            f"--tokenize {opts.tokenize}: sacreBLEU cannot load this tokenizer: {needs}; "
            "or choose another --tokenize"
        ) from None


def metrics(opts: EvalOptions) -> dict:
    """The metrics `evaluate` reports, built (and so checked) at once."""
    from sacrebleu.metrics import CHRF, TER

    return {
        "BLEU": bleu_metric(opts),
        "chrF++" if opts.chrf_word_order else "chrF": CHRF(
            word_order=opts.chrf_word_order, lowercase=opts.lowercase
        ),
        "TER": TER(case_sensitive=not opts.lowercase),
    }


@contextlib.contextmanager
def _sacrebleu_seed(seed: int):
    """sacreBLEU's significance tests read their seed from SACREBLEU_SEED."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED")
        else:
            os.environ["SACREBLEU_SEED"] = old


def paired_p_values(systems: dict[str, list[str]], refs: list[list[str]], chosen: dict, opts: EvalOptions):
    """{system: {metric: p}} for every system after the first, by paired bootstrap resampling."""
    from sacrebleu.significance import PairedTest

    with _sacrebleu_seed(opts.seed):
        test = PairedTest(list(systems.items()), chosen, refs, test_type="bs", n_samples=opts.bootstrap)
        _, results = test()
    names = results.pop("System")
    columns = dict(zip(chosen, results.values(), strict=True))  # sacreBLEU names them its own way
    baseline = next(iter(systems.values()))
    # sacreBLEU counts resampled differences strictly above the observed one, so a system
    # identical to the baseline (every difference 0) gets p = 1/(n+1); its true p-value is 1.
    return {
        name: {m: 1.0 if systems[name] == baseline else float(v[i].p_value) for m, v in columns.items()}
        for i, name in enumerate(names)
        if i > 0
    }


def bleu_interval(hyps: list[str], refs: list[list[str]], resamples: int, opts: EvalOptions) -> float:
    """Half-width of the 95% bootstrap interval of corpus BLEU (sacreBLEU's resampling, seeded;
    at least 40 resamples, as sacreBLEU cuts 1/40 of them at each end). A BLEU object of its own:
    sacreBLEU writes the resample count into the metric's signature."""
    if resamples < 40:
        raise NMTError(f"a 95% interval needs at least 40 bootstrap resamples, not {resamples}")
    with _sacrebleu_seed(opts.seed):
        score = bleu_metric(opts).corpus_score(hyps, refs, n_bootstrap=resamples)
    return float(score._ci)


def evaluate(
    systems: dict[str, list[str]],
    refs: list[list[str]],
    opts: EvalOptions | None = None,
    src: list[str] | None = None,
) -> Report:
    """Score every system against the reference set(s) `refs` (each a list of lines)."""
    opts = opts or EvalOptions()
    n = _check_lines(systems, refs, opts, src)
    chosen = metrics(opts)
    signatures, reports = {}, []
    for name, hyps in systems.items():
        scores = {}
        for metric_name, metric in chosen.items():
            scores[metric_name] = metric.corpus_score(hyps, refs).score
            signatures[metric_name] = str(metric.get_signature())
        exact = sum(h.strip() == r.strip() for h, r in zip(hyps, refs[0], strict=True)) / n
        reports.append(SystemReport(name, scores, exact))
    compare = len(systems) > 1 and opts.bootstrap > 0
    _add_buckets(reports, systems, refs, src if opts.by == "src" else refs[0], chosen, compare, opts)
    significance = ""
    if compare:
        for report, p in zip(reports[1:], paired_p_values(systems, refs, chosen, opts).values(), strict=True):
            report.p_values = p
        significance = f"paired bootstrap resampling, {opts.bootstrap} resamples, seed {opts.seed}"
    return Report(n, signatures, opts.by, significance, reports)


def _check_lines(
    systems: dict[str, list[str]], refs: list[list[str]], opts: EvalOptions, src: list[str] | None
) -> int:
    """The number of lines every reference, system (and with `by` src, the source) must share."""
    n = len(refs[0])
    if n == 0:
        raise NMTError("nothing to score: the reference file is empty")
    for i, ref in enumerate(refs[1:], 2):
        if len(ref) != n:
            raise NMTError(f"reference {i} has {len(ref)} lines but reference 1 has {n}")
    for name, hyps in systems.items():
        if len(hyps) != n:
            raise NMTError(f"{name} has {len(hyps)} lines but the references have {n}")
    if opts.by == "src" and (src is None or len(src) != n):
        raise NMTError("--by src needs the source file (--src) with as many lines as the references")
    return n


def _add_buckets(
    reports: list[SystemReport],
    systems: dict[str, list[str]],
    refs: list[list[str]],
    by: list[str],
    chosen: dict,
    compare: bool,
    opts: EvalOptions,
) -> None:
    """Each system's BLEU and chrF on each length bucket of the lines `by` (and with `compare`,
    the p-value of its BLEU against the first system's there)."""
    chrf_name = list(chosen)[1]
    for label, idx in zip(bucket_labels(opts.buckets), bucket_indices(by, opts.buckets), strict=True):
        sub_refs = [[ref[i] for i in idx] for ref in refs]
        sub_systems = {name: [hyps[i] for i in idx] for name, hyps in systems.items()}
        p_values = (
            paired_p_values(sub_systems, sub_refs, {"BLEU": chosen["BLEU"]}, opts) if compare and idx else {}
        )
        for report, (name, hyps) in zip(reports, sub_systems.items(), strict=True):
            bleu = chosen["BLEU"].corpus_score(hyps, sub_refs).score if idx else None
            chrf = chosen[chrf_name].corpus_score(hyps, sub_refs).score if idx else None
            report.buckets.append(
                BucketScore(label, len(idx), bleu, chrf, p_values.get(name, {}).get("BLEU"))
            )


def format_table(report: Report) -> str:
    """The report as aligned text tables: one row per system, then BLEU by length."""
    names = [s.name for s in report.systems]
    metric_names = list(report.systems[0].scores)
    width = max(12, *(len(n) for n in names))
    compare = bool(report.significance)
    header = f"{'system':<{width}}" + "".join(f"{m:>9}" for m in metric_names) + f"{'exact':>9}"
    header += "".join(f"{'p(' + m + ')':>11}" for m in metric_names) if compare else ""
    lines = [f"{report.sentences} sentences", header]
    for s in report.systems:
        row = (
            f"{s.name:<{width}}"
            + "".join(f"{v:9.2f}" for v in s.scores.values())
            + f"{100 * s.exact_match:8.1f}%"
        )
        if compare:
            row += "".join(f"{s.p_values[m]:11.4f}" if s.p_values else f"{'-':>11}" for m in metric_names)
        lines.append(row)
    lines += [""] + [f"{name:>6}: {sig}" for name, sig in report.signatures.items()]
    if compare:
        lines.append(f"p-values: {report.significance}, against {names[0]}")
    lines += ["", f"BLEU by {report.bucket_by} length (words)"]
    head = f"{'length':>8}{'sentences':>11}"
    for name in names:
        head += f"  {name[:18]:>18} BLEU{'chrF':>7}" + ("  p(BLEU)" if compare else "")
    lines.append(head)
    for i, bucket in enumerate(report.systems[0].buckets):
        row = f"{bucket.label:>8}{bucket.sentences:>11}"
        for s in report.systems:
            b = s.buckets[i]
            cells = ("-", "-") if b.bleu is None else (f"{b.bleu:.2f}", f"{b.chrf:.2f}")
            row += f"  {cells[0]:>23}{cells[1]:>7}"
            if compare:
                row += f"{b.p_bleu:9.4f}" if b.p_bleu is not None else f"{'-':>9}"
        lines.append(row)
    return "\n".join(lines)


def sentence_details(
    systems: dict[str, list[str]], refs: list[list[str]], src: list[str] | None, opts: EvalOptions
) -> str:
    """TSV, one row per sentence and system, to find the worst sentences quickly."""
    from sacrebleu.metrics import CHRF

    sentence_bleu = bleu_metric(opts, effective_order=True)
    chrf = CHRF(word_order=opts.chrf_word_order, lowercase=opts.lowercase)
    rows = [
        "system\tline\tsrc_words\tref_words\thyp_words\tsentence_bleu\tchrf\tsource\treference\thypothesis"
    ]
    for name, hyps in systems.items():
        for i, hyp in enumerate(hyps):
            sent_refs = [ref[i] for ref in refs]
            source = src[i] if src else ""
            cells = [
                name,
                str(i + 1),
                str(len(source.split())),
                str(len(sent_refs[0].split())),
                str(len(hyp.split())),
                f"{sentence_bleu.sentence_score(hyp, sent_refs).score:.2f}",
                f"{chrf.sentence_score(hyp, sent_refs).score:.2f}",
                source,
                sent_refs[0],
                hyp,
            ]
            rows.append("\t".join(cell.replace("\t", " ") for cell in cells))
    return "\n".join(rows) + "\n"
