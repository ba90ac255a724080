"""How well `--markup` places tags: test sentences with a tag pair around words whose place in
the target is unambiguous, and a placeholder before another word, against an independent word
aligner's links (issue 41, item 3).

The reference alignment comes from eflomal (`scripts/eflomal_links.py`), run over the training pairs
with the test pairs appended, lowercased, in nmt's words (`nmt.words.text_words`), both directions
intersected: precise links. A tag pair goes around 1-3 words of the source whose links make a
consistent phrase pair (every word linked, the linked target words a run that links back only into
those words, the rule of phrase extraction), so its right place in the target is the run; the
placeholder goes before a linked source word outside the pair, its right place before that word's
first target word. Two measurements:

- forced: the tags carried onto the reference with the attention of forced decoding (where the
  words are given, only the placement is measured);
- free: `translate(markup=True)` with beam 5, against the links between the source and nmt's own
  plain translation (aligned in the same eflomal run).

Each counts pairs placed exactly, the word-level F1 of pair spans, and placeholders placed
exactly; every output is checked to be well-formed, hold the source's tags and, free, to be the
plain translation between its tags.

    python scripts/markup_bench.py -m runs/m30k --src ../shared/data/multi30k/test_2016_flickr.de \
        --ref ../shared/data/multi30k/test_2016_flickr.en --train-src ../shared/data/multi30k/train.de \
        --train-tgt ../shared/data/multi30k/train.en --out markup-bench
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from eflomal_links import Links, eflomal_links  # scripts/, beside this one

from nmt.errors import NMTError
from nmt.text.markup import Markup
from nmt.words import WORD, text_words


def phrase_target(links: Links, first: int, last: int) -> tuple[int, int] | None:
    """The target run of source words first..last when they make a consistent phrase pair."""
    targets = {j for i, j in links if first <= i <= last}
    linked = {i for i, _ in links}
    if not targets or any(k not in linked for k in range(first, last + 1)):
        return None
    lo, hi = min(targets), max(targets)
    if any(lo <= j <= hi and not first <= i <= last for i, j in links):
        return None
    return lo, hi


def tagged_line(words: list[str], line: str, links: Links, draw: random.Random):
    """`line` with <b>..</b> around a consistent span and {0} before another linked word, and
    the right target places: ((pair first, last), placeholder position); None when no span fits."""
    spans = [
        (first, last, target)
        for first in range(len(words))
        for last in range(first, min(first + 3, len(words)))
        if all(w.isalpha() for w in words[first : last + 1]) and (target := phrase_target(links, first, last))
    ]
    if not spans:
        return None
    first, last, target = draw.choice(spans)
    others = [
        i
        for i in range(len(words))
        if words[i].isalpha() and not first <= i <= last + 1 and any(k == i for k, _ in links)
    ]
    point = draw.choice(others) if others else None
    marks = (
        {first: "<b>", last + 1: "</b>"} if point is None else {first: "<b>", last + 1: "</b>", point: "{0} "}
    )
    out, cursor = [], 0
    found = list(WORD.finditer(line))
    spans_at = [m.start() for m in found] + [len(line)]
    ends = [m.end() for m in found]
    for index in sorted(marks):
        at = ends[index - 1] if marks[index] == "</b>" else spans_at[index]
        out += [line[cursor:at], marks[index]]
        cursor = at
    out.append(line[cursor:])
    place = min(j for i, j in links if i == point) if point is not None else None
    return "".join(out), target, place


def placed(text: str) -> tuple[tuple[int, int] | None, int | None, bool]:
    """Where the output put the pair (its words) and the placeholder (the word it stands before),
    and whether it is well-formed with both tags."""
    try:
        markup = Markup.parse(text, "output")
    except NMTError:
        return None, None, False
    pair = next((e for e in markup.elements if e.close), None)
    point = next((e for e in markup.elements if e.close is None), None)
    span = (pair.first, pair.last) if pair and pair.first <= pair.last else None
    return span, point.first if point else None, pair is not None


def score(cases: list[tuple], outputs: list[str]) -> dict:
    exact = f1 = points = point_total = well_formed = 0
    for (_, target, place), text in zip(cases, outputs, strict=True):
        span, at, ok = placed(text)
        well_formed += ok
        if span:
            exact += span == target
            got, want = set(range(span[0], span[1] + 1)), set(range(target[0], target[1] + 1))
            overlap = len(got & want)
            f1 += 2 * overlap / (len(got) + len(want))
        if place is not None:
            point_total += 1
            points += at == place
    n = len(cases)
    return {
        "tagged sentences": n,
        "well-formed": well_formed,
        "pairs exact": exact,
        "pairs exact %": round(100 * exact / n, 1),
        "pair word F1 %": round(100 * f1 / n, 1),
        "placeholders": point_total,
        "placeholders exact": points,
        "placeholders exact %": round(100 * points / max(1, point_total), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--ref", type=Path, required=True)
    parser.add_argument("--train-src", type=Path, required=True)
    parser.add_argument("--train-tgt", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from nmt import Translator

    sources = args.src.read_text(encoding="utf-8").splitlines()
    refs = args.ref.read_text(encoding="utf-8").splitlines()
    train = list(
        zip(
            args.train_src.read_text(encoding="utf-8").splitlines(),
            args.train_tgt.read_text(encoding="utf-8").splitlines(),
            strict=True,
        )
    )
    translator = Translator.load(args.model, device="cpu", beam=args.beam, batch_size=64)
    start = time.perf_counter()
    plain = [t.text for t in translator.translate(sources, attention=False)]
    plain_s = time.perf_counter() - start
    links = eflomal_links(
        train + list(zip(sources, refs, strict=True)) + list(zip(sources, plain, strict=True))
    )
    n = len(sources)
    to_ref, to_out = links[len(train) : len(train) + n], links[len(train) + n :]

    results = {}
    args.out.mkdir(parents=True, exist_ok=True)
    for name, alignment in (("forced", to_ref), ("free", to_out)):
        draw = random.Random(args.seed)
        cases, rows = [], []
        for row, (line, a) in enumerate(zip(sources, alignment, strict=True)):
            case = tagged_line(text_words(line), line, a, draw)
            if case:
                cases.append(case)
                rows.append(row)
        tagged = [c[0] for c in cases]
        markups = [Markup.parse(t, "") for t in tagged]
        if name == "forced":
            forced = translator.score([m.plain for m in markups], [refs[r] for r in rows])
            outputs = [
                m.carry(refs[r], f.attention, f.src_pieces, f.tgt_pieces)
                for m, r, f in zip(markups, rows, forced, strict=True)
            ]
        else:
            start = time.perf_counter()
            outputs = [t.text for t in translator.translate(tagged, markup=True)]
            results["free seconds"] = round(time.perf_counter() - start, 2)
            untagged = translator.translate([m.plain for m in markups], attention=False)
            results["free: plain text between the tags"] = sum(
                Markup.parse(o, "").plain == u.text for o, u in zip(outputs, untagged, strict=True)
            )
        results[name] = score(cases, outputs)
        (args.out / f"{name}.tagged.src").write_text("".join(t + "\n" for t in tagged), encoding="utf-8")
        (args.out / f"{name}.out").write_text("".join(o + "\n" for o in outputs), encoding="utf-8")
    results["plain translation seconds (all lines)"] = round(plain_s, 2)
    print(json.dumps(results, indent=2))
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
