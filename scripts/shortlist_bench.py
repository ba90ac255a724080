"""What a lexical shortlist (`nmt shortlist`, `nmt translate --shortlist`) buys: decoding time and
BLEU with and without one, for shortlists of several sizes, on test sets (issue 41, item 4).

Each shortlist is built from the training pairs with `nmt shortlist`'s code; each test set is
translated in this process (the model loaded once, so the times are of decoding alone), without a
shortlist and with each, `--runs` times alternated, greedy and beam 5, batch 64; BLEU by
sacreBLEU against the references.

    python scripts/shortlist_bench.py -m runs/m30k --train-src train.de --train-tgt train.en \
        --test multi30k/test_2016_flickr.de multi30k/test_2016_flickr.en \
        --test iwslt14/test.de iwslt14/test.en --best 10 20 50 --runs 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--train-src", type=Path, required=True)
    parser.add_argument("--train-tgt", type=Path, required=True)
    parser.add_argument("--test", nargs=2, action="append", type=Path, required=True, metavar=("SRC", "REF"))
    parser.add_argument("--best", nargs="+", type=int, default=[10, 20, 50])
    parser.add_argument("--frequent", type=int, default=100)
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("shortlist-bench"))
    args = parser.parse_args()

    import sacrebleu
    import torch

    from nmt import Translator
    from nmt.commands.shortlist import encoded_pairs
    from nmt.text.shortlist import Shortlist

    settings = {"batch_size": 64, "alpha": 0.0, "length_penalty": "none", "max_len": 250}
    plain = Translator.load(args.model, device="cpu", max_len_ratio=1.25, max_len_add=4, **settings)
    data = plain.tok, plain.normalize_form
    pairs = list(encoded_pairs(args.train_src, args.train_tgt, *data, plain.src_limit, 10**9))
    args.out.mkdir(parents=True, exist_ok=True)
    engines = {"none": plain}
    for best in args.best:
        path = args.out / f"shortlist-{best}.npz"
        Shortlist.build(pairs, plain.tok, best, args.frequent).save(path)
        engines[f"best {best}"] = plain.shortlisted(path)
    rows = []
    for src, ref in args.test:
        lines = src.read_text(encoding="utf-8").splitlines()
        refs = ref.read_text(encoding="utf-8").splitlines()
        for beam in args.beams:
            times: dict[str, list[float]] = {name: [] for name in engines}
            outputs: dict[str, list[str]] = {}
            for _ in range(args.runs):
                for name, engine in engines.items():
                    start = time.perf_counter()
                    outputs[name] = [t.text for t in engine.translate(lines, beam=beam, attention=False)]
                    times[name].append(time.perf_counter() - start)
            for name in engines:
                bleu = sacrebleu.corpus_bleu(outputs[name], [refs]).score
                same = sum(a == b for a, b in zip(outputs[name], outputs["none"], strict=True))
                row = {
                    "test": src.name,
                    "beam": beam,
                    "shortlist": name,
                    "bleu": round(bleu, 2),
                    "seconds": [round(t, 2) for t in times[name]],
                    "speed-up": round(min(times["none"]) / min(times[name]), 2),
                    "lines as without": same,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    (args.out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"threads: {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
