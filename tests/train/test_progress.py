"""The counters a resume continues from: validations, the best value, patience, the clock."""

import math
import time

import torch

from nmt.train.progress import Clock, LogWindow, Progress


def test_validations_track_the_best_and_the_misses_in_either_direction():
    p = Progress(step=10)
    assert p.improves(20.0, higher_is_better=True)  # the first always improves
    p.add_validation(20.0, True)
    p.step = 20
    assert not p.improves(19.0, higher_is_better=True)
    p.add_validation(19.0, False)
    assert (p.best, p.bad_validations, p.validations) == (20.0, 1, [(10, 20.0), (20, 19.0)])
    assert p.improves(19.0, higher_is_better=False)  # perplexity: lower is better
    p.add_validation(21.0, True)
    assert (p.best, p.bad_validations) == (21.0, 0)


def test_a_checkpoints_progress_comes_back_equal():
    p = Progress(step=7, epoch=1, batch_in_epoch=3, validations=[(5, 1.5)], best=1.5, finished="")
    stored = {**vars(p), "validations": [list(v) for v in p.validations]}  # as torch.load returns it
    assert Progress.from_state(stored) == p


def test_the_clock_adds_this_sessions_seconds_to_the_checkpoints():
    clock = Clock(Progress(elapsed=100.0))
    time.sleep(0.01)
    assert 100.01 <= clock.elapsed() < 101.0


def test_a_log_windows_entry_is_its_mean_loss_and_speed():
    window = LogWindow(nll=12.0, tokens=6, start=time.perf_counter() - 2.0)
    entry = window.entry([24.0, 12, 0.0, 0.0], Progress(step=40, epoch=1, skipped_steps=2), lr=0.001)
    assert window.sums() == [12.0, 6, 0.0, 0.0]
    assert entry["loss"] == 2.0 and abs(entry["ppl"] - math.exp(2.0)) < 1e-9
    assert "alignment_loss" not in entry
    window.add(torch.tensor(3.0), 2, torch.tensor([1.5, 3.0]))
    assert window.sums() == [15.0, 8, 1.5, 3.0]
    assert LogWindow(*[12.0, 6]).sums() == [12.0, 6, 0.0, 0.0]  # a checkpoint's window from before
    assert window.entry(window.sums(), Progress(), lr=0.1)["alignment_loss"] == 0.5
    assert 5.0 < entry["tgt_tokens_per_s"] <= 6.0  # 12 tokens (all processes) in a bit over 2 s
    assert (entry["step"], entry["epoch"], entry["lr"], entry["skipped_steps"]) == (40, 1, 0.001, 2)


def test_validation_is_wider_on_a_gpu_only():
    """The decode section's batch on the CPU; on a GPU at least 512 sentences at once (launches,
    not arithmetic, bound a step there; tests/test_cuda.py checks the scores are the same)."""
    import torch

    from nmt.config import DecodeConfig
    from nmt.train.validation import GPU_WIDTH, validation_width

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert validation_width(DecodeConfig(batch_size=64), cpu) == 64
    assert validation_width(DecodeConfig(batch_size=64), cuda) == GPU_WIDTH == 512
    assert validation_width(DecodeConfig(batch_size=1000), cuda) == 1000
    tokens = DecodeConfig(batch_size=4096, batch_type="tokens")  # a token budget is no sentence count
    assert validation_width(tokens, cuda) == GPU_WIDTH and validation_width(tokens, cpu) == 4096
