"""Train a comparison's runs: `jobs` at a time, each `nmt train` in its own process with `threads`
threads, so runs never share a thread pool and one crash stops only its own run.

A run whose directory exists is resumed with the same config and overrides (`nmt train --resume`
accepts only budget changes, so a raised budget continues it and a finished run returns at once);
a missing one starts afresh. Each run's output goes to `<run dir>.log`, and its training
process's peak memory to `<run dir>/peak_memory.json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from nmt.compare.plan import Plan, Run
from nmt.fileio import atomic_write_text
from nmt.jsonvalues import NUMBER, read_json
from nmt.rundir import CONFIG

PEAK_MEMORY = "peak_memory.json"  # in the run's folder, beside what nmt train writes


@dataclass
class Outcome:
    run: Run
    code: int
    summary: str  # the last line nmt train printed: its final line, or its error

    @property
    def log(self) -> Path:
        return log_path(self.run)


def log_path(run: Run) -> Path:
    return run.dir.with_name(run.dir.name + ".log")


def train_command(plan: Plan, run: Run) -> list[str]:
    sets = [x for o in run.overrides(plan.common) for x in ("--set", o)]
    where = ["--resume", str(run.dir)] if (run.dir / CONFIG).is_file() else ["--output", str(run.dir)]
    plugins = [x for p in plan.plugins for x in ("--plugin", p)]
    return [sys.executable, "-m", "nmt", "train", "--config", plan.config, *sets, *plugins, *where, "--quiet"]


def thread_env(threads: int) -> dict[str, str]:
    return os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def read_peak(run: Run) -> float | None:
    """The most memory (MiB resident) the run's training process held, over every resume."""
    path = run.dir / PEAK_MEMORY
    return read_json(path, {"peak_rss_mib": NUMBER})["peak_rss_mib"] if path.is_file() else None


def watch_peak(proc: subprocess.Popen) -> float | None:
    """The child's peak resident memory in MiB until it exits, read twice a second from VmHWM:
    its own address space's high-water mark, which exec starts afresh (ru_maxrss would carry the
    parent's over). None where there is no /proc (not Linux)."""
    status, peak = Path(f"/proc/{proc.pid}/status"), None
    while proc.poll() is None:
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024
        time.sleep(0.5)
    return peak


def train_one(plan: Plan, run: Run, threads: int) -> Outcome:
    run.dir.parent.mkdir(parents=True, exist_ok=True)
    with log_path(run).open("a", encoding="utf-8") as log:
        proc = subprocess.Popen(
            train_command(plan, run), stdout=log, stderr=subprocess.STDOUT, env=thread_env(threads)
        )
        peak = watch_peak(proc)
    if peak is not None and run.dir.is_dir():
        peak = max(peak, read_peak(run) or 0.0)
        atomic_write_text(run.dir / PEAK_MEMORY, json.dumps({"peak_rss_mib": round(peak, 1)}) + "\n")
    lines = log_path(run).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return Outcome(run, proc.returncode, lines[-1] if lines else "")


def train_all(plan: Plan, jobs: int, threads: int, say: Callable[[str], None]) -> list[Outcome]:
    """Train (or resume, or skip) every run of the plan, seed by seed (an interrupted comparison
    has every variant's first seeds, not all seeds of some); `say` gets a line per finished run."""
    runs, done, lock = sorted(plan.runs, key=lambda r: plan.seeds.index(r.seed)), [0], threading.Lock()

    def one(run: Run) -> Outcome:
        outcome = train_one(plan, run, threads)
        with lock:
            done[0] += 1
            state = "ok" if outcome.code == 0 else f"FAILED (exit {outcome.code}; see {outcome.log})"
            say(f"[{done[0]}/{len(runs)}] {run.variant.name}, seed {run.seed}: {state}: {outcome.summary}")
        return outcome

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, runs))
