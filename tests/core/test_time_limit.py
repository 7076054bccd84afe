"""rectune.core.time_limit: an alarm ends work a stranger's input made endless, Python's regular expression
engine included, and leaves the process's own alarm handler as it was."""

import re
import signal
import time

import pytest

from rectune.core.io import RecTuneError
from rectune.core.time_limit import time_limit

NAME = "model.layers.0.self_attn.q_proj"  # 31 characters: (.*)*x tries about 2**31 ways to split it


def test_a_catastrophic_pattern_is_stopped_at_the_limit():
    def previous(signum, frame):
        raise AssertionError("not this handler")

    signal.signal(signal.SIGALRM, previous)
    started = time.monotonic()
    with pytest.raises(RecTuneError, match="^the pattern took too long$"), time_limit(0.5, "the pattern took too long"):
        re.fullmatch(r"(.*)*x", NAME)
    assert 0.5 <= time.monotonic() - started < 5
    assert signal.getsignal(signal.SIGALRM) is previous and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_work_within_the_limit_runs_as_it_would():
    with time_limit(5, "unused"):
        found = re.fullmatch(r".*\.(q|v)_proj", NAME)
    assert found is not None and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_an_alarm_set_before_is_set_again_after():
    signal.signal(signal.SIGALRM, lambda signum, frame: None)
    signal.setitimer(signal.ITIMER_REAL, 100)
    with time_limit(5, "unused"):
        assert signal.getitimer(signal.ITIMER_REAL)[0] <= 5  # the limit's own alarm while the block runs
    remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert 99 < remaining <= 100
