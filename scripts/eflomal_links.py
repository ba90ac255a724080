"""Word links of a parallel corpus from eflomal (Östling & Tiedemann 2016; `pip install eflomal`,
not a dependency of nmt), for guided alignment (`train.guided_alignment.links`) and as the
reference of `scripts/markup_bench.py`.

Both sides are lowercased and split into nmt's words (`nmt.words.text_words`: the words `nmt
align` and guided alignment count), aligned in both directions and intersected: precise links.
eflomal samples, so two runs give slightly different links.

    python scripts/eflomal_links.py --src ../shared/data/multi30k/train.de \
        --tgt ../shared/data/multi30k/train.en -o runs/multi30k-train.align
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from nmt.fileio import atomic_write_text, check_same_length, read_lines
from nmt.pharaoh import format_pharaoh, parse_pharaoh
from nmt.words import text_words

Links = set[tuple[int, int]]


def eflomal_links(pairs: list[tuple[str, str]]) -> list[Links]:
    """Intersected forward and reverse eflomal links of each (source, target) pair of texts."""
    import eflomal

    src = [" ".join(text_words(s.lower())) for s, _ in pairs]
    tgt = [" ".join(text_words(t.lower())) for _, t in pairs]
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner().align(
            src, tgt, links_filename_fwd=str(fwd), links_filename_rev=str(rev), quiet=True
        )
        return [
            parse_pharaoh(f, "eflomal forward")[0] & parse_pharaoh(r, "eflomal reverse")[0]
            for f, r in zip(fwd.read_text().splitlines(), rev.read_text().splitlines(), strict=True)
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, required=True, help="source side, one sentence a line")
    parser.add_argument("--tgt", type=Path, required=True, help="target side, the same lines")
    parser.add_argument("-o", "--output", type=Path, required=True, help="Pharaoh links, one line a pair")
    args = parser.parse_args()
    sources, targets = read_lines(args.src), read_lines(args.tgt)
    check_same_length({args.src: sources, args.tgt: targets})
    start = time.perf_counter()
    links = eflomal_links(list(zip(sources, targets, strict=True)))
    atomic_write_text(args.output, "".join(format_pharaoh(a) + "\n" for a in links))
    count = sum(map(len, links))
    print(f"{count} links over {len(links)} pairs in {args.output} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
