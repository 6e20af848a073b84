"""One sampled step of a measurement: the idle reading, then everything the
sampler saw while the block ran, relative to that idle reading.

:func:`sampled` opens a :class:`Step`; :func:`measure_checked` measures again
when a sanity invariant (:mod:`probes.sanity`) is broken, and marks a step
unmeasured if the second try breaks one too.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from probes import sanity
from probes.base import Cancelled, ProbeEnv, read_used
from probes.memory.base import OLLAMA_PROCESS, Reading
from probes.result import Chart
from probes.sampler import Sampler


@dataclass
class Step:
    """One sampled step: the idle reading, then everything the sampler saw.

    Every figure is relative to the idle reading and is ``None`` when it was
    not measured; :attr:`unmeasured` then says why (the idle reading failed,
    readings failed while sampling, the source cannot see the model, or a
    sanity check refused the figure). A step whose source is blind still
    reports what the server said (``reported``), marked as not measured."""

    name: str
    idle_bytes: int | None
    sampler: Sampler
    limit_bytes: int | None
    blind: str | None = None
    started: float = field(default_factory=time.monotonic)
    _seen_max: int | None = None   # the highest reading taken through now(), between sampler ticks
    _failed_now: int = 0           # now() readings that failed
    _refused: str | None = None    # a sanity check's reason, set by invalidate()
    evicted: tuple[str, ...] = ()  # models ollama ps listed before the step and not after it
    #: what processes that are not Ollama's gained (or, negative, gave back) during the step, left out of it
    others_moved: int = 0

    def now(self) -> int | None:
        """The model's usage now (reading minus idle); None when unmeasured."""
        used = read_used(self.sampler.reader)
        if used is None:
            self._failed_now += 1
            return None
        self._seen_max = used if self._seen_max is None else max(self._seen_max, used)
        return None if self.idle_bytes is None else used - self.idle_bytes

    def mark(self, label: str) -> None:
        self.sampler.mark(label)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def invalidate(self, reason: str) -> None:
        """A sanity check refused this step's figures: they are unmeasured."""
        self._refused = reason

    @property
    def failed_readings(self) -> int:
        summary = self.sampler.summary
        sampler_errors = summary.errors if summary is not None else self.sampler.errors
        return sampler_errors + self._failed_now

    @property
    def raw_peak(self) -> int | None:
        """The highest reading minus idle, whatever the readings' health."""
        highest = [v for v in (self.sampler.peak_bytes, self._seen_max) if v is not None]
        if self.idle_bytes is None or not highest:
            return None
        return max(highest) - self.idle_bytes

    @property
    def unmeasured(self) -> str | None:
        """Why this step's figures are not measurements; None when they are."""
        if self._refused:
            return self._refused
        if self.blind:
            return self.blind
        if self.idle_bytes is None:
            return "the idle reading failed"
        failed = self.failed_readings
        if failed:
            total = failed + len(self.sampler.timeline)
            return f"{failed} of {total} memory readings failed"
        if self.raw_peak is None:
            return "no memory reading was taken"
        return None

    @property
    def measured(self) -> bool:
        return self.unmeasured is None

    @property
    def peak(self) -> int | None:
        """The peak above idle: measured, or reported by a blind source; None
        when readings failed or a sanity check refused it."""
        if self._refused or (self.unmeasured and not self.blind):
            return None
        return self.raw_peak

    def over_limit(self) -> bool:
        """The probe's stop test, never posted: the peak so far passed the hard
        limit, so the request is not worth sending (the load is the OOM).
        Whether a measurement fits is the rules' reading of its fact."""
        peak = self.peak
        return self.limit_bytes is not None and peak is not None and peak > self.limit_bytes

    def reading(self) -> dict:
        """The fields every measurement fact carries about its own health."""
        health = {"measured": self.measured, "unmeasured": self.unmeasured}
        if self.evicted:
            health["evicted"] = list(self.evicted)
        if self.others_moved:
            health["others_moved"] = int(self.others_moved)
        return health

    def chart(self) -> Chart:
        idle = self.idle_bytes or 0
        timeline = tuple((round(t, 3), max(0, used - idle)) for t, used in self.sampler.timeline) \
            if self.idle_bytes is not None else ()
        marks = tuple((round(t, 3), label) for t, label in getattr(self.sampler, "marks", ()))
        return Chart(self.name, 0, self.peak, self.limit_bytes, timeline, marks)


class OthersAside:
    """A device source read as the model's share: its "used" less what the
    processes that are not Ollama's gained (or plus what they gave back)
    since the step began. A device reading counts every process on the card;
    a desktop or a training job that frees memory in the middle of a step
    would otherwise hide part of the model's peak (and one that grows would
    be charged to the model). Only for sources that name processes with
    their memory (NVML, rocm-smi); a reading whose process list fails, that
    gives no per-process figure, or that lists a process it cannot name (one
    in another container may be the model's), is taken as the device reads it.
    :attr:`moved` is the largest change seen, for the step's notes."""

    def __init__(self, reader):
        self.reader = reader
        self.name = getattr(reader, "name", None)
        self._start = self._others()
        self.moved = 0

    @classmethod
    def wraps(cls, reader) -> bool:
        """Whether ``reader`` names processes on a device (the host source
        already counts only the server's runners)."""
        return getattr(reader, "name", None) not in ("host", "ollama-ps") and hasattr(reader, "processes")

    def _others(self) -> int | None:
        try:
            procs = self.reader.processes()
        except Exception:  # noqa: BLE001 - no process figures: the device reading stands
            return None
        if any(not p.name or p.name == "?" for p in procs):
            return None  # a process no source names (another container's) may be the model's own
        others = [p for p in procs if not OLLAMA_PROCESS.search(p.name)]
        if any(p.used_bytes is None for p in others):
            return None
        return sum(int(p.used_bytes) for p in others)

    def refresh(self) -> None:
        refresh = getattr(self.reader, "refresh", None)
        if refresh is not None:
            refresh()

    def read(self) -> Reading:
        reading = self.reader.read()
        now = self._others()
        if reading.used_bytes is None or now is None or self._start is None:
            return reading
        change = now - self._start
        if abs(change) > abs(self.moved):
            self.moved = change
        return dataclasses.replace(reading, used_bytes=reading.used_bytes - change)

    def __getattr__(self, name):  # info(), processes(), close(): the source's own
        return getattr(self.reader, name)


@contextlib.contextmanager
def sampled(env: ProbeEnv, name: str) -> Iterator[Step]:
    """Take the idle reading, then sample in the background until the block
    ends. On a source that names processes, what other programs gain or
    give back during the step is left out of it (:class:`OthersAside`)."""
    before = _loaded_names(env)
    reader = OthersAside(env.reader) if OthersAside.wraps(env.reader) else env.reader
    idle = read_used(reader)
    env.last_idle_bytes = idle
    sampler = Sampler(reader, hz=env.hz)
    step = Step(name, idle, sampler, env.limit_bytes, blind=env.blind)
    env.say("step", name=name, step=step)
    sampler.start()
    try:
        yield step
    finally:
        sampler.stop()
        after = _loaded_names(env) if before else None
        if before and after is not None and before - after:
            # Ollama made room by unloading a model that was there at the idle
            # reading: the readings fell by its size, so the peak is not this model's
            step.evicted = tuple(sorted(before - after))
            step.invalidate(f"Ollama unloaded {', '.join(step.evicted)} during the step (an eviction): "
                            "the memory it freed hides this step's own peak")
        moved = getattr(reader, "moved", 0)
        if abs(moved) >= sanity.NOISE_BYTES:
            step.others_moved = moved
        env.say("step_done", name=name, step=step)


def _loaded_names(env: ProbeEnv) -> set[str] | None:
    """The models ``ollama ps`` lists now; None when it cannot say."""
    try:
        return {m.name for m in env.api.ps()}
    except Cancelled:
        raise
    except Exception:  # noqa: BLE001 - evidence of an eviction, never a reason to fail the step
        return None


def measure_checked(run_once: Callable[[], tuple[Step, Any]], problems: Callable[[Step, Any], list[str]],
                    notes: list[str]) -> tuple[Step, Any]:
    """Run one measurement; if its figures break a sanity invariant
    (:mod:`probes.sanity`), measure once more, and if the second try breaks
    one too, mark its step unmeasured with the reasons. Notes say what happened."""
    step, data = run_once()
    found = problems(step, data) if step.measured else []
    if not found:
        return step, data
    notes.append(f"{step.name}: measured again because " + "; ".join(found))
    step, data = run_once()
    found = problems(step, data) if step.measured else []
    if found:
        step.invalidate(sanity.summarize(found))
        notes.append(f"{step.name}: not counted: " + "; ".join(found))
    return step, data

