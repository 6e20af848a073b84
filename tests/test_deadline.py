"""probes/deadline.py: a whole call within a deadline, and a settle that
really waits for a call the caller gave up on with Ctrl-C."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from probes.deadline import Overdue, settle, within


def _ctrl_c_in(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_a_call_that_ends_in_time_returns_its_value_and_leaves_nothing_running():
    running: set = set()
    assert within(lambda: 42, 5.0, running) == 42
    assert not running


def test_an_error_in_the_call_is_the_callers():
    with pytest.raises(ZeroDivisionError):
        within(lambda: 1 / 0, 5.0)


def test_a_call_past_its_deadline_is_overdue_and_stays_running_until_it_ends():
    running: set = set()
    with pytest.raises(Overdue):
        within(lambda: time.sleep(0.6), 0.1, running)
    assert running
    assert settle(running, 5.0) is True and not running


def test_settle_after_ctrl_c_waits_for_the_call_that_was_cut():
    # CPython 3.11-3.12: a Thread.join cut by KeyboardInterrupt leaves the thread
    # reading as finished while it runs; the settle must still wait for it
    running: set = set()
    ended = threading.Event()

    def slow_load():
        time.sleep(1.5)
        ended.set()

    _ctrl_c_in(0.3)
    with pytest.raises(KeyboardInterrupt):
        within(slow_load, 30.0, running)
    assert not ended.is_set() and running
    started = time.monotonic()
    assert settle(running, 10.0) is True
    assert ended.is_set() and time.monotonic() - started > 0.8


def test_settle_gives_up_at_its_limit_and_says_so():
    running: set = set()
    with pytest.raises(Overdue):
        within(lambda: time.sleep(2.0), 0.05, running)
    started = time.monotonic()
    assert settle(running, 0.3) is False
    assert time.monotonic() - started < 1.5
