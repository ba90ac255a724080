"""Where a fixed-row search's time goes (`nmt.decode.rows`), window by window: the device's time
for a window (CUDA events around its replay), the host's wait for it (the read of the window's
records), the host's own work (following the records, refilling the pool, launching) and the
rest of the loop (reading and tokenising the lines, making each translation), so that
the next change is chosen by figures: a host that works longer than the device a window is worth
overlapping with it; a device that works longer is worth fewer kernels.

    python scripts/gpu/decode_share.py CHECKPOINT INPUT [--device cuda] [beam=5 batch_size=64 ...]

The settings (`key=value`, YAML values) replace the model's decode settings, as `Translator.load`
takes them. One line per run; on a CPU the device's time is the window's own (no events).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("input", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=1000, help="lines decoded first, untimed")
    parser.add_argument("settings", nargs="*", help="decode settings as key=value")
    args = parser.parse_intermixed_args()
    if malformed := [item for item in args.settings if "=" not in item]:
        parser.error(f"settings are key=value, not {malformed[0]!r}")
    settings = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.settings)}
    settings = {"beam": 5, "batch_size": 64, **settings, "rows": "fixed"}

    import torch

    from nmt import Translator
    from nmt.decode import rows

    seconds: dict[str, float] = defaultdict(float)
    events: list[tuple] = []
    cuda = torch.device(args.device).type == "cuda"

    def timed(owner, name: str, label: str, generator: bool = False):
        original = getattr(owner, name)

        def plain(*a, **k):
            start = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                seconds[label] += time.perf_counter() - start

        def yielding(*a, **k):
            start = time.perf_counter()
            results = list(original(*a, **k))  # the host's work, without the caller's
            seconds[label] += time.perf_counter() - start
            yield from results

        setattr(owner, name, yielding if generator else plain)

    run = rows.Steps.run

    def window(self, bucket, steps):
        start = time.perf_counter()
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            stream = torch.cuda.current_stream(self.device)  # the pool's GPU, whichever is current
            begin.record(stream)
            run(self, bucket, steps)
            end.record(stream)
            events.append((begin, end))
        else:
            run(self, bucket, steps)
        seconds["launch"] += time.perf_counter() - start

    rows.Steps.run = window
    timed(rows, "fetch", "wait")
    timed(rows.FixedRows, "refill", "refill")
    for kind in (rows.FixedGreedy, rows.FixedBeam):
        timed(kind, "collect", "collect", generator=True)

    lines = args.input.read_text(encoding="utf-8").splitlines()
    translator = Translator.load(args.checkpoint, device=args.device, **settings)
    # The graphs of the lengths these lines reach are captured here, and kept for the timed run.
    translator.translate(lines[: args.warmup], attention=False)
    seconds.clear()
    events.clear()
    start = time.perf_counter()
    translator.translate(lines, attention=False)
    if cuda:
        torch.cuda.synchronize(args.device)
    loop = time.perf_counter() - start
    device = sum(b.elapsed_time(e) for b, e in events) / 1e3 if cuda else seconds["launch"]
    count = f" ({len(events)})" if cuda else ""
    follow = seconds["collect"] - seconds["wait"]
    launch = seconds["launch"] if cuda else 0.0
    # the rest of the loop: reading and tokenising the lines, making each Translation
    other = loop - seconds["collect"] - seconds["refill"] - seconds["launch"]
    print(
        f"decode_share beam {settings['beam']} batch {settings['batch_size']}, {len(lines)} lines: "
        f"loop {loop:.2f} s; windows: device {device:.2f} s{count}; host: waiting {seconds['wait']:.2f} s, "
        f"following the records {follow:.2f} s, refilling {seconds['refill']:.2f} s, "
        f"launching {launch:.2f} s, the rest {other:.2f} s"
    )


if __name__ == "__main__":
    main()
