"""What a run tells: lines for the terminal and `train.log`, entries for `metrics.jsonl` and the
trackers, the progress bar, the training curves and an attention heatmap per validation. Under
torchrun only rank 0 reports; the other processes' reports are silent."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from nmt.config import Config
from nmt.decode.translator import Translation
from nmt.fileio import atomic_write_text
from nmt.rundir import METRICS, TRAIN_LOG, read_metrics
from nmt.train.progress import Clock
from nmt.train.trackers import Tracker, open_trackers


def process_seconds() -> float:
    """Seconds since this process started (Linux: from /proc, so imports count too), else since
    this module was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            return float(f.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - IMPORTED


IMPORTED = time.perf_counter()


class RunReport:
    def __init__(self, run_dir: Path, rank: int, quiet: bool, clock: Clock):
        self.run_dir, self.active, self.clock = run_dir, rank == 0, clock
        self.quiet = quiet or not self.active
        self.trackers: list[Tracker] = []  # opened when training starts, in the run directory
        self.bar = None

    def log(self, message: str, show: bool = True) -> None:
        """A line for the terminal (unless quiet, or `show` is off) and always for train.log."""
        if not self.active:
            return
        with open(self.run_dir / TRAIN_LOG, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")
        if show and not self.quiet:
            from tqdm.auto import tqdm

            tqdm.write(message, file=sys.stderr)

    def record(self, entry: dict) -> None:
        """One line of metrics.jsonl (stamped with the training time), and the trackers' scalars."""
        if not self.active:
            return
        entry["time"] = round(self.clock.elapsed(), 2)
        with open(self.run_dir / METRICS, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        scalars = {k: v for k, v in entry.items() if k not in ("step", "epoch", "time")}
        for tracker in self.trackers:
            tracker.log_metrics(scalars, entry["step"])

    def forget_after(self, step: int) -> None:
        """Drop metrics lines a killed session logged past its last checkpoint (and a line cut
        short by the kill), so the resumed run's log reads as one uninterrupted run."""
        metrics = self.run_dir / METRICS
        if metrics.exists() and self.active:
            kept = [m for m in read_metrics(self.run_dir) if m["step"] <= step]
            atomic_write_text(metrics, "".join(json.dumps(m) + "\n" for m in kept))

    def open(self, cfg: Config, step: int) -> None:
        """The trackers and the progress bar, as training starts."""
        from tqdm.auto import tqdm

        if self.active:
            self.trackers = open_trackers(cfg.train.loggers, self.run_dir, cfg)
        self.bar = tqdm(
            total=cfg.train.max_steps,
            initial=step,
            desc="training",
            unit="step",
            disable=self.quiet or None,
            dynamic_ncols=True,
            mininterval=0.5,
            file=sys.stderr,
        )

    def step_done(self) -> None:
        self.bar.update()

    def close_bar(self) -> None:
        self.bar.close()

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()

    def show_window(self, entry: dict) -> None:
        """A log step's entry, recorded and shown beside the progress bar."""
        self.record(entry)
        self.bar.set_postfix(
            loss=f"{entry['loss']:.3f}",
            ppl=f"{entry['ppl']:.1f}",
            lr=f"{entry['lr']:.2g}",
            tok_s=f"{entry['tgt_tokens_per_s']:.0f}",
            epoch=entry["epoch"],
            refresh=False,
        )

    def started(self, data_seconds: float) -> None:
        """The start-up line, as this session's first step begins."""
        self.log(f"start-up: {process_seconds():.1f} s to the first step (the data {data_seconds:.1f} s)")

    def averaged(self, step: int, scores: dict[str, float], count: int) -> None:
        """The averaged checkpoint's scores, recorded beside the step's own and logged."""
        self.record({"step": step, **{f"{k}_averaged": v for k, v in scores.items()}})
        self.log(f"averaged last {count} checkpoints: valid BLEU {scores['valid_bleu']:.2f}")

    def validated(
        self,
        step: int,
        scores: dict[str, float],
        seconds: float,
        improved: bool,
        translations: list[Translation],
    ) -> None:
        """A validation's line; its translations, one a line, in valid/step-N.txt; the training
        curves redrawn, and the first sentence's attention for the trackers."""
        from nmt.plots import training_curves

        self.log(
            f"step {step}: valid loss {scores['valid_loss']:.3f} ppl {scores['valid_ppl']:.2f} "
            f"BLEU {scores['valid_bleu']:.2f} exact {100 * scores['valid_exact_match']:.1f}% "
            + (f"AER {scores['valid_aer']:.3f} " if "valid_aer" in scores else "")
            + f"({seconds:.1f} s)"
            + (" (best)" if improved else "")
        )
        text = "".join(t.text + "\n" for t in translations)
        atomic_write_text(self.run_dir / "valid" / f"step-{step}.txt", text)
        training_curves(
            {self.run_dir.name: read_metrics(self.run_dir)}, self.run_dir / "plots" / "curves.png"
        )
        example = next((t for t in translations if t.hypotheses), None)
        if not self.trackers or example is None:
            return
        from nmt.plots import attention_figure, figure_pixels

        title = f"valid sentence 1, step {step}"
        panel = (title, example.hypotheses[0].attention, example.src_pieces, example.tgt_pieces)
        pixels = figure_pixels(attention_figure([panel]))
        for tracker in self.trackers:
            tracker.log_image("attention", pixels, step)
