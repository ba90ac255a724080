"""Ctrl-C and SIGTERM while training: the first is a request, a second stops at once, and the
handlers the process had come back afterwards."""

import os
import signal

import pytest

from nmt.train.signals import Interrupted, StopRequest, stop_requests


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_is_noted_not_obeyed_and_a_second_one_stops_at_once(signum):
    before = signal.getsignal(signum)
    with stop_requests() as request:
        os.kill(os.getpid(), signum)
        assert request.signum == signum  # the process lives on to the step boundary
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signum)
    assert signal.getsignal(signum) is before


def test_the_messages_name_the_step_and_the_resume_command(tmp_path):
    stop = Interrupted.saved(StopRequest(signal.SIGTERM), 40, tmp_path)
    assert str(stop) == f"SIGTERM at step 40; continue with: nmt train --resume {tmp_path}"
    assert stop.exit_code == 143
    assert Interrupted.saved(StopRequest(signal.SIGINT), 40, tmp_path).exit_code == 130
    twice = Interrupted.twice(41, tmp_path, tmp_path / "last.pt")
    assert "interrupted twice at step 41: not saved" in str(twice)
    assert str(twice).endswith("(none yet: the run will start afresh)") and twice.exit_code == 130
    (tmp_path / "last.pt").touch()
    assert "afresh" not in str(Interrupted.twice(41, tmp_path, tmp_path / "last.pt"))
