"""Train a comparison's runs: `jobs` at a time, each `nmt train` in its own process with `threads`
threads, so runs never share a thread pool and one crash stops only its own run.

A run whose directory exists is resumed with the same config and overrides (`nmt train --resume`
accepts only budget changes, so a raised budget continues it and a finished run returns at once);
a missing one starts afresh. Each run's output goes to `<run dir>.log`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from nmt.compare.plan import Plan, Run
from nmt.rundir import CONFIG


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
    return [sys.executable, "-m", "nmt", "train", "--config", plan.config, *sets, *where, "--quiet"]


def thread_env(threads: int) -> dict[str, str]:
    return os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def train_one(plan: Plan, run: Run, threads: int) -> Outcome:
    run.dir.parent.mkdir(parents=True, exist_ok=True)
    with log_path(run).open("a", encoding="utf-8") as log:
        proc = subprocess.run(
            train_command(plan, run),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=thread_env(threads),
            check=False,
        )
    lines = log_path(run).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return Outcome(run, proc.returncode, lines[-1] if lines else "")


def train_all(plan: Plan, jobs: int, threads: int, say: Callable[[str], None]) -> list[Outcome]:
    """Train (or resume, or skip) every run of the plan; `say` gets one line per finished run."""
    runs, done, lock = plan.runs, [0], threading.Lock()

    def one(run: Run) -> Outcome:
        outcome = train_one(plan, run, threads)
        with lock:
            done[0] += 1
            state = "ok" if outcome.code == 0 else f"FAILED (exit {outcome.code}; see {outcome.log})"
            say(f"[{done[0]}/{len(runs)}] {run.variant.name}, seed {run.seed}: {state}: {outcome.summary}")
        return outcome

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, runs))
