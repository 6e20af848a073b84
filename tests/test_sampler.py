"""The background sampler: rate, peak, timeline, marks, the limit, and short
spikes that one reading a second misses."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import deque

import pytest

from probes.budget import Limit
from probes.memory.base import Reading
from probes.memory.host import HostReader
from probes.sampler import Sampler

MiB = 1 << 20


class FakeClock:
    """Time that moves only when the sampler waits (or a reader takes time)."""

    def __init__(self, end_s: float):
        self.now = 0.0
        self.end_s = end_s
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        self.now += timeout
        return self.now >= self.end_s


class CurveReader:
    """used = curve(t) on the fake clock; records when it was read."""

    name = "fake"

    def __init__(self, clock, curve, *, cost_s: float = 0.0):
        self.clock, self.curve, self.cost_s = clock, curve, cost_s
        self.history: list[float] = []

    def read(self) -> Reading:
        self.clock.now += self.cost_s
        t = self.clock()
        self.history.append(t)
        return Reading(t, self.curve(t), 8 << 30, None)


class QueueReader:
    """Returns enqueued used values (or raises enqueued exceptions), then repeats the last."""

    name = "queue"

    def __init__(self, *values):
        self.queue = deque(values)
        self.last = None
        self.history = 0

    def enqueue(self, *values):
        self.queue.extend(values)

    def read(self) -> Reading:
        self.history += 1
        if self.queue:
            item = self.queue.popleft()
            if isinstance(item, Exception):
                raise item
            self.last = item
        return Reading(time.monotonic(), self.last, None, None)


def spike(base: int, height: int, start_s: float, length_s: float):
    return lambda t: base + height if start_s <= t < start_s + length_s else base


def _run(hz, curve, end_s=2.0, **kw):
    clock = FakeClock(end_s)
    reader = CurveReader(clock, curve, cost_s=kw.pop("cost_s", 0.0))
    s = Sampler(reader, hz=hz, clock=clock, wait=clock.wait, **kw)
    s.start()
    return s.stop(), reader


def test_a_100_ms_spike_is_caught_at_20_hz():
    summary, _ = _run(20, spike(1000 * MiB, 100 * MiB, 0.42, 0.1))
    assert summary.peak_bytes == 1100 * MiB
    assert 0.42 <= summary.peak_s < 0.52


def test_the_same_spike_is_missed_by_one_reading_a_second():
    summary, _ = _run(1, spike(1000 * MiB, 100 * MiB, 0.42, 0.1))
    assert summary.peak_bytes == 1000 * MiB


def test_readings_come_at_the_asked_rate_with_a_first_and_last_reading():
    summary, reader = _run(20, lambda t: int(t * 1000), end_s=1.0)
    assert summary.hz_achieved == pytest.approx(20.0, rel=0.01)
    assert reader.history[0] == 0.0 and summary.first_bytes == 0
    assert summary.last_bytes == summary.timeline[-1][1]
    assert summary.readings == len(summary.timeline) == 21  # start, 19 ticks, stop at 1.0 s


def test_timeline_is_seconds_since_start_and_used_bytes():
    summary, _ = _run(10, lambda t: 5 * MiB, end_s=0.35)
    assert [round(t, 2) for t, _ in summary.timeline] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert {u for _, u in summary.timeline} == {5 * MiB}


def test_a_slow_source_gets_fewer_readings_but_no_burst():
    # like nvidia-smi taking 200 ms a call
    summary, reader = _run(20, lambda t: 1, end_s=2.0, cost_s=0.2)
    gaps = [b - a for a, b in zip(reader.history, reader.history[1:])]
    assert min(gaps) >= 0.2 - 1e-9
    assert summary.hz_achieved == pytest.approx(5.0, rel=0.1)


def test_first_reading_above_the_ceiling_is_timed():
    summary, _ = _run(20, spike(500 * MiB, 300 * MiB, 0.5, 0.1), limit_bytes=700 * MiB)
    assert summary.over_limit_s == pytest.approx(0.5, abs=0.051)
    assert summary.limit_bytes == 700 * MiB


def test_staying_under_the_ceiling_records_no_crossing():
    summary, _ = _run(20, spike(500 * MiB, 100 * MiB, 0.5, 0.1), limit_bytes=700 * MiB)
    assert summary.over_limit_s is None


def test_a_limit_object_is_compared_by_its_ceiling():
    limit = Limit(600 * MiB, "budget", "", ceiling_bytes=650 * MiB)
    summary, _ = _run(20, lambda t: 640 * MiB, end_s=0.2, limit_bytes=limit)
    assert summary.limit_bytes == 650 * MiB and summary.over_limit_s is None


def test_failed_or_na_readings_are_counted_and_sampling_goes_on():
    reader = QueueReader(1 * MiB, RuntimeError("GPU is lost"), None, 3 * MiB)
    clock = FakeClock(0.2)
    s = Sampler(reader, hz=20, clock=clock, wait=clock.wait).start()
    summary = s.stop()
    assert summary.errors == 2
    assert summary.peak_bytes == 3 * MiB
    assert [u for _, u in summary.timeline][:2] == [1 * MiB, 3 * MiB]


def test_marks_are_kept_with_their_time():
    clock = FakeClock(10.0)
    reader = QueueReader(1)
    s = Sampler(reader, hz=20, clock=clock, wait=lambda _t: True)
    s.start()
    clock.now = 1.5
    s.mark("load")
    clock.now = 2.25
    s.mark("request")
    assert s.marks == [(1.5, "load"), (2.25, "request")]  # live, for a chart drawn mid-step
    assert s.stop().marks == ((1.5, "load"), (2.25, "request"))


def test_rise_is_peak_above_the_first_reading():
    summary, _ = _run(20, spike(1000, 500, 0.3, 0.2))
    assert summary.rise_bytes == 500
    assert summary.to_dict()["rise_bytes"] == 500


def test_misuse_is_an_error_not_a_silent_nothing():
    with pytest.raises(ValueError):
        Sampler(QueueReader(1), hz=0)
    s = Sampler(QueueReader(1))
    with pytest.raises(RuntimeError):
        s.stop()
    with pytest.raises(RuntimeError):
        s.mark("x")


def test_context_manager_runs_a_real_thread_and_stops_promptly():
    reader = QueueReader(*range(1, 1000))
    with Sampler(reader, hz=50) as s:
        time.sleep(0.3)
        assert s.peak_bytes is not None and len(s.timeline) >= 3
    started = time.monotonic()
    summary = s.summary
    assert summary is not None and summary.readings >= 4
    assert s.stop() is summary  # stopping twice returns the same summary
    assert time.monotonic() - started < 0.1
    assert not any(t.name == "oomvet-sampler" and t.is_alive() for t in threading.enumerate())


SPIKER = r"""
import sys, time
sys.stdin.readline()
block = b"\x01" * (100 << 20)
time.sleep(0.3)
del block
print("done", flush=True)
sys.stdin.readline()
"""


def test_real_child_spike_is_caught_by_the_host_reader_at_20_hz():
    child = subprocess.Popen([sys.executable, "-c", SPIKER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        reader = HostReader(pids=[child.pid])
        with Sampler(reader, hz=20) as s:
            time.sleep(0.1)
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "done"
            time.sleep(0.1)
        summary = s.summary
        assert summary.rise_bytes >= 80 * MiB
        assert summary.last_bytes - summary.first_bytes < 20 * MiB  # freed again
    finally:
        child.kill()
        child.wait()
