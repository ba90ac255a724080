"""Teacher-forced training with validation BLEU, best/last checkpoints and resumable state."""

from __future__ import annotations

import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from nmt.checkpoint import BEST, LAST, load_checkpoint, save_checkpoint
from nmt.config import Config, load_config
from nmt.data.batching import Example, collate, encode_pairs, filter_long, length_grouped_batches
from nmt.data.sources import load_split
from nmt.data.tokenizer import PAD, TokenizerPair
from nmt.decode.translator import Translator
from nmt.errors import NMTError
from nmt.evaluate.scoring import EvalOptions, evaluate
from nmt.fileio import atomic_write_text, read_lines
from nmt.model.seq2seq import Seq2Seq, count_parameters
from nmt.train.device import Precision, resolve_device

# Keys that may change when a run is resumed: budgets and reporting, nothing that alters the maths.
RESUMABLE_CHANGES = {"train.max_steps", "train.max_epochs", "train.log_every", "train.valid_every"}


@dataclass
class Progress:
    """Everything besides weights that a resumed run needs to continue where it stopped."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already consumed
    best_bleu: float = -1.0
    elapsed: float = 0.0  # training wall-clock seconds before this session


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    best_bleu: float
    last_valid: dict


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, quiet: bool = False, resume: bool = False):
        self.cfg, self.run_dir, self.quiet = cfg, Path(run_dir), quiet
        self.device = resolve_device(cfg.train.device)
        self.precision = Precision(self.device)
        torch.manual_seed(cfg.train.seed)
        random.seed(cfg.train.seed)
        self.progress = Progress()
        self.session_start = time.perf_counter()
        checkpoint = load_checkpoint(self.run_dir / "checkpoints" / LAST) if resume else None

        train_pairs = load_split(cfg.data, "train")
        self.valid_pairs = load_split(cfg.data, "valid")
        if checkpoint:
            self.tok = checkpoint.tokenizers
        else:
            self.tok = TokenizerPair.train(train_pairs, cfg.tokenizer)
        encoded = encode_pairs(train_pairs, self.tok)
        self.train_examples: list[Example] = filter_long(encoded, cfg.data.max_len)
        dropped = len(encoded) - len(self.train_examples)
        if not self.train_examples:
            raise NMTError(
                f"data: no training pair left after dropping pairs over {cfg.data.max_len} subwords"
            )
        self.valid_examples = encode_pairs(self.valid_pairs, self.tok)

        self.model = Seq2Seq(cfg.model, len(self.tok.src), len(self.tok.tgt)).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.train.lr)
        if checkpoint:
            self.model.load_state_dict(checkpoint.model.state_dict())
            self.optimizer.load_state_dict(checkpoint.state["optimizer"])
            self.precision.scaler.load_state_dict(checkpoint.state["scaler"])
            self.progress = Progress(**checkpoint.state["progress"])
            torch.set_rng_state(checkpoint.state["rng"]["torch"].cpu())
        self.log(
            f"{len(self.train_examples)} training pairs "
            f"({dropped} over {cfg.data.max_len} subwords dropped), "
            f"{len(self.valid_pairs)} validation pairs; vocabulary {len(self.tok.src)}/{len(self.tok.tgt)}"
        )
        self.log(
            f"model: {cfg.model.decoder.style} decoder, {cfg.model.attention.type} attention, "
            f"{count_parameters(self.model):,} parameters; device {self.device}, {self.precision.name}"
        )

    # -- reporting ------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        if not self.quiet:
            from tqdm.auto import tqdm

            tqdm.write(message, file=sys.stderr)

    def elapsed(self) -> float:
        """Wall-clock seconds of training so far, across resumed sessions."""
        return self.progress.elapsed + time.perf_counter() - self.session_start

    def record(self, entry: dict) -> None:
        entry["time"] = round(self.elapsed(), 2)
        with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    # -- the loop -------------------------------------------------------------------------------
    def loss(self, examples: list[Example]) -> tuple[torch.Tensor, int]:
        """Summed cross-entropy over the target tokens (padding ignored), and their count."""
        batch = collate(examples).to(self.device)
        with self.precision.autocast():
            logits, _ = self.model(batch.src, batch.src_len, batch.tgt_in)
        total = F.cross_entropy(
            logits.float().flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD, reduction="sum"
        )
        return total, batch.n_tgt_tokens

    def train(self) -> TrainResult:
        from tqdm.auto import tqdm

        cfg, p = self.cfg.train, self.progress
        bar = tqdm(
            total=cfg.max_steps,
            initial=p.step,
            desc="training",
            unit="step",
            disable=self.quiet or None,
            dynamic_ncols=True,
            mininterval=0.5,
            file=sys.stderr,
        )
        window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
        last_valid: dict = {}
        try:
            while not self._budget_spent():
                batches = length_grouped_batches(self.train_examples, cfg.batch_size, cfg.seed, p.epoch)
                while p.batch_in_epoch < len(batches) and not self._budget_spent():
                    self.model.train()
                    examples = [self.train_examples[i] for i in batches[p.batch_in_epoch]]
                    total, n_tokens = self.loss(examples)
                    self.optimizer.zero_grad(set_to_none=True)
                    self.precision.backward_and_step(total / n_tokens, self.model, self.optimizer, cfg.clip)
                    p.step += 1
                    p.batch_in_epoch += 1
                    window_loss += float(total.detach())
                    window_tokens += n_tokens
                    if p.step % cfg.log_every == 0:
                        elapsed = time.perf_counter() - window_start
                        loss = window_loss / window_tokens
                        self.record(
                            {
                                "step": p.step,
                                "epoch": p.epoch,
                                "loss": loss,
                                "ppl": math.exp(min(loss, 50)),
                                "lr": self.optimizer.param_groups[0]["lr"],
                                "tgt_tokens_per_s": window_tokens / elapsed,
                            }
                        )
                        bar.set_postfix(
                            loss=f"{loss:.3f}", tok_s=f"{window_tokens / elapsed:.0f}", refresh=False
                        )
                        window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
                    bar.update()
                    if p.step % cfg.valid_every == 0:
                        last_valid = self.validate()
                if p.batch_in_epoch >= len(batches):
                    p.epoch, p.batch_in_epoch = p.epoch + 1, 0
        except KeyboardInterrupt:
            bar.close()
            self.save(LAST)
            print(
                f"interrupted at step {p.step}; continue with: nmt train --resume {self.run_dir}",
                file=sys.stderr,
            )
            raise SystemExit(0) from None
        bar.close()
        if not last_valid or last_valid["step"] != p.step:
            last_valid = self.validate()
        return TrainResult(self.run_dir, p.step, p.best_bleu, last_valid)

    def _budget_spent(self) -> bool:
        cfg, p = self.cfg.train, self.progress
        return p.step >= cfg.max_steps or bool(cfg.max_epochs and p.epoch >= cfg.max_epochs)

    @torch.no_grad()
    def validate(self) -> dict:
        self.model.eval()
        total, tokens = 0.0, 0
        for start in range(0, len(self.valid_examples), self.cfg.decode.batch_size):
            loss, n = self.loss(self.valid_examples[start : start + self.cfg.decode.batch_size])
            total, tokens = total + float(loss), tokens + n
        translator = Translator(self.model, self.tok, self.cfg.decode, self.device)
        hyps = [t.text for t in translator.translate([s for s, _ in self.valid_pairs])]
        report = evaluate(
            {"valid": hyps}, [[t for _, t in self.valid_pairs]], EvalOptions(bootstrap=0)
        ).systems[0]
        p = self.progress
        atomic_write_text(self.run_dir / "valid" / f"step-{p.step}.txt", "".join(h + "\n" for h in hyps))
        entry = {
            "step": p.step,
            "epoch": p.epoch,
            "valid_loss": total / tokens,
            "valid_ppl": math.exp(min(total / tokens, 50)),
            "valid_bleu": report.scores["BLEU"],
            "valid_chrf": report.scores["chrF"],
            "valid_exact_match": report.exact_match,
        }
        self.record(entry)
        improved = entry["valid_bleu"] > p.best_bleu
        if improved:
            p.best_bleu = entry["valid_bleu"]
        self.save(LAST)
        if improved:
            self.save(BEST)
        self.log(
            f"step {p.step}: valid loss {entry['valid_loss']:.3f} ppl {entry['valid_ppl']:.2f} "
            f"BLEU {entry['valid_bleu']:.2f} exact {100 * report.exact_match:.1f}%"
            + (" (best)" if improved else "")
        )
        return entry

    def save(self, name: str) -> None:
        save_checkpoint(
            self.run_dir / "checkpoints" / name,
            self.cfg,
            self.model,
            self.tok,
            optimizer=self.optimizer.state_dict(),
            scaler=self.precision.scaler.state_dict(),
            progress=vars(self.progress) | {"elapsed": self.elapsed()},
            rng={"torch": torch.get_rng_state()},
        )


def prepare_run_dir(run_dir: Path, cfg: Config) -> None:
    """A new run directory: refuse one that already holds a run, never overwrite it."""
    if (run_dir / "config.yaml").exists():
        raise NMTError(
            f"{run_dir} already holds a run; continue it with --resume {run_dir} or choose another --out"
        )
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", cfg.to_yaml())


def resume_config(run_dir: Path, config: str | None, overrides: list[str]) -> Config:
    """The run's own config, with changes allowed only in budgets and reporting."""
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file() or not (run_dir / "checkpoints" / LAST).is_file():
        raise NMTError(f"{run_dir}: nothing to resume (no config.yaml or checkpoints/{LAST})")
    saved = load_config(saved_path)
    wanted = load_config(config or saved_path, overrides)
    changed = sorted(
        k for k, v in _flatten(wanted.to_dict()).items() if _flatten(saved.to_dict()).get(k) != v
    )
    refused = [k for k in changed if k not in RESUMABLE_CHANGES]
    if refused:
        raise NMTError(
            f"cannot resume {run_dir} with a changed {', '.join(refused)} "
            f"(only {', '.join(sorted(RESUMABLE_CHANGES))} may change)"
        )
    if changed:
        atomic_write_text(saved_path, wanted.to_yaml())
    return wanted


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "hf_data_files":
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def train(
    config: str | None, overrides: list[str], out: Path | None, resume: Path | None, quiet: bool
) -> TrainResult:
    """`nmt train`: a new run in `out`, or the continuation of the run in `resume`."""
    if resume:
        cfg = resume_config(Path(resume), config, overrides)
        run_dir = Path(resume)
    else:
        if config is None:
            raise NMTError("train: give --config FILE (or --resume RUN_DIR)")
        cfg = load_config(config, overrides)
        run_dir = Path(out) if out else Path("runs") / Path(config).stem
        prepare_run_dir(run_dir, cfg)
    return Trainer(cfg, run_dir, quiet=quiet, resume=bool(resume)).train()


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in read_lines(Path(run_dir) / "metrics.jsonl") if line.strip()]
