"""Word alignments in Pharaoh format: `i-j` links a source word i to a target word j (0-based),
`i?j` a possible link; one line a sentence pair. Read by `nmt align --gold`, guided alignment
and the scripts that write links; words are counted as `nmt.words` counts them."""

from __future__ import annotations

from nmt.errors import NMTError

Link = tuple[int, int]  # (source word, target word)


def format_pharaoh(links: set[Link]) -> str:
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def parse_pharaoh(line: str, where: str) -> tuple[set[Link], set[Link]]:
    """(sure, possible) links of one line; possible includes sure. `where` names the line."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    for token in line.split():
        sep = "-" if "-" in token else "?"
        i, _, j = token.partition(sep)
        if not (i.isdigit() and j.isdigit()):
            raise NMTError(f"{where}: {token!r} is not an alignment link; write i-j (sure) or i?j (possible)")
        link = (int(i), int(j))
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return sure, possible


def parse_inside(
    line: str, where: str, n_src: int, n_tgt: int | None, unit: str = "sentence"
) -> tuple[set[Link], set[Link]]:
    """`parse_pharaoh`, every link checked to fall inside its `unit` of `n_src` source words and
    `n_tgt` target words (None: the target is not known, only the source is checked)."""
    sure, possible = parse_pharaoh(line, where)
    for i, j in sorted(possible):
        if i >= n_src or (n_tgt is not None and j >= n_tgt):
            raise NMTError(
                f"{where}: link {i}-{j} is outside the {unit} ({n_src} source words"
                + (f", {n_tgt} target words" if n_tgt is not None else "")
                + ", counted as nmt align counts them: letter/digit runs and single other characters; "
                "indices are 0-based)"
            )
    return sure, possible
