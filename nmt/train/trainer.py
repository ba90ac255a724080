"""The training loop: teacher-forced cross-entropy a step at a time until a budget is spent,
validating and saving on the way. Its parts are modules of their own: `learner` (the model and
one optimiser step), `epochs`, `budget`, `validation`, `checkpoints`, `report`, `signals`,
`progress` (what a resume continues from) and `distributed` (torchrun)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from nmt.checkpoint import read_checkpoint
from nmt.config import Config
from nmt.decode.translator import Translation
from nmt.device import resolve_device
from nmt.rundir import CHECKPOINTS, LAST
from nmt.train import distributed
from nmt.train.backends import BackendChoices
from nmt.train.budget import Budget
from nmt.train.checkpoints import CheckpointKeeper, restore_rng, rng_record, rng_state
from nmt.train.epochs import Epochs, prepare_data
from nmt.train.finetune import starting_point
from nmt.train.learner import Learner, check_finite
from nmt.train.precision import Precision
from nmt.train.progress import Clock, LogWindow, Progress, TrainResult
from nmt.train.report import RunReport
from nmt.train.signals import Interrupted, StopRequest, stop_requests
from nmt.train.validation import Validator


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
        session_start = time.perf_counter()  # the run's clock counts its start-up too
        self.cfg, self.run_dir, train = cfg, Path(run_dir), cfg.train
        self.last = self.run_dir / CHECKPOINTS / LAST
        self.rank, self.world = distributed.rank_and_world()
        self.device = resolve_device(distributed.local_device(train.device))
        torch.manual_seed(train.seed)
        self.generator = torch.Generator().manual_seed(train.seed + 1)  # teacher-forcing coins
        if resume and checkpoint is None:
            checkpoint = read_checkpoint(self.last)
        # a run from before precisions were recorded (or one of a GPU's) computed its CPU products in fp32
        recorded = checkpoint.get("precision", "fp32") if checkpoint else None
        self.precision = Precision(self.device, train.precision, recorded)
        self.backends = None  # on a CPU: each weight gradient's backend, measured (`train.backends`)
        if self.device.type == "cpu":
            self.backends = BackendChoices.for_run(checkpoint, measure=self.world == 1)
            self.backends.install()
        self.progress = Progress.from_state(checkpoint["progress"]) if checkpoint else Progress()
        self.clock = Clock(self.progress, session_start)
        self.report = RunReport(self.run_dir, self.rank, quiet, self.clock)
        self.budget = Budget(train, self.progress, self.clock, self.device)
        start = None if checkpoint else starting_point(cfg)  # fine-tuning: the checkpoint to start from
        origin = checkpoint or (start and start.state)  # whose tokenizers encode the data
        data, self.data_seconds = prepare_data(cfg, origin, progress=not self.report.quiet)
        self.tok, self.epochs = data.tokenizers, Epochs(cfg, data, self.device, self.run_dir)
        valid = data.held_out["valid"]
        self.validator = Validator(cfg, self.tok, valid.corpus, valid.pairs, self.device, self.precision)
        vocab = (len(self.tok.src), len(self.tok.tgt))
        resumed = checkpoint and (checkpoint, self.last)
        self.learner = Learner(cfg, vocab, self.device, self.precision, start, resumed)
        self.model = self.learner.model
        self.keeper = CheckpointKeeper.of(self.last.parent, train)
        self.window = LogWindow()  # the loss since the last log line
        self.unread_skips: int | torch.Tensor = 0  # fp16 overflow steps not yet in progress.skipped_steps
        self.notes = [*self.epochs.notes, *self.validator.notes, self.learner.note]  # logged at the start
        self.notes += self.precision.note.splitlines()
        self.notes += [start.note] if start else []
        self.notes += self.backends.notes if self.backends else []
        self.notes += self._restore(checkpoint)
        self.last_valid: dict = {}  # the newest validation's entry
        self.stop = StopRequest()  # what a signal asks while training (stop_requests)
        self.started = False  # whether this session's first step has begun (start-up is over)
        self.speed_from: tuple[int, float, float] | None = None  # (step, clock, validating) at the first step

    def _restore(self, state: dict | None) -> list[str]:
        """The loss window and random state from a checkpoint (the learner took the rest);
        the metrics a killed session logged past it forgotten; best.pt repaired if need be.
        Without one (a run killed before its first checkpoint), the run starts afresh."""
        if not state:
            self.report.forget_after(0)
            return []
        self.window = LogWindow(*state.get("window", ()))  # the next log line covers steps before a stop
        restore_rng(state["rng"], self.generator, self.rank, self.world)
        self.report.forget_after(self.progress.step)
        repaired = self.keeper.repair_best(self.progress.validations) if self.rank == 0 else ""
        return [repaired] if repaired else []

    # -- the loop -------------------------------------------------------------------------------
    def train(self) -> TrainResult:
        """Train until a budget is spent or validation stops improving, validate the final
        weights and average if asked. SIGINT (Ctrl-C) or SIGTERM stops at the next step boundary,
        saves last.pt and raises `Interrupted`, so a resume continues exactly."""
        for note in self.notes:
            self.report.log(note)
        if done := self.budget.already_finished():
            self.report.log(f"{self.run_dir} is finished ({done}); raise a budget to continue it")
            return self._result(f"already finished: {done}")
        self.report.open(self.cfg, self.progress.step)
        try:
            with stop_requests() as self.stop:
                stopped = self._train_epochs()
                self.report.close_bar()
                if self.last_valid.get("step") != self.progress.step:
                    self.last_valid = self.validate()
                self._average()
        except KeyboardInterrupt:
            self.report.close_bar()
            if not self.started:  # start-up: nothing to save; `nmt train` undoes what it began
                raise
            raise Interrupted.twice(self.progress.step, self.run_dir, self.last) from None
        self.progress.finished = stopped
        self.save(LAST)
        result = self._result(stopped)
        self.report.log(result.summary(), show=False)  # the command line prints it
        self.report.close()
        return result

    def _train_epochs(self) -> str:
        """Epochs until a budget is spent or patience runs out; returns why training stopped."""
        while not (stopped := self.budget.spent()):
            self._train_epoch()
            if self.budget.patience_spent():
                return self.budget.early_stop()
        return stopped

    def _train_epoch(self) -> None:
        """The rest of the current epoch, until it ends, a budget is spent or patience runs out."""
        cfg, p = self.cfg.train, self.progress
        batches = self.epochs.start(p.epoch)
        self._begin()
        while p.batch_in_epoch < len(batches) and not self.budget.spent():
            last = min(len(batches), p.batch_in_epoch + cfg.update_every)
            self._step([batches[k] for k in range(p.batch_in_epoch, last)])
            if p.step % cfg.valid_every == 0 and self._validation_fits():
                self.last_valid = self.validate()
                if self.budget.patience_spent():
                    return
            self._stop_if_asked()  # after the step's validation, so a resume does not skip it
        if p.batch_in_epoch >= len(batches):
            self.learner.schedule.on_epoch_end(p.epoch)
            p.epoch, p.batch_in_epoch = p.epoch + 1, 0
            if cfg.valid_at_epoch_end and self.last_valid.get("step") != p.step and self._validation_fits():
                self.last_valid = self.validate()

    def _step(self, groups: list[list[int]]) -> None:
        """One optimiser step and its bookkeeping: counters, schedule, loss window, log line."""
        p, schedule = self.progress, self.learner.schedule
        nll, tokens, guided = self.train_step(groups)
        self.epochs.release()
        p.step, p.batch_in_epoch = p.step + 1, p.batch_in_epoch + len(groups)
        schedule.on_step(p.step, self.budget.share(self.spent()[0]) if schedule.uses_budget else 0.0)
        self.window.add(nll, tokens, guided)
        self.report.step_done()
        if p.step % self.cfg.train.log_every == 0:
            self._log_window()
            if self.keeper.due(self.cfg.train.save_every_minutes):  # the window is empty here
                self.save(LAST)

    def train_step(self, groups: list[list[int]]) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """One optimiser step over `groups` of training pairs (several = gradient accumulation);
        this process's summed NLL and target tokens, and guided alignment's [loss, rows]."""
        batches = self.epochs.batches(groups)
        nll, tokens, taken, guided = self.learner.step(batches, self.progress.step, self.generator, self.last)
        if taken is not True:  # fp16: a tensor on the device, read with the loss
            self.unread_skips = self.unread_skips + (~taken).long()
        return nll, tokens, guided

    def _read_skips(self) -> None:
        """The overflow steps skipped since the last read, into the progress."""
        self.progress.skipped_steps += int(self.unread_skips)
        self.unread_skips = 0

    def spent(self) -> tuple[float, float, float]:
        """Epochs (the current one in part), wall-clock seconds, and seconds spent validating."""
        p = self.progress
        return self.epochs.count(p.epoch, p.batch_in_epoch), self.clock.elapsed(), p.valid_seconds

    def _result(self, stopped: str) -> TrainResult:
        p, metric = self.progress, self.cfg.train.metric
        return TrainResult(
            self.run_dir, p.step, p.best, metric, stopped, self.last_valid, self.rank, *self.spent()
        )

    # -- reporting, validating and saving on the way ----------------------------------------------
    def _begin(self) -> None:
        """Before each epoch. At this session's first, start-up ends: a signal received since it began
        stops here (`StopRequest.started`); from now on one stops at the next step boundary."""
        if not self.started:
            self.stop.started()
            self.started = True
            self.report.started(self.data_seconds)
            if self.cfg.train.max_time:
                p = self.progress
                self.speed_from = (p.step, self.clock.elapsed(), p.valid_seconds)

    def _validation_fits(self) -> bool:
        """`Budget.validation_fits`, saying so in the log when it does not."""
        if self.budget.validation_fits():
            return True
        p, share = self.progress, self.cfg.train.valid_share
        spent = f"{p.valid_seconds:.0f} s so far, the last took {p.last_valid_seconds:.0f}"
        self.report.log(
            f"step {p.step}: validation skipped: with it, validating would pass train.valid_share, "
            f"{share:g} of the time ({spent})"
        )
        return False

    def _log_window(self) -> None:
        """Loss, perplexity and speed over the steps since the last log line."""
        p = self.progress
        sums = distributed.all_reduce_sums(self.window.sums(), self.device)
        check_finite(sums[0], self.learner.precision, f"by step {p.step}", self.last)
        self._read_skips()
        self.report.show_window(self.window.entry(sums, p, self.learner.schedule.lr))
        self.window = LogWindow()
        if self.speed_from:
            self._say_what_the_budget_buys()

    def _say_what_the_budget_buys(self) -> None:
        """At a session's first log line under `train.max_time`: the steps the budget buys at the
        speed so far, so a slow machine shows at once that its budget buys few (docs/recipe.md
        says which model suits such a budget)."""
        (step, clock, validating), p = self.speed_from, self.progress
        self.speed_from = None
        seconds = self.clock.elapsed() - clock - (p.valid_seconds - validating)
        if p.step > step and seconds > 0:
            per_step = seconds / (p.step - step)
            self.report.log(
                f"train.max_time ({self.cfg.train.max_time:g} s) buys about "
                f"{self.budget.steps_bought(per_step)} steps at this speed ({per_step:.3g} s a step)"
            )

    def evaluate_model(self, attention: bool = False) -> tuple[dict[str, float], list[Translation]]:
        """Validation loss and scores of the current weights, and the translations."""
        objective, step = self.learner.objective, self.progress.step
        return self.validator.scores(self.model, objective, step, self.generator, attention)

    def validate(self) -> dict:
        """Validate (rank 0 only), keep the checkpoints, and step the plateau schedule everywhere."""
        p, started = self.progress, time.perf_counter()
        scores, translations, value, improved = {}, [], 0.0, False
        if self.rank == 0:
            scores, translations = self.evaluate_model(attention=bool(self.report.trackers))
            value = scores[f"valid_{self.cfg.train.metric}"]
            improved = p.improves(value, self.keeper.higher_is_better)
        value, improved = distributed.broadcast_from_rank0((value, improved))
        p.add_validation(value, improved)
        self.learner.schedule.on_validation(improved)
        seconds = time.perf_counter() - started
        p.valid_seconds, p.last_valid_seconds = p.valid_seconds + seconds, seconds
        p.slowest_valid_seconds = max(p.slowest_valid_seconds, seconds)
        self.window.start += seconds  # not training time
        entry = {"step": p.step, "epoch": p.epoch, **scores, "valid_seconds": round(seconds, 2)}
        self.report.record(entry)
        self.save(LAST)
        if self.rank == 0:
            self.keeper.after_validation(p.validations, improved)
            self.report.validated(p.step, scores, seconds, improved, translations)
        return entry

    def _average(self) -> None:
        """Average the last n validation snapshots into averaged.pt and report its scores."""
        averaged = self.keeper.average(self.progress.validations) if self.rank == 0 else None
        if averaged is None:
            return
        with self.learner.weights(averaged):
            scores, _ = self.evaluate_model(attention=bool(self.report.trackers))
            self._write_checkpoint("averaged.pt", [rng_state(self.generator)])
        self.report.averaged(self.progress.step, scores, self.cfg.train.average_last)

    def save(self, name: str) -> None:
        """Every process calls this: rank 0 writes, with the random state of each process."""
        states = distributed.gather_to_rank0(rng_state(self.generator))
        if self.rank == 0:
            self._write_checkpoint(name, states)

    def _write_checkpoint(self, name: str, rng_states: list[dict]) -> None:
        self.keeper.saved()
        self._read_skips()
        progress = vars(self.progress) | {"elapsed": self.clock.elapsed()}
        run = {"progress": progress, "window": self.window.sums(), "rng": rng_record(rng_states)}
        if self.backends:
            run["backends"] = self.backends.chosen
            run["precision"] = self.precision.cpu
        self.learner.save(self.run_dir / CHECKPOINTS / name, self.cfg, self.tok, run)

    def _stop_if_asked(self) -> None:
        """At a step boundary: save and stop if a signal asked for it (on every process at once)."""
        if distributed.any_true(self.stop.signum is not None, self.device):
            self.report.close_bar()
            self.save(LAST)
            stop = Interrupted.saved(self.stop, self.progress.step, self.run_dir)
            self.report.log(str(stop), show=False)
            raise stop
