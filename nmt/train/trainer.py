"""The training loop: teacher-forced cross-entropy, validation BLEU through the translate path,
checkpoints that are never half-written, and state complete enough to resume exactly."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nmt.allocator import describe as describe_allocator
from nmt.checkpoint import model_weights, read_checkpoint, save_checkpoint
from nmt.config import Config, load_config
from nmt.data.batching import EpochPlan, collate, length_grouped_batches
from nmt.data.cleaning import describe_dropped
from nmt.data.prepare import prepare, sampled_train
from nmt.data.tokenizer import TokenizerPair
from nmt.decode.translator import Translation, Translator
from nmt.device import resolve_device
from nmt.errors import NMTError
from nmt.evaluate.scoring import EvalOptions, evaluate
from nmt.fileio import atomic_copy, atomic_write_text
from nmt.model.linear import drop_prepacked
from nmt.model.seq2seq import Seq2Seq, count_parameters
from nmt.rundir import (
    BEST,
    CHECKPOINTS,
    CONFIG,
    LAST,
    METRICS,
    TRAIN_LOG,
    RunLock,
    check_new_run_dir,
    prepare_run_dir,
    read_metrics,
    resume_config,
)
from nmt.train import distributed
from nmt.train.checkpoints import CheckpointKeeper
from nmt.train.loss import TokenLoss, batch_loss
from nmt.train.precision import Precision
from nmt.train.schedule import Schedule, build_optimizer
from nmt.train.trackers import open_trackers

HIGHER_IS_BETTER = {"bleu": True, "ppl": False, "loss": False}


@dataclass
class Progress:
    """Everything besides weights that a resumed run needs to continue where it stopped."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already consumed
    elapsed: float = 0.0  # training wall-clock seconds before this session
    validations: list[tuple[int, float]] = field(default_factory=list)  # (step, metric value)
    best: float | None = None
    bad_validations: int = 0  # since the last improvement, for early stopping
    skipped_steps: int = 0  # AMP overflow steps the scaler skipped
    valid_seconds: float = 0.0  # wall-clock seconds spent validating, every session included
    finished: str = ""  # why the run ended, once it has: a resume then has nothing to do


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


def valid_sample(pairs: list, size: int, seed: int) -> list:
    """The validation pairs whose translations are scored: all of them, or `size` drawn once
    with `seed` and kept in their order, so that every validation of a run scores the same ones
    (a smaller, cheaper BLEU that still ranks checkpoints; the loss always uses every pair)."""
    if not size or size >= len(pairs):
        return pairs
    chosen = sorted(random.Random(seed).sample(range(len(pairs)), size))
    return [pairs[i] for i in chosen]


class Interrupted(Exception):  # noqa: N818 (a stop the user asked for, not an error)
    """Training stopped by a signal; last.pt holds the state to resume from (unless said otherwise)."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.exit_code = 128 + int(signum)  # 130 for SIGINT, 143 for SIGTERM, as shells report


@dataclass
class LogWindow:
    """Training NLL and target tokens since the last log line, and when the window started."""

    nll: float = 0.0
    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, nll: float, tokens: int) -> None:
        self.nll, self.tokens = self.nll + nll, self.tokens + tokens


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    best: float | None
    metric: str
    stopped: str  # why training ended
    last_valid: dict
    rank: int  # 0 for the process that reports under torchrun
    epochs: float = 0.0  # epochs trained, the current one counted in part
    seconds: float = 0.0  # wall-clock seconds of the run, validation included
    valid_seconds: float = 0.0  # of which validating

    def summary(self) -> str:
        """The one line `nmt train` ends with: the budget spent and what it bought."""
        best = "none" if self.best is None else f"{self.best:.2f}"
        share = self.valid_seconds / self.seconds if self.seconds else 0.0
        return (
            f"trained {self.steps} steps ({self.stopped}): {self.epochs:.2f} epochs in "
            f"{self.seconds:.0f} s, {share:.0%} of it validating; best valid {self.metric} {best}; "
            f"checkpoints in {self.run_dir / CHECKPOINTS}"
        )


class Trainer:
    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        quiet: bool = False,
        resume: bool = False,
        checkpoint: dict | None = None,
    ):
        """`resume` continues from the run's last.pt (`checkpoint`, when the caller has read it)."""
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.session_start = time.perf_counter()
        self.rank, self.world = distributed.rank_and_world()
        self.quiet = quiet or self.rank > 0
        self.device = resolve_device(distributed.local_device(cfg.train.device))
        self.precision = Precision(self.device, cfg.train.precision)
        torch.manual_seed(cfg.train.seed)
        self.generator = torch.Generator().manual_seed(cfg.train.seed + 1)  # teacher-forcing coins
        self.notes: list[str] = []  # logged when training starts: the run directory may not exist yet
        if resume and checkpoint is None:
            checkpoint = read_checkpoint(self.run_dir / CHECKPOINTS / LAST)
        resumed_tok = TokenizerPair.from_state(checkpoint["tokenizers"]) if checkpoint else None

        # Under torchrun, rank 0 builds the data cache while the others wait, then they read it.
        if self.rank > 0:
            distributed.barrier()
        started = time.perf_counter()
        data = prepare(cfg, ("valid",), resumed_tok, progress=not self.quiet)
        self.data_seconds: float | None = time.perf_counter() - started  # logged at the first step
        if self.rank == 0:
            distributed.barrier()
        self.tok, self.train_data = data.tokenizers, data.train
        self.valid_data, self.valid_pairs = data.held_out["valid"].corpus, data.held_out["valid"].pairs
        self.valid_translated = valid_sample(self.valid_pairs, cfg.train.valid_subset, cfg.train.seed)
        self.sampled_epoch: int | None = None  # the epoch whose subword sample train_data holds

        self.model = Seq2Seq(cfg.model, len(self.tok.src), len(self.tok.tgt)).to(self.device)
        self.optimizer = build_optimizer(self.model.parameters(), cfg.train)
        self.schedule = Schedule.build(cfg.train.schedule, self.optimizer, cfg.train)
        self.keeper = CheckpointKeeper(
            self.run_dir / CHECKPOINTS, cfg.train.keep_best, cfg.train.average_last, self.higher_is_better
        )
        self.progress = Progress()
        if not checkpoint:
            self._forget_metrics_after(0)  # a run killed before its first checkpoint starts afresh
        self.window = LogWindow()
        self.last_valid: dict = {}  # the newest validation's entry
        self.epoch_batches = 0  # batches in the current epoch, once it has started
        if checkpoint:
            self._restore(checkpoint)
        self.objective = TokenLoss(self.model, cfg.train)
        self.ddp_objective = distributed.wrap(self.objective, self.device)
        self.trackers: list = []  # opened when training starts, in the run directory
        self.stop_signal: int | None = None  # SIGINT or SIGTERM received, handled between steps
        self.last_save = time.perf_counter()
        dropped = describe_dropped(data.dropped)
        translated = len(self.valid_translated)
        subset = f" (BLEU on {translated})" if translated < len(self.valid_pairs) else ""
        self.notes[:0] = [
            f"data: {len(self.train_data)} training pairs (dropped: {dropped}), {len(self.valid_pairs)} "
            f"validation pairs{subset}; vocabulary {len(self.tok.src)}/{len(self.tok.tgt)}"
            + (" (cached)" if data.from_cache else ""),
            f"model: {cfg.model.decoder.style} decoder, {cfg.model.attention.type} attention, "
            f"{count_parameters(self.model):,} parameters; device {self.device}, {self.precision.name}"
            + (f", {self.world} processes" if self.world > 1 else "")
            + f"; memory allocator {describe_allocator()}",
        ]

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.cfg.train.metric]

    def _restore(self, state: dict) -> None:
        self.model.load_state_dict(model_weights(state))
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.precision.scaler.load_state_dict(state["scaler"])
        progress = dict(state["progress"])
        progress["validations"] = [tuple(v) for v in progress["validations"]]
        self.progress = Progress(**progress)
        if "window" in state:  # a stop between log steps: the next log line still covers its steps
            self.window = LogWindow(*state["window"])
        rng = state["rng"]
        if len(rng.get("processes", [])) == self.world:  # each process its own, as it was
            rng = rng["processes"][self.rank]
        torch.set_rng_state(rng["torch"].cpu())
        self.generator.set_state(rng["teacher_forcing"].cpu())
        if torch.cuda.is_available() and "cuda" in rng:
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
        # The killed session may have logged past its last checkpoint: forget those lines.
        self._forget_metrics_after(self.progress.step)
        self._repair_best()

    def _forget_metrics_after(self, step: int) -> None:
        """Drop metrics lines a killed session logged past its last checkpoint (and a line cut
        short by the kill), so the resumed run's log reads as one uninterrupted run."""
        metrics = self.run_dir / METRICS
        if metrics.exists() and self.rank == 0:
            kept = [m for m in read_metrics(self.run_dir) if m["step"] <= step]
            atomic_write_text(metrics, "".join(json.dumps(m) + "\n" for m in kept))

    def _repair_best(self) -> None:
        """A best.pt that is missing or unreadable (a crash or a full disk while writing it) is
        rebuilt from the best validation's snapshot if one was kept, else from last.pt."""
        directory = self.run_dir / CHECKPOINTS
        best, validations = directory / BEST, self.progress.validations
        if self.rank > 0 or not validations:
            return
        try:
            read_checkpoint(best)
            return
        except NMTError:
            pass
        best_step = max(validations, key=lambda sv: sv[1] if self.higher_is_better else -sv[1])[0]
        source = self.keeper.snapshot(best_step)
        if not source.is_file():
            source = directory / LAST
        atomic_copy(source, best)
        self.notes.append(f"{best} was missing or damaged; rebuilt it from {source.name}")

    # -- reporting ------------------------------------------------------------------------------
    def log(self, message: str, show: bool = True) -> None:
        """A line for the terminal (unless quiet, or `show` is off) and always for train.log."""
        if self.rank > 0:
            return
        with open(self.run_dir / TRAIN_LOG, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")
        if show and not self.quiet:
            from tqdm.auto import tqdm

            tqdm.write(message, file=sys.stderr)

    def elapsed(self) -> float:
        """Wall-clock seconds of training so far, across resumed sessions."""
        return self.progress.elapsed + time.perf_counter() - self.session_start

    def record(self, entry: dict) -> None:
        if self.rank > 0:
            return
        entry["time"] = round(self.elapsed(), 2)
        with open(self.run_dir / METRICS, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        scalars = {k: v for k, v in entry.items() if k not in ("step", "epoch", "time")}
        for tracker in self.trackers:
            tracker.log_metrics(scalars, entry["step"])

    # -- the loop -------------------------------------------------------------------------------
    def train_step(self, groups: list[list[int]]) -> tuple[float, int]:
        """One optimiser step over `groups` of training pairs (several = gradient accumulation).

        The loss is normalised by the target tokens of the whole step (over every process under
        torchrun), so accumulating k batches or running on k processes equals one big batch.
        """
        batches = [collate(self.train_data, group).to(self.device) for group in groups]
        step_tokens = distributed.all_reduce_sum(sum(b.n_tgt_tokens for b in batches), self.device)
        self.model.train()
        nll, tokens = 0.0, 0
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            with self.precision.autocast(), distributed.no_sync_unless(self.ddp_objective, last):
                sums = batch_loss(self.ddp_objective, batch, self.progress.step, self.generator)
            if not math.isfinite(sums.nll) and not self.precision.scaler.is_enabled():
                raise NMTError(
                    f"training diverged: non-finite loss at step {self.progress.step + 1}; "
                    f"the last good checkpoint is {self.run_dir / 'checkpoints' / LAST} "
                    "(try a lower train.lr or train.clip)"
                )
            self.precision.backward(sums.objective * self.world / step_tokens)
            nll, tokens = nll + sums.nll, tokens + sums.tokens
        if not self.precision.step(self.model, self.optimizer, self.cfg.train.clip):
            self.progress.skipped_steps += 1
        # Gradients go now, not before the next step: none are held while validating.
        self.optimizer.zero_grad(set_to_none=True)
        return nll, tokens  # this process's summed NLL and target tokens

    def train(self) -> TrainResult:
        """Train until a budget is spent or validation stops improving, validate the final
        weights and average if asked. SIGINT (Ctrl-C) or SIGTERM stops at the next step boundary,
        saves last.pt and raises `Interrupted`, so a resume continues exactly."""
        cfg, p = self.cfg.train, self.progress
        for note in self.notes:
            self.log(note)
        if done := self._already_finished():
            self.log(f"{self.run_dir} is finished ({done}); raise a budget to continue it")
            stopped = f"already finished: {done}"
            return TrainResult(
                self.run_dir, p.step, p.best, cfg.metric, stopped, {}, self.rank, *self._spent()
            )
        if self.rank == 0:
            self.trackers = open_trackers(cfg.loggers, self.run_dir, self.cfg)
        self.bar = self._progress_bar()
        with self._stop_on_signals():
            stopped = self._train_epochs()
            self.bar.close()
            if self.last_valid.get("step") != p.step:
                self.last_valid = self.validate()
            self._average()
        p.finished = stopped
        self.save(LAST)
        result = TrainResult(
            self.run_dir, p.step, p.best, cfg.metric, stopped, self.last_valid, self.rank, *self._spent()
        )
        self.log(result.summary(), show=False)  # the command line prints it
        for tracker in self.trackers:
            tracker.close()
        return result

    def _already_finished(self) -> str:
        """Why a resumed run has nothing left to do ('' when it has: a budget was raised)."""
        if not self.progress.finished:
            return ""
        if reason := self._budget_spent():
            return reason
        if self._patience_spent():
            return self.progress.finished
        self.progress.finished = ""
        return ""

    @contextlib.contextmanager
    def _stop_on_signals(self):
        """While training, SIGINT and SIGTERM ask for a stop at the next step boundary (a second
        one stops at once, without saving: the state mid-step is not one to resume from)."""

        def request_stop(signum, frame):
            if self.stop_signal is not None:
                raise KeyboardInterrupt
            self.stop_signal = signum

        handlers = {}
        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread:
            for signum in (signal.SIGINT, signal.SIGTERM):
                handlers[signum] = signal.signal(signum, request_stop)
        try:
            yield
        except KeyboardInterrupt:
            self.bar.close()
            last = self.run_dir / CHECKPOINTS / LAST
            raise Interrupted(
                signal.SIGINT,
                f"interrupted twice at step {self.progress.step}: not saved; "
                f"continue from the last checkpoint with: nmt train --resume {self.run_dir}"
                + ("" if last.exists() else " (none yet: the run will start afresh)"),
            ) from None
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)

    def _stop_if_asked(self) -> None:
        """At a step boundary: save and stop if a signal asked for it (on every process at once)."""
        if not distributed.any_true(self.stop_signal is not None, self.device):
            return
        self.bar.close()
        self.save(LAST)
        name = "SIGTERM" if self.stop_signal == signal.SIGTERM else "interrupted"
        message = f"{name} at step {self.progress.step}; continue with: nmt train --resume {self.run_dir}"
        self.log(message, show=False)
        raise Interrupted(self.stop_signal or signal.SIGINT, message)

    def _progress_bar(self):
        from tqdm.auto import tqdm

        return tqdm(
            total=self.cfg.train.max_steps,
            initial=self.progress.step,
            desc="training",
            unit="step",
            disable=self.quiet or None,
            dynamic_ncols=True,
            mininterval=0.5,
            file=sys.stderr,
        )

    def _train_epochs(self) -> str:
        """Epochs until a budget is spent or patience runs out; returns why training stopped."""
        while not (stopped := self._budget_spent()):
            self._train_epoch()
            if self._patience_spent():
                cfg = self.cfg.train
                return f"early stopping: no improvement of valid {cfg.metric} in {cfg.patience} validations"
        return stopped

    def _train_epoch(self) -> None:
        """The rest of the current epoch, until it ends, a budget is spent or patience runs out."""
        cfg, p = self.cfg.train, self.progress
        batches = self._epoch_batches()
        self.epoch_batches = len(batches)  # for the final line's epoch count
        if self.data_seconds is not None:  # this session's first step comes next
            data_seconds, self.data_seconds = self.data_seconds, None
            self.log(f"start-up: {process_seconds():.1f} s to the first step (the data {data_seconds:.1f} s)")
        while p.batch_in_epoch < len(batches) and not self._budget_spent():
            groups = [
                batches[k]
                for k in range(p.batch_in_epoch, min(len(batches), p.batch_in_epoch + cfg.update_every))
            ]
            nll, tokens = self.train_step(groups)
            # Each pair read maps the 64 KB around it (the kernel's fault-around, which
            # MADV_RANDOM does not stop): left mapped, a hundred steps of random pairs held all
            # 600 MB of a 4.5M-pair cache. Dropped every step (0.5 ms), it is one step's worth.
            self.train_data.release()
            p.step += 1
            p.batch_in_epoch += len(groups)
            self.schedule.on_step(p.step, self._budget_share() if self.schedule.uses_budget else 0.0)
            self.window.add(nll, tokens)
            self.bar.update()
            if p.step % cfg.log_every == 0:
                self._log_window()
                self._save_if_due()
            if p.step % cfg.valid_every == 0:
                started = time.perf_counter()
                self.last_valid = self.validate()
                self.window.start += time.perf_counter() - started  # not training time
                if self._patience_spent():
                    return
            self._stop_if_asked()  # after the step's validation, so a resume does not skip it
        if p.batch_in_epoch >= len(batches):
            self.schedule.on_epoch_end(p.epoch)
            p.epoch, p.batch_in_epoch = p.epoch + 1, 0
            if cfg.valid_at_epoch_end and self.last_valid.get("step") != p.step:
                self.last_valid = self.validate()

    def _log_window(self) -> None:
        """Loss, perplexity and speed over the steps since the last log line."""
        p = self.progress
        nll, tokens = distributed.all_reduce_sums([self.window.nll, self.window.tokens], self.device)
        rate, loss = tokens / (time.perf_counter() - self.window.start), nll / tokens
        entry = {
            "step": p.step,
            "epoch": p.epoch,
            "loss": loss,
            "ppl": math.exp(min(loss, 50)),
            "lr": self.schedule.lr,
            "tgt_tokens_per_s": rate,
            "skipped_steps": p.skipped_steps,
        }
        self.record(entry)
        self.bar.set_postfix(
            loss=f"{loss:.3f}",
            ppl=f"{entry['ppl']:.1f}",
            lr=f"{entry['lr']:.2g}",
            tok_s=f"{rate:.0f}",
            epoch=p.epoch,
            refresh=False,
        )
        self.window = LogWindow()

    def _save_if_due(self) -> None:
        """last.pt every `save_every_minutes`, at a log step (the loss window is empty there, so
        a resume from it logs exactly what the uninterrupted run logs); rank 0's clock decides
        for every process, since saving gathers them all."""
        minutes = self.cfg.train.save_every_minutes
        due = self.rank == 0 and bool(minutes) and time.perf_counter() - self.last_save >= 60 * minutes
        if distributed.broadcast_from_rank0(due):
            self.save(LAST)

    def _epoch_batches(self) -> EpochPlan:
        """This process's batches for the current epoch (every `world`-th under torchrun): a
        function of the seed and the epoch, so a resumed run finds its place by the number of
        batches consumed."""
        cfg, epoch = self.cfg.train, self.progress.epoch
        if self.cfg.tokenizer.sampling_alpha and self.sampled_epoch != epoch:
            self.train_data = sampled_train(self.cfg, self.tok, cfg.seed * 1000 + epoch)
            self.sampled_epoch = epoch
        plan = length_grouped_batches(self.train_data, cfg.batch_size, cfg.seed, epoch, cfg.batch_type)
        return plan.shard(self.rank, self.world)

    def _spent(self) -> tuple[float, float, float]:
        """Epochs (the current one in part), wall-clock seconds, and seconds spent validating."""
        p = self.progress
        if p.batch_in_epoch and not self.epoch_batches:  # a finished run reopened: no epoch started
            self.epoch_batches = len(self._epoch_batches())
        return p.epoch + p.batch_in_epoch / max(1, self.epoch_batches), self.elapsed(), p.valid_seconds

    def _budget_share(self) -> float:
        """The share (0-1) of the tightest budget used so far; the clock is averaged over the
        processes under torchrun, so every replica sets the same learning rate."""
        cfg, epochs = self.cfg.train, self._spent()[0]
        shares = [self.progress.step / cfg.max_steps]
        if cfg.max_epochs:
            shares.append(epochs / cfg.max_epochs)
        if cfg.max_time:
            (seconds,) = distributed.all_reduce_sums([self.elapsed()], self.device)
            shares.append(seconds / self.world / cfg.max_time)
        return max(shares)

    def _budget_spent(self) -> str:
        cfg, p = self.cfg.train, self.progress
        if p.step >= cfg.max_steps:
            return f"reached train.max_steps ({cfg.max_steps})"
        if cfg.max_epochs and p.epoch >= cfg.max_epochs:
            return f"reached train.max_epochs ({cfg.max_epochs})"
        if cfg.max_time and distributed.any_true(self.elapsed() >= cfg.max_time, self.device):
            return f"reached train.max_time ({cfg.max_time:g} s)"
        return ""

    def _patience_spent(self) -> bool:
        return bool(self.cfg.train.patience) and self.progress.bad_validations >= self.cfg.train.patience

    @torch.no_grad()
    def evaluate_model(self) -> tuple[dict, list[Translation]]:
        """Validation loss, perplexity and translation scores of the current weights, and the
        translations themselves."""
        self.model.eval()
        nll, tokens = 0.0, 0
        size = self.cfg.decode.batch_size
        for start in range(0, len(self.valid_data), size):
            batch = collate(self.valid_data, range(start, min(start + size, len(self.valid_data)))).to(
                self.device
            )
            with self.precision.autocast():
                sums = batch_loss(self.objective, batch, self.progress.step, self.generator)
            nll, tokens = nll + sums.nll, tokens + sums.tokens
        # the same settings as `nmt translate` with this checkpoint
        translator = Translator.from_config(self.model, self.tok, self.cfg, self.device)
        pairs = self.valid_translated  # all pairs, or train.valid_subset of them
        translations = translator.translate([s for s, _ in pairs], attention=bool(self.trackers))
        hyps = [t.text for t in translations]
        report = evaluate({"valid": hyps}, [[t for _, t in pairs]], EvalOptions(bootstrap=0)).systems[0]
        return {
            "valid_loss": nll / tokens,
            "valid_ppl": math.exp(min(nll / tokens, 50)),
            "valid_bleu": report.scores["BLEU"],
            "valid_chrf": report.scores["chrF"],
            "valid_exact_match": report.exact_match,
        }, translations

    def validate(self) -> dict:
        """Validate (rank 0 only), keep the checkpoints, and step the plateau schedule everywhere."""
        p, cfg = self.progress, self.cfg.train
        started = time.perf_counter()
        if self.rank == 0:
            scores, translations = self.evaluate_model()
            drop_prepacked()  # the next step changes every weight: their packed copies are stale
            text = "".join(t.text + "\n" for t in translations)
            atomic_write_text(self.run_dir / "valid" / f"step-{p.step}.txt", text)
            value = scores[f"valid_{cfg.metric}"]
            improved = p.best is None or (value > p.best if self.higher_is_better else value < p.best)
        else:
            scores, value, improved = {}, 0.0, False
        value, improved = distributed.broadcast_from_rank0((value, improved))
        p.validations.append((p.step, value))
        p.best = value if improved else p.best
        p.bad_validations = 0 if improved else p.bad_validations + 1
        self.schedule.on_validation(improved)
        seconds = time.perf_counter() - started
        p.valid_seconds += seconds
        entry = {"step": p.step, "epoch": p.epoch, **scores, "valid_seconds": round(seconds, 2)}
        if self.rank == 0:
            self.record(entry)
        self.save(LAST)
        if self.rank == 0:
            self.keeper.after_validation(p.validations, improved)
            self.log(
                f"step {p.step}: valid loss {scores['valid_loss']:.3f} ppl {scores['valid_ppl']:.2f} "
                f"BLEU {scores['valid_bleu']:.2f} exact {100 * scores['valid_exact_match']:.1f}% "
                f"({seconds:.1f} s)" + (" (best)" if improved else "")
            )
            self._plot_curves()
            self._track_attention(translations)
        return entry

    def _track_attention(self, translations: list[Translation]) -> None:
        """The first validation sentence's attention, as a heatmap image for the trackers."""
        example = next((t for t in translations if t.hypotheses), None)
        if not self.trackers or example is None:
            return
        from nmt.plots import attention_figure, figure_pixels

        title = f"valid sentence 1, step {self.progress.step}"
        panel = (title, example.hypotheses[0].attention, example.src_pieces, example.tgt_pieces)
        pixels = figure_pixels(attention_figure([panel]))
        for tracker in self.trackers:
            tracker.log_image("attention", pixels, self.progress.step)

    def _plot_curves(self) -> None:
        from nmt.plots import training_curves

        training_curves(
            {self.run_dir.name: read_metrics(self.run_dir)}, self.run_dir / "plots" / "curves.png"
        )

    def _average(self) -> None:
        """Average the last n validation snapshots into averaged.pt and report its scores."""
        if self.rank > 0:
            return
        averaged = self.keeper.average(self.progress.validations)
        if averaged is None:
            return
        current = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.model.load_state_dict(averaged)
        scores, _ = self.evaluate_model()
        self._write_checkpoint("averaged.pt", [self._rng_state()])
        self.model.load_state_dict(current)
        self.record({"step": self.progress.step, **{f"{k}_averaged": v for k, v in scores.items()}})
        self.log(
            f"averaged last {self.cfg.train.average_last} checkpoints: valid BLEU {scores['valid_bleu']:.2f}"
        )

    def _rng_state(self) -> dict:
        rng = {"torch": torch.get_rng_state(), "teacher_forcing": self.generator.get_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return rng

    def save(self, name: str) -> None:
        """Every process calls this: rank 0 writes, with the random state of each process
        (replicas draw different dropout masks and coins, so a resume needs all of them)."""
        states = distributed.gather_to_rank0(self._rng_state())
        if self.rank == 0:
            self._write_checkpoint(name, states)

    def _write_checkpoint(self, name: str, rng_states: list[dict]) -> None:
        self.last_save = time.perf_counter()
        save_checkpoint(
            self.run_dir / CHECKPOINTS / name,
            self.cfg,
            self.model,
            self.tok,
            optimizer=self.optimizer.state_dict(),
            schedule=self.schedule.state_dict(),
            scaler=self.precision.scaler.state_dict(),
            progress=vars(self.progress) | {"elapsed": self.elapsed()},
            window=[self.window.nll, self.window.tokens],  # the loss since the last log line
            rng=rng_states[0] | ({"processes": rng_states} if len(rng_states) > 1 else {}),
        )


def train(
    config: str | Path | None,
    overrides: list[str] | dict[str, Any] | None,
    out: str | Path | None,
    resume: str | Path | None,
    quiet: bool,
) -> TrainResult:
    """`nmt train`: a new run in `out`, or the continuation of the run in `resume`. `overrides`
    are `--set` strings, or a {"section.key": value} dict (values as Python objects).

    Everything that can fail (config, data, model) is checked before a new run directory is
    created, and it is created whole; a resumed run is locked against a second process.
    """
    if isinstance(overrides, dict):
        overrides = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    overrides = overrides or []
    distributed.init()
    rank0 = distributed.rank_and_world()[0] == 0
    lock = None
    try:
        if resume:
            run_dir = Path(resume)
            lock = RunLock(run_dir) if rank0 and (run_dir / CONFIG).is_file() else None
            last = run_dir / CHECKPOINTS / LAST
            state = read_checkpoint(last) if last.is_file() else None
            cfg, changes = resume_config(
                run_dir, config, overrides, write=rank0, checkpoint_config=state and state["config"]
            )
            trainer = Trainer(cfg, run_dir, quiet=quiet, resume=state is not None, checkpoint=state)
            trainer.notes += [f"resuming with {c}" for c in changes]
            if state is None:
                trainer.notes.append("no checkpoint yet: starting the run afresh from its config")
        else:
            if config is None:
                raise NMTError("train: give --config FILE (or --resume RUN_DIR)")
            cfg = load_config(config, overrides)
            run_dir = Path(out) if out else Path("runs") / Path(config).stem
            check_new_run_dir(run_dir)
            trainer = Trainer(cfg, run_dir, quiet=quiet)  # data and model ready before the folder exists
            if rank0:
                prepare_run_dir(run_dir, cfg)
            distributed.barrier()
            lock = RunLock(run_dir) if rank0 else None
        return trainer.train()
    finally:
        if lock:
            lock.release()
        distributed.shutdown()
