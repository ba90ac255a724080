"""What `nmt compare` trains: variants of one config (named systems and/or the product of --vary
lists) times seeds, each run with its own directory, all under one budget.

Light on purpose (no torch): planning and checking every variant's config happens before a
single run starts, so a typo in the tenth variant costs nothing.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nmt.config import Config, load_config
from nmt.errors import NMTError

BUDGET_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600}


@dataclass(frozen=True)
class Variant:
    """One system of the comparison: a name and the `--set` overrides that make it."""

    name: str
    overrides: tuple[str, ...]

    @property
    def slug(self) -> str:
        """The variant's folder name: its name with anything but letters, digits, '.', '_' and '-'
        replaced, so every name maps to one safe, readable path."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.name).strip("-") or "variant"


@dataclass(frozen=True)
class Run:
    variant: Variant
    seed: int
    dir: Path

    def overrides(self, common: tuple[str, ...]) -> list[str]:
        """Every override of the run, in order: the common ones, the variant's, its seed."""
        return [*common, *self.variant.overrides, f"train.seed={self.seed}"]


@dataclass(frozen=True)
class Plan:
    config: str
    common: tuple[str, ...]  # --set overrides and the budget, shared by every run
    variants: tuple[Variant, ...]
    seeds: tuple[int, ...]
    runs_dir: Path  # where every run trains, in VARIANT/seedS
    plugins: tuple[str, ...] = ()  # --plugin files, given to every run beside the config's own

    @property
    def runs(self) -> list[Run]:
        return [
            Run(v, seed, self.runs_dir / v.slug / f"seed{seed}") for v in self.variants for seed in self.seeds
        ]

    def run_config(self, run: Run) -> Config:
        return load_config(self.config, run.overrides(self.common), [Path(p) for p in self.plugins])


def parse_budget(text: str) -> tuple[str, ...]:
    """'20m', '90s', '1.5h' -> a wall-clock budget (train.max_time); '3000' or '3000steps' -> a
    step budget (train.max_steps). Each lifts the config's other limits, so that it alone decides
    (a step budget cut short by the config's max_time would compare unequal steps)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|steps?)?\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise NMTError(
            f"--budget {text!r}: expected a time such as 20m, 90s or 1.5h, or steps such as 3000steps"
        )
    value, unit = float(match.group(1)), match.group(2) or "steps"
    if unit.startswith("step"):
        if not value.is_integer():
            raise NMTError(f"--budget {text!r}: a step budget is a whole number of steps")
        return (f"train.max_steps={int(value)}", "train.max_time=0", "train.max_epochs=0")
    seconds = value * BUDGET_UNITS[unit]
    return (f"train.max_time={seconds:g}", "train.max_steps=100000000", "train.max_epochs=0")


def parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise NMTError(f"--seeds {text!r}: expected comma-separated integers such as 1,2,3") from None
    if len(set(seeds)) != len(seeds):
        raise NMTError(f"--seeds {text!r}: a seed is listed twice")
    return seeds


def parse_vary(items: Sequence[str]) -> list[Variant]:
    """`--vary key=a,b --vary other=x,y` -> the product of the lists, one variant per combination,
    named by the last part of each key (`type=dot, input_feeding=false`)."""
    axes = []
    for item in items:
        key, sep, values = item.partition("=")
        choices = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not choices:
            raise NMTError(
                f"--vary {item!r}: expected KEY=V1,V2,... such as model.attention.type=dot,general"
            )
        axes.append([(key.strip(), value) for value in choices])
    return [
        Variant(
            ", ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in combo),
            tuple(f"{key}={value}" for key, value in combo),
        )
        for combo in itertools.product(*axes)
    ]


def parse_system(item: str) -> Variant:
    """`--system 'NAME: key=value, key=value'` -> a named variant (an empty list: the config as is)."""
    name, sep, body = item.partition(":")
    overrides = tuple(part.strip() for part in body.split(",") if part.strip())
    if not sep or not name.strip() or any("=" not in o for o in overrides):
        raise NMTError(
            f"--system {item!r}: expected 'NAME: KEY=VALUE, KEY=VALUE' such as "
            "'bahdanau: model.decoder.style=bahdanau, model.attention.type=bahdanau'"
        )
    return Variant(name.strip(), overrides)


def plan(
    config: str,
    sets: Sequence[str],
    systems: Sequence[str],
    vary: Sequence[str],
    seeds: str,
    budget: str | None,
    runs_dir: Path,
    plugins: Sequence[Path] = (),
) -> Plan:
    """The comparison's runs, every variant's config checked (unknown keys, bad values) up front;
    no `budget`: the config's own."""
    named = [parse_system(s) for s in systems] or [Variant("", ())]
    varied = parse_vary(vary) or [Variant("", ())]
    variants = tuple(
        Variant(", ".join(n for n in (a.name, b.name) if n), a.overrides + b.overrides)
        for a, b in itertools.product(named, varied)
    )
    if len(variants) < 2:
        raise NMTError("nothing to compare: give at least two variants with --system and/or --vary")
    slugs = [v.slug for v in variants]
    if len(set(slugs)) != len(slugs):
        raise NMTError(
            f"two variants share the folder name {max(slugs, key=slugs.count)!r}; rename a --system"
        )
    result = Plan(
        config,
        (*sets, *(parse_budget(budget) if budget else ())),
        variants,
        parse_seeds(seeds),
        Path(runs_dir),
        tuple(str(Path(p).resolve()) for p in plugins),
    )
    for run in result.runs[:: len(result.seeds)]:  # each variant's first run
        try:
            result.run_config(run)
        except NMTError as e:
            raise NMTError(f"variant {run.variant.name!r}: {e}") from None
    return result


def check_baseline(plan: Plan, baseline: str | None) -> str:
    """The variant the others are tested against: `baseline`, one of the plan's, or the first."""
    names = [v.name for v in plan.variants]
    if baseline is not None and baseline not in names:
        raise NMTError(
            f"--baseline {baseline!r}: not a variant; the variants are {', '.join(map(repr, names))}"
        )
    return baseline or names[0]
