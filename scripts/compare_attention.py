"""The study "Bahdanau or Luong?": every attention trained on the same data, size and budget, then
scored, timed and reported in docs/study.md (`make study` runs the quick budget).

    python scripts/compare_attention.py                          # quick budget, Multi30k de-en
    python scripts/compare_attention.py --budget full            # the committed report
    python scripts/compare_attention.py --seeds 1,2,3            # variance over seeds
    python scripts/compare_attention.py --config iwslt-luong-dot.yaml --set train.device=cuda
    python scripts/compare_attention.py --systems bahdanau,luong-general --steps 500

Each system is the base config (`--config`) with its decoder and attention replaced, so model
size, data, optimiser, seed and budget are shared. Runs go to --out/<system>-seed<S>-<budget>/ and
are reused when complete (a rerun only redoes what is missing): delete a run directory to
retrain it. Significance is a paired bootstrap against the paper's Bahdanau model (the first
seed's beam outputs).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmt.errors import NMTError  # noqa: E402  (light: no torch)

MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
DEFAULT_CONFIG = "multi30k-luong-dot.yaml"


@dataclass(frozen=True)
class System:
    label: str
    why: str  # what the system stands for, for the report
    overrides: tuple[str, ...]


def luong(attention: str, feeding: bool = True) -> tuple[str, ...]:
    return (
        "model.decoder.style=luong",
        f"model.decoder.input_feeding={str(feeding).lower()}",
        "model.decoder.bridge=linear",
        f"model.attention.type={attention}",
    )


SYSTEMS = {
    "bahdanau": System(
        "Bahdanau (paper)",
        "additive score, attends with s_{t-1} before the RNN step, context fed to the RNN and output",
        (
            "model.decoder.style=bahdanau",
            "model.decoder.input_feeding=false",
            "model.decoder.bridge=backward",
            "model.attention.type=bahdanau",
        ),
    ),
    "none": System(
        "no attention", "the encoder-decoder baseline: a bridge from the encoder only", luong("none", False)
    ),
    "additive-luong-order": System(
        "additive, Luong order",
        "Bahdanau's score inside Luong's step with input feeding: what OpenNMT-py and JoeyNMT call bahdanau",
        luong("bahdanau"),
    ),
    "luong-dot": System("Luong dot", "score h_t . h_s, input feeding", luong("dot")),
    "luong-general": System("Luong general", "score h_t W h_s, input feeding", luong("general")),
    "luong-concat": System("Luong concat", "score v tanh(W[h_t; h_s]), input feeding", luong("concat")),
    "luong-general-no-if": System(
        "Luong general, no IF",
        "general without input feeding: the parallel training path",
        luong("general", False),
    ),
    "local-p": System(
        "Luong local-p", "predicted window, Gaussian-weighted, input feeding", luong("local_p")
    ),
    "multihead": System(
        "multi-head (4)", "4 scaled-dot heads over projections, input feeding", luong("multihead")
    ),
}
BASELINE = "bahdanau"


@dataclass(frozen=True)
class Budget:
    steps: int
    valid_every: int


BUDGETS = {"quick": Budget(steps=200, valid_every=100), "full": Budget(steps=1000, valid_every=200)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=DEFAULT_CONFIG, help="base config (a file or a built-in name)")
    ap.add_argument("--data-dir", help="data.dir of the base config (default for Multi30k: ../shared)")
    ap.add_argument("--budget", choices=sorted(BUDGETS), default="quick")
    ap.add_argument("--steps", type=int, help="training steps per system (overrides the budget's)")
    ap.add_argument("--minutes", type=float, help="equal wall-clock budget per system instead of steps")
    ap.add_argument("--valid-every", type=int, help="validation interval in steps")
    ap.add_argument("--seeds", default="1", help="comma-separated training seeds")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"a subset of: {', '.join(SYSTEMS)}")
    ap.add_argument("--beam", type=int, default=5, help="beam width of the beam-search column")
    ap.add_argument("--buckets", default="auto", help="reference-length bucket bounds, or auto (quantiles)")
    ap.add_argument("--sentence", type=int, help="test sentence (1-based) for the heatmaps")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra config override")
    ap.add_argument("--out", default="study-runs", help="where the runs go")
    ap.add_argument("--report", default="docs/study.md", help="the report; its PNGs go beside it")
    ap.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap resamples")
    args = ap.parse_args(argv)
    unknown = [s for s in args.systems.split(",") if s not in SYSTEMS]
    if unknown:
        raise NMTError(f"--systems: unknown {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
    args.system_names = [s for s in SYSTEMS if s in args.systems.split(",")]  # baseline first
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise NMTError(f"--seeds {args.seeds}: expected integers such as 1,2,3") from None
    budget = BUDGETS[args.budget]
    args.steps = args.steps or budget.steps
    args.valid_every = args.valid_every or (budget.valid_every if not args.minutes else 200)
    if args.data_dir is None and args.config == DEFAULT_CONFIG:
        args.data_dir = str(MULTI30K)
    return args


def budget_tag(args) -> str:
    return f"{args.minutes:g}min" if args.minutes else f"{args.steps}steps"


def run_overrides(args, name: str, seed: int) -> list[str]:
    budget = (
        [f"train.max_time={args.minutes * 60:g}", "train.max_steps=1000000000"]
        if args.minutes
        else [f"train.max_steps={args.steps}"]
    )
    data = [f"data.dir={args.data_dir}"] if args.data_dir else []
    log_every = max(1, min(50, args.valid_every // 2))
    return [
        *data,
        *SYSTEMS[name].overrides,
        *budget,
        f"train.seed={seed}",
        f"train.valid_every={args.valid_every}",
        f"train.log_every={log_every}",
        "train.patience=0",
        "train.average_last=0",
        "decode.beam=1",  # validation decodes greedily; the test decodes both ways below
        *args.overrides,
    ]


def train_run(args, name: str, seed: int) -> Path:
    """Train one system (or reuse its finished run) and return the run directory."""
    from nmt.rundir import LAST
    from nmt.train.trainer import train

    run_dir = Path(args.out) / f"{name}-seed{seed}-{budget_tag(args)}"
    done = run_dir / "done.json"
    if done.is_file():
        print(f"[study] {run_dir}: finished earlier, reused", file=sys.stderr)
        return run_dir
    resume = run_dir if (run_dir / "checkpoints" / LAST).is_file() else None
    print(f"[study] training {name} (seed {seed}) in {run_dir}", file=sys.stderr)
    result = train(args.config, run_overrides(args, name, seed), run_dir, resume, quiet=False)
    done.write_text(json.dumps({"steps": result.steps, "stopped": result.stopped}) + "\n")
    return run_dir


def decode_test(run_dir: Path, translator, sources: list[str], beam: int) -> dict:
    """Translate the test sources with the run's best checkpoint; cached in the run directory."""
    cache = run_dir / f"test-beam{beam}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    from nmt.fileio import atomic_write_text

    start = time.perf_counter()
    hyps = [t.text for t in translator.configured(beam=beam).translate(sources)]
    result = {"hyps": hyps, "sent_per_s": len(sources) / (time.perf_counter() - start)}
    atomic_write_text(cache, json.dumps(result) + "\n")
    return result


def run_facts(run_dir: Path) -> dict:
    """Steps, training time and speed (median logged window but the first) and the curves."""
    from nmt.rundir import read_metrics

    metrics = read_metrics(run_dir)
    rates = [m["tgt_tokens_per_s"] for m in metrics if "tgt_tokens_per_s" in m]
    rates = rates[1:] or rates
    return {
        "steps": max(m["step"] for m in metrics),
        "train_time_s": max(m["time"] for m in metrics),
        "tok_per_s": statistics.median(rates) if rates else float("nan"),
        "metrics": metrics,
    }


def auto_buckets(refs: list[str]) -> tuple[int, ...]:
    """Bounds at the quartiles and the 95th percentile of reference length: every bucket filled."""
    lengths = sorted(len(r.split()) for r in refs)
    picks = [lengths[min(len(lengths) - 1, int(q * len(lengths)))] for q in (0.25, 0.5, 0.75, 0.95)]
    return tuple(sorted({p for p in picks if p < lengths[-1]})) or (lengths[-1],)


def choose_sentence(args, sources: list[str]) -> int:
    """The heatmap sentence (0-based): --sentence, else the first of 10-14 source words."""
    if args.sentence:
        return args.sentence - 1
    return next((i for i, s in enumerate(sources) if 10 <= len(s.split()) <= 14), 0)


def heatmap_panel(translator, sentence: str, title: str):
    (t,) = translator.configured(beam=1).translate([sentence])
    return (title, t.hypotheses[0].attention, t.src_pieces, t.tgt_pieces)


def mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def machine() -> str:
    import torch

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or platform.machine(),
    )
    device = "CUDA " + torch.cuda.get_device_name() if torch.cuda.is_available() else f"{cpu}"
    threads = torch.get_num_threads()
    return f"{device}, torch {torch.__version__}, {threads} threads, Python {platform.python_version()}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from nmt.config import load_config
    from nmt.data.sources import load_split
    from nmt.decode.translator import load_translator
    from nmt.evaluate.scoring import EvalOptions, evaluate, parse_buckets
    from nmt.model.seq2seq import count_parameters

    base = load_config(args.config, run_overrides(args, args.system_names[0], args.seed_list[0]))
    if (
        base.data.format == "text"
        and not (Path(base.data.dir) / f"{base.data.train}.{base.data.src_lang}").is_file()
    ):
        raise NMTError(
            f"no training data in {base.data.dir}; give --data-dir DIR (Multi30k: ../shared/data/multi30k)"
        )
    test = load_split(base.data, "test")
    sources, refs = [s for s, _ in test], [t for _, t in test]
    device = base.train.device
    buckets = auto_buckets(refs) if args.buckets == "auto" else parse_buckets(args.buckets)
    index = choose_sentence(args, sources)
    started = time.perf_counter()

    results: dict[str, list[dict]] = {}  # system -> one entry per seed
    panels = []  # the first seed's attention on the heatmap sentence
    for name in args.system_names:
        results[name] = []
        for seed in args.seed_list:
            run_dir = train_run(args, name, seed)
            translator = load_translator([run_dir], {}, device)  # one load for every use below
            greedy = decode_test(run_dir, translator, sources, 1)
            beam = decode_test(run_dir, translator, sources, args.beam)
            results[name].append(
                {
                    "greedy": greedy,
                    "beam": beam,
                    "parameters": count_parameters(translator.model),
                    **run_facts(run_dir),
                }
            )
            if seed == args.seed_list[0] and name != "none":
                panels.append(heatmap_panel(translator, sources[index], SYSTEMS[name].label))

    beam_report = None  # the first seed's beam outputs: BLEU by length and p-values
    for kind in ("greedy", "beam"):
        for r in range(len(args.seed_list)):
            systems = {name: results[name][r][kind]["hyps"] for name in args.system_names}
            first_beam = kind == "beam" and r == 0
            opts = EvalOptions(buckets=buckets, bootstrap=args.bootstrap if first_beam else 0)
            report = evaluate(systems, [refs], opts)
            for name, system in zip(args.system_names, report.systems, strict=True):
                results[name][r][f"{kind}_scores"] = system.scores
            beam_report = report if first_beam else beam_report
    example = (index, sources[index], refs[index])
    write_report(args, results, beam_report, panels, example, base.model.init, time.perf_counter() - started)
    return 0


# -- the report -------------------------------------------------------------------------------------


def write_report(
    args, results: dict, beam_report, panels: list, example: tuple, init: str, seconds: float
) -> None:
    from nmt.fileio import atomic_write_text
    from nmt.plots import attention_heatmaps, bleu_by_length_chart, training_curves

    report_path = Path(args.report)
    figures = report_path.parent / report_path.stem
    figures.mkdir(parents=True, exist_ok=True)
    names = args.system_names
    label = {n: SYSTEMS[n].label for n in names}

    training_curves({label[n]: results[n][0]["metrics"] for n in names}, figures / "curves.png")
    first = dict(zip(names, beam_report.systems, strict=True))
    for system in beam_report.systems:
        system.name = label[system.name]
    bleu_by_length_chart(beam_report, figures / "bleu-by-length.png")
    if panels:
        attention_heatmaps(panels, figures / "attention.png", columns=2)

    summary = {
        n: {
            "label": label[n],
            "parameters": results[n][0]["parameters"],
            "tok_per_s": statistics.mean(r["tok_per_s"] for r in results[n]),
            "greedy_sent_per_s": statistics.mean(r["greedy"]["sent_per_s"] for r in results[n]),
            "beam_sent_per_s": statistics.mean(r["beam"]["sent_per_s"] for r in results[n]),
            "bleu_greedy": [r["greedy_scores"]["BLEU"] for r in results[n]],
            "bleu_beam": [r["beam_scores"]["BLEU"] for r in results[n]],
            "chrf_greedy": [r["greedy_scores"]["chrF"] for r in results[n]],
            "chrf_beam": [r["beam_scores"]["chrF"] for r in results[n]],
            "p_bleu_beam": first[n].p_values.get("BLEU"),
            "p_chrf_beam": first[n].p_values.get("chrF"),
            "buckets": [(b.label, b.sentences, b.bleu) for b in first[n].buckets],
            "train_time_s": statistics.mean(r["train_time_s"] for r in results[n]),
            "same_outputs_as": [
                m
                for m in names[: names.index(n)]
                if results[m][0]["beam"]["hyps"] == results[n][0]["beam"]["hyps"]
            ],
            "steps": results[n][0]["steps"],
        }
        for n in names
    }
    command = "python scripts/compare_attention.py " + shlex.join(sys.argv[1:])
    text = render(args, summary, beam_report, example, init, command, bool(panels))
    atomic_write_text(report_path, text)
    atomic_write_text(figures / "results.json", json.dumps(summary, indent=1) + "\n")
    print(f"[study] wrote {report_path} and {figures}/ in {seconds / 60:.1f} min", file=sys.stderr)


def render(args, s: dict, beam_report, example: tuple, init: str, command: str, heatmaps: bool) -> str:
    index, sentence, reference = example
    names = list(s)
    base = BASELINE if BASELINE in s else names[0]
    seeds = len(args.seed_list)
    fig_dir = Path(args.report).stem
    budget = (
        f"{args.minutes:g} minutes of training" if args.minutes else f"{args.steps} steps of 64 sentences"
    )
    lines = [
        "# Bahdanau or Luong? Every attention on the same data, size and budget",
        "",
        f"Generated by `{command}` on {date.today().isoformat()}, after "
        f"{sum(r['train_time_s'] for r in s.values()) * seeds / 60:.0f} minutes of training in all. "
        "Do not edit by hand: rerun the command.",
        "",
        f"- Data: `{args.config}` ({args.data_dir or 'its data.dir'}); scores on its test split, "
        f"{beam_report.sentences} sentences, sacreBLEU `{beam_report.signatures['BLEU']}`.",
        f"- Budget: {budget} per system; seed{'s' if seeds > 1 else ''} {args.seeds} "
        + (
            "(mean ± standard deviation over seeds)."
            if seeds > 1
            else "(one seed: differences below about 1 BLEU are noise; see p)."
        ),
        f"- Model shared by all: the base config's sizes, initialisation `model.init: {init}`; the "
        f"checkpoint with the best validation BLEU (greedy) is tested. Beam {args.beam} uses the "
        "config's length penalty.",
        f"- Machine: {machine()}.",
        f"- p: paired bootstrap ({args.bootstrap} resamples) of beam-{args.beam} BLEU against "
        f"{s[base]['label']}; below 0.05 the difference is unlikely to be chance.",
        "",
        "## Quality, speed and size",
        "",
        f"| system | params | train tok/s | BLEU greedy | BLEU beam {args.beam} | chrF greedy "
        f"| chrF beam {args.beam} | p vs {s[base]['label']} | greedy sent/s | beam sent/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        r = s[n]
        p = "–" if n == base else f"{r['p_bleu_beam']:.3f}"
        lines.append(
            f"| {r['label']} | {r['parameters'] / 1e6:.2f}M | {r['tok_per_s']:,.0f} "
            f"| {mean_sd(r['bleu_greedy'])} "
            f"| **{mean_sd(r['bleu_beam'])}** | {mean_sd(r['chrf_greedy'])} "
            f"| {mean_sd(r['chrf_beam'])} | {p} "
            f"| {r['greedy_sent_per_s']:.0f} | {r['beam_sent_per_s']:.0f} |"
        )
    lines += ["", "What each system is:", ""]
    lines += [f"- **{SYSTEMS[n].label}** (`{n}`): {SYSTEMS[n].why}." for n in names]

    buckets = s[names[0]]["buckets"]
    lines += [
        "",
        f"## BLEU by reference length (beam {args.beam}, first seed)",
        "",
        "Each cell is a corpus BLEU over that bucket's sentences alone; the count is under the bucket.",
        "",
        "| system | " + " | ".join(f"{lab} words (n={cnt})" for lab, cnt, _ in buckets) + " |",
        "|---|" + "---:|" * len(buckets),
    ]
    for n in names:
        lines.append(f"| {s[n]['label']} | " + " | ".join(_num(b) for _, _, b in s[n]["buckets"]) + " |")
    if "none" in s:
        lines += ["", "With and without attention, side by side (gain over no attention, in BLEU):", ""]
        lines += [
            "| system | " + " | ".join(lab for lab, _, _ in buckets) + " |",
            "|---|" + "---:|" * len(buckets),
        ]
        for n in names:
            if n != "none":
                gains = [
                    _num(b - a if a is not None and b is not None else None, signed=True)
                    for (_, _, a), (_, _, b) in zip(s["none"]["buckets"], s[n]["buckets"], strict=True)
                ]
                lines.append(f"| {s[n]['label']} | " + " | ".join(gains) + " |")
    lines += [
        "",
        "## What the numbers say",
        "",
        *findings(s, base, args.beam),
        "",
        "## Figures",
        "",
        f"![training curves]({fig_dir}/curves.png)",
        "",
        f"![BLEU by length]({fig_dir}/bleu-by-length.png)",
    ]
    if heatmaps:
        lines += [
            "",
            f"Attention of each system (greedy) on test sentence {index + 1}:",
            f"*{sentence}* (reference: *{reference}*).",
            "",
            f"![attention per system]({fig_dir}/attention.png)",
        ]
    lines += [
        "",
        "## Reproduce",
        "",
        "```",
        command,
        "```",
        "",
        "`make study` runs the quick budget; `--budget full`, `--steps`, `--minutes`, `--seeds` and "
        "`--systems` change it, `--config` runs it on other data (e.g. IWSLT on a GPU). Runs are kept "
        f"in `{args.out}/` and reused; the raw figures are in `{fig_dir}/results.json`.",
        "",
    ]
    return "\n".join(lines)


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def findings(s: dict, base: str, beam: int) -> list[str]:
    """Plain statements computed from the figures, so that they stay true when the run changes."""
    mean = {n: statistics.mean(r["bleu_beam"]) for n, r in s.items()}
    ranked = sorted(mean, key=mean.get, reverse=True)
    best = ranked[0]
    out = [
        f"- Best beam-{beam} BLEU: **{s[best]['label']}** with {mean[best]:.2f}; ranking: "
        + ", ".join(f"{s[n]['label']} {mean[n]:.2f}" for n in ranked)
        + "."
    ]
    significant = [n for n in s if n != base and (s[n]["p_bleu_beam"] or 1) < 0.05]
    if base in s:
        out.append(
            f"- Against {s[base]['label']} ({mean[base]:.2f}): "
            + (
                "significantly different (p < 0.05): "
                + ", ".join(f"{s[n]['label']} ({mean[n] - mean[base]:+.2f})" for n in significant)
                if significant
                else "no system differs significantly (p < 0.05)"
            )
            + "; the rest are within noise of it."
        )
    if "none" in s and best != "none":
        first = [
            (b, a) for (_, _, b), (_, _, a) in zip(s[best]["buckets"], s["none"]["buckets"], strict=True)
        ]
        filled = [(b, a) for b, a in first if b and a]  # filled buckets, both above 0 BLEU
        if len(filled) >= 2:
            (b0, a0), (b1, a1) = filled[0], filled[-1]
            verdict = (
                "Attention holds up better on long sentences"
                if b1 / b0 > a1 / a0
                else "Here attention does not hold up better on long sentences"
            )
            out.append(
                f"- {verdict}: from the shortest to the longest bucket, no attention keeps "
                f"{a1 / a0:.0%} of its BLEU ({a0:.2f} → {a1:.2f}) and {s[best]['label']} {b1 / b0:.0%} "
                f"({b0:.2f} → {b1:.2f})."
            )
    if "luong-general" in s and "luong-general-no-if" in s:
        g, n = s["luong-general"], s["luong-general-no-if"]
        out.append(
            f"- Input feeding: Luong general scores {mean['luong-general']:.2f} with it and "
            f"{mean['luong-general-no-if']:.2f} without, and trains at {g['tok_per_s']:,.0f} against "
            f"{n['tok_per_s']:,.0f} target tokens/s ({n['tok_per_s'] / g['tok_per_s']:.2f}x faster without: "
            "no input feeding lets the whole target sequence go through one LSTM call)."
        )
    if "additive-luong-order" in s and base == "bahdanau":
        out.append(
            f"- The same additive score in the two step orders: {mean['bahdanau']:.2f} in Bahdanau's "
            f"(attend with s_(t-1)) and {mean['additive-luong-order']:.2f} in Luong's (attend with h_t, "
            "input feeding): the order matters less than the name suggests"
            if abs(mean["bahdanau"] - mean["additive-luong-order"]) < 1
            else f"- The same additive score in the two step orders: {mean['bahdanau']:.2f} in Bahdanau's "
            f"and {mean['additive-luong-order']:.2f} in Luong's: the step order changes the result by "
            f"{mean['additive-luong-order'] - mean['bahdanau']:+.2f} BLEU"
        )
        out[-1] += "."
    sizes = [r["parameters"] for r in s.values()]
    for n, r in s.items():
        for m in r["same_outputs_as"]:
            why = (
                "Luong's concat score v.tanh(W[h_t; h_s]) splits into v.tanh(W_q h_t + W_k h_s), "
                "which is Bahdanau's additive score, and with one seed both start from the same weights"
                if {n, m} == {"luong-concat", "additive-luong-order"}
                else "under this config they compute the same function from the same initial weights"
            )
            out.append(
                f"- {s[m]['label']} and {r['label']} translate every test sentence identically: "
                f"they are one model. {why}."
            )
    fastest = max(s, key=lambda n: s[n]["tok_per_s"])
    slowest = min(s, key=lambda n: s[n]["tok_per_s"])
    out.append(
        f"- Speed: {s[fastest]['label']} trains fastest ({s[fastest]['tok_per_s']:,.0f} tok/s), "
        f"{s[slowest]['label']} slowest ({s[slowest]['tok_per_s']:,.0f}); model sizes range from "
        f"{min(sizes) / 1e6:.2f}M to {max(sizes) / 1e6:.2f}M "
        "parameters, so no system wins by size alone."
    )
    return out


if __name__ == "__main__":
    try:
        raise SystemExit(main(sys.argv[1:]))
    except NMTError as e:
        print(f"study: {e}", file=sys.stderr)
        raise SystemExit(2) from None
