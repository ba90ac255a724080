"""nmt.machine: the threads a process takes on a busy machine, and the yardstick's parts."""

import os

import pytest
import torch

from nmt import machine


def test_other_processes_running_are_the_runnable_threads_less_this_processs_own():
    assert machine.others_running("0.50 0.40 0.30 3/412 9999", ["R", "S", "R"]) == 1
    assert machine.others_running("0.50 0.40 0.30 2/412 9999", ["R", "R", "R"]) == 0  # never negative


def test_free_cores_sees_a_busy_core_and_never_goes_below_one(monkeypatch):
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    for busy, free in ((0, 2), (1, 1), (5, 1)):
        monkeypatch.setattr(machine, "others_running", lambda *_, busy=busy: busy)
        assert machine.free_cores(samples=2, every=0) == free


def test_a_decode_takes_the_users_threads_else_the_free_cores(monkeypatch):
    cores = torch.get_num_threads()
    try:
        monkeypatch.setattr(machine, "free_cores", lambda: 1)
        monkeypatch.setenv("OMP_NUM_THREADS", str(cores))
        assert machine.choose_threads() == (cores, "")  # the user's choice stands
        monkeypatch.delenv("OMP_NUM_THREADS")
        threads, note = machine.choose_threads()
        assert threads == torch.get_num_threads() == 1
        assert ("busy" in note) == (cores > 1)
    finally:
        torch.set_num_threads(cores)


def test_the_test_workers_share_the_cores_out():
    """conftest gives each pytest-xdist worker its share of the cores: workers that each took all
    of them stalled each other's OpenMP threads, and the suite ran 2.5x slower."""
    if os.environ.get("NMT_TESTS_THREADS") == "user":
        pytest.skip("OMP_NUM_THREADS was set for this run, and stands")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    assert os.environ["OMP_NUM_THREADS"] == str(max(1, len(os.sched_getaffinity(0)) // workers))


def test_the_cpu_has_a_name():
    assert machine.cpu_name().strip()


def test_training_waits_passively_unless_the_user_chose(monkeypatch):
    import nmt.__main__

    for argv, chosen, expected in (
        (["nmt", "train", "--help"], None, "PASSIVE"),
        (["nmt", "train", "--help"], "ACTIVE", "ACTIVE"),
        (["nmt", "configs"], None, None),
    ):
        if chosen is None:
            monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
        else:
            monkeypatch.setenv("OMP_WAIT_POLICY", chosen)
        monkeypatch.setattr("sys.argv", argv)
        monkeypatch.setattr("nmt.allocator.restart_with_tcmalloc", lambda: None)
        try:
            nmt.__main__.main()
        except SystemExit as stop:
            assert stop.code in (0, None)
        assert machine.os.environ.get("OMP_WAIT_POLICY") == expected


def test_timed_calls_take_turns_so_a_stall_slows_every_candidate_alike(monkeypatch):
    """A stall over 8 calls after the warm-up slows 3 of one candidate's 10 timed calls and 2 of
    the other's: the medians stay each call's own time (timed one candidate after the other,
    half of fbgemm's would have been the stall's 8 ms, and the cached choice oneDNN's). Each
    block of timed calls follows an untimed one that warms the caches."""
    clock, order = [0.0], []
    monkeypatch.setattr(machine.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(machine, "BLOCK", 2)

    def call(name: str, ms: float):
        def run():
            order.append(name)
            stalled = 2 < len(order) <= 10  # after a warm-up round of two calls
            clock[0] += (8.0 if stalled else ms) / 1e3

        return run

    times = machine.milliseconds({"fbgemm": call("fbgemm", 0.70), "onednn": call("onednn", 0.74)}, repeats=10)
    in_turn = ["fbgemm", "onednn"] + ["fbgemm"] * 3 + ["onednn"] * 3  # warm-up, then blocks
    assert order[:8] == in_turn and len(order) == 2 + 5 * 2 * 3
    assert times == pytest.approx({"fbgemm": 0.70, "onednn": 0.74})


def test_an_odd_number_of_timed_calls_is_kept(monkeypatch):
    monkeypatch.setattr(machine, "BLOCK", 2)
    counts = {"a": 0, "b": 0}
    calls = {name: (lambda name=name: counts.__setitem__(name, counts[name] + 1)) for name in counts}
    machine.milliseconds(calls, repeats=5, warm_up=0)
    assert counts == {"a": 5 + 3, "b": 5 + 3}  # five timed, one untimed before each of three blocks
