"""The sanity invariants and "unmeasured is a value", on queue-driven fakes.

``QueueReader`` stands in for a memory source (NVML, host RSS): it returns
the queued readings in order (repeating the last), raising where an
exception is queued, as a lost GPU or a vanished process would; ``FakeApi``
records what a probe asked Ollama to do."""
from __future__ import annotations

import threading
from collections import deque

import pytest

from probes import sanity
from probes.base import ProbeEnv
from probes.step import Step, measure_checked, sampled
from common.errors import ProbeError
from probes.memory.base import Reading
from probes.sampler import Sampler

MiB = 1 << 20


class QueueReader:
    name = "fake"

    def __init__(self, *values):
        self.queue = deque(values)
        self.last = values[-1] if values else None
        self.history: list = []
        self._lock = threading.Lock()

    def enqueue(self, *values):
        with self._lock:
            self.queue.extend(values)

    def read(self) -> Reading:
        with self._lock:
            value = self.queue.popleft() if self.queue else self.last
            self.last = value
            self.history.append(value)
        if isinstance(value, Exception):
            raise value
        return Reading(0.0, value, None, None)


class FakeApi:
    def __init__(self):
        self.history: list = []

    def unload(self, model):
        self.history.append(("unload", model))


def _step(reader, idle) -> Step:
    sampler = Sampler(reader, hz=50)
    sampler.start()
    sampler.stop()
    return Step("t", idle, sampler, None)


# --- the invariants ------------------------------------------------------------

def test_an_after_load_below_idle_is_refused():
    assert sanity.load_problems(-6 * MiB, 88 * MiB)[0].startswith("the after-load reading is -6.00 MiB below idle")
    assert sanity.load_problems(-1 * MiB, 88 * MiB) == []  # within noise


def test_a_peak_below_the_after_load_reading_is_refused():
    assert "below the after-load reading" in sanity.load_problems(300 * MiB, 200 * MiB)[0]


def test_a_peak_below_the_weights_on_the_device_is_refused_only_when_they_are_there():
    assert "below the model's weights" in sanity.load_problems(None, 192 * MiB, 520 * MiB, weights_on_device=True)[0]
    assert sanity.load_problems(None, 192 * MiB, 520 * MiB, weights_on_device=False) == []
    assert sanity.load_problems(None, 500 * MiB, 520 * MiB, weights_on_device=True) == []


def test_tier_peaks_that_fall_as_the_context_grows_are_refused():
    points = [(2048, 320 * MiB), (4096, 370 * MiB), (8192, 192 * MiB)]
    assert [ctx for ctx, _ in sanity.monotone_problems(points)] == [8192]
    assert sanity.monotone_problems([(2048, 320 * MiB), (4096, 318 * MiB)]) == []  # allocator wobble
    assert sanity.monotone_problems([(2048, None), (4096, 100 * MiB)]) == []


# --- unmeasured is a value -----------------------------------------------------

def test_a_source_whose_readings_fail_gives_no_peak_and_says_why():
    step = _step(QueueReader(RuntimeError("NVML: GPU is lost")), idle=100 * MiB)
    assert step.peak is None and step.measured is False
    assert "memory readings failed" in step.unmeasured


def test_a_failed_idle_reading_leaves_everything_unmeasured():
    step = _step(QueueReader(500 * MiB), idle=None)
    assert step.peak is None and step.now() is None
    assert step.unmeasured == "the idle reading failed"


def test_one_failed_reading_among_good_ones_still_makes_the_step_unmeasured():
    step = _step(QueueReader(200 * MiB, RuntimeError("gone"), 210 * MiB), idle=100 * MiB)
    assert step.peak is None and "1 of" in step.unmeasured


def test_a_blind_source_reports_figures_marked_as_not_measured():
    sampler = Sampler(QueueReader(0, 300 * MiB), hz=50)
    sampler.start()
    sampler.stop()
    step = Step("t", 0, sampler, None, blind="the server is on another machine")
    assert step.peak == 300 * MiB and step.measured is False
    assert step.reading() == {"measured": False, "unmeasured": "the server is on another machine"}


def test_env_used_is_none_when_the_reading_raises():
    env = ProbeEnv(api=FakeApi(), reader=QueueReader(RuntimeError("boom")))
    assert env.used() is None


# --- re-measure once, then refuse ----------------------------------------------

def _env(reader) -> ProbeEnv:
    return ProbeEnv(api=FakeApi(), reader=reader, hz=50)


def test_a_violation_is_measured_again_and_the_second_try_is_kept():
    reader = QueueReader(500 * MiB)
    env = _env(reader)
    afters = iter([-40 * MiB, 0])

    def once():
        with sampled(env, "baseline") as step:
            pass
        return step, next(afters)

    notes: list[str] = []
    step, after = measure_checked(once, lambda st, a: sanity.load_problems(a, st.peak), notes)
    assert after == 0 and step.measured
    assert notes and "measured again" in notes[0]


def test_two_violations_mark_the_step_unmeasured_with_the_reason():
    env = _env(QueueReader(500 * MiB))

    def once():
        with sampled(env, "baseline") as step:
            pass
        return step, -40 * MiB

    notes: list[str] = []
    step, _ = measure_checked(once, lambda st, a: sanity.load_problems(a, st.peak), notes)
    assert step.peak is None and step.unmeasured.startswith("sanity check failed twice")
    assert len(notes) == 2


# --- unload means gone ---------------------------------------------------------

def test_unload_waits_until_the_memory_is_back_at_idle():
    # the runner exits a moment after /api/ps forgets the model
    reader = QueueReader(600 * MiB, 600 * MiB, 400 * MiB, 101 * MiB)
    env = _env(reader)
    env.last_idle_bytes = 100 * MiB
    env.unload("neohorse-1")
    assert env.api.history == [("unload", "neohorse-1")]
    assert reader.history[-1] == 101 * MiB


def test_unload_that_never_frees_the_memory_is_a_clear_error():
    reader = QueueReader(600 * MiB)
    env = _env(reader)
    env.last_idle_bytes = 100 * MiB
    env.release_timeout_s = 0.3
    with pytest.raises(ProbeError, match="did not come back within 0s .still 500.00 MiB above idle"):
        env.unload("neohorse-1")
