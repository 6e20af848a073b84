"""A background sampler around any probe step: many readings a second, the
peak, and the timeline for the report chart.

A load or a long prompt can spike memory for a fraction of a second; a reading
a second (``nvidia-smi -l 1``) misses that, so the sampler reads on its own
thread at a fixed rate (20 Hz by default), keeps every (time, used) point and
the peak, and flags the first reading above the limit, which the probes treat
as an out-of-memory outcome like an error. It always takes a reading when it
starts and when it stops, so even a step shorter than one period has a first
and a last value. Slow sources (nvidia-smi takes tens of ms a call) simply get
fewer readings; ``hz_achieved`` says how many.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from probes.memory.base import MemoryReader

Wait = Callable[[float], bool]   # sleep up to timeout; True means "stop now"


@dataclass(frozen=True)
class SampleSummary:
    peak_bytes: int | None
    first_bytes: int | None
    last_bytes: int | None
    timeline: tuple[tuple[float, int], ...]   # (seconds since start, used bytes)
    marks: tuple[tuple[float, str], ...]      # (seconds since start, label)
    hz_achieved: float | None
    peak_s: float | None = None               # when the peak was read, since start
    duration_s: float = 0.0
    readings: int = 0                         # readings with a value
    errors: int = 0                           # readings that raised or had no value
    limit_bytes: int | None = None            # the ceiling compared with each reading
    over_limit_s: float | None = None         # first reading above it, since start; an observation
    # (when the ceiling was crossed), not a verdict: whether a step fits is the rules' reading
    started_monotonic: float = 0.0            # time.monotonic() at start, to align clocks

    @property
    def rise_bytes(self) -> int | None:
        """Peak above the first reading: what the step itself added."""
        if self.peak_bytes is None or self.first_bytes is None:
            return None
        return self.peak_bytes - self.first_bytes

    def to_dict(self) -> dict:
        return {
            "peak_bytes": self.peak_bytes, "first_bytes": self.first_bytes,
            "last_bytes": self.last_bytes, "rise_bytes": self.rise_bytes,
            "peak_s": self.peak_s, "duration_s": self.duration_s,
            "hz_achieved": self.hz_achieved, "readings": self.readings, "errors": self.errors,
            "over_limit_s": self.over_limit_s,
            "limit_bytes": self.limit_bytes,
            "timeline": [list(p) for p in self.timeline], "marks": [list(m) for m in self.marks],
        }


class Sampler:
    """``with Sampler(reader, hz=20, limit_bytes=limit) as s: step(); s.mark("request")``
    then ``s.summary``. ``limit_bytes`` may be a :class:`probes.budget.Limit`
    (its ``ceiling_bytes`` is used: the reading that means over the limit)."""

    def __init__(self, reader: MemoryReader, hz: float = 20.0, limit_bytes=None, *,
                 clock: Callable[[], float] = time.monotonic, wait: Wait | None = None):
        if not hz or hz <= 0:
            raise ValueError(f"sampling rate must be above 0 Hz, got {hz!r}")
        self.reader = reader
        self.hz = float(hz)
        self.limit_bytes = getattr(limit_bytes, "ceiling_bytes", limit_bytes)
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None
        self._timeline: list[tuple[float, int]] = []
        self._marks: list[tuple[float, str]] = []
        self._peak: int | None = None
        self._peak_s: float | None = None
        self._errors = 0
        self._over_s: float | None = None
        self.over_limit_event = threading.Event()
        self.summary: SampleSummary | None = None

    # -- lifecycle -------------------------------------------------------
    def start(self) -> "Sampler":
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._t0 = self._clock()
        self._take()
        self._thread = threading.Thread(target=self._loop, name="oomvet-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> SampleSummary:
        if self.summary is not None:
            return self.summary
        if self._thread is None:
            raise RuntimeError("sampler was never started")
        self._stop.set()
        self._thread.join()
        self._take()
        self.summary = self._summarize()
        return self.summary

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _loop(self) -> None:
        period = 1.0 / self.hz
        due = self._t0 + period
        while not (self._wait(max(0.0, due - self._clock())) or self._stop.is_set()):
            self._take()
            due += period
            now = self._clock()
            if due < now:  # the source is slower than the rate: read again at once, no burst
                due = now

    def _take(self) -> None:
        try:
            used = self.reader.read().used_bytes
        except Exception:  # noqa: BLE001 - one failed reading must not end the sampling; it is counted
            used = None
        t = self._clock() - self._t0
        with self._lock:
            if used is None:
                self._errors += 1
                return
            self._timeline.append((t, int(used)))
            if self._peak is None or used > self._peak:
                self._peak, self._peak_s = int(used), t
            if self.limit_bytes is not None and used > self.limit_bytes and self._over_s is None:
                self._over_s = t
                self.over_limit_event.set()

    # -- what the report reads -------------------------------------------
    def mark(self, label: str) -> None:
        """A named instant ("load", "request") drawn on the report chart."""
        if self._t0 is None:
            raise RuntimeError("mark() before start()")
        with self._lock:
            self._marks.append((self._clock() - self._t0, str(label)))

    @property
    def peak_bytes(self) -> int | None:
        with self._lock:
            return self._peak

    @property
    def timeline(self) -> list[tuple[float, int]]:
        with self._lock:
            return list(self._timeline)

    @property
    def marks(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self._marks)

    @property
    def over_limit(self) -> bool:
        return self.over_limit_event.is_set()

    @property
    def errors(self) -> int:
        """Readings so far that raised or had no value: a step with any is unmeasured."""
        with self._lock:
            return self._errors

    def _summarize(self) -> SampleSummary:
        with self._lock:
            tl = tuple(self._timeline)
            marks = tuple(self._marks)
        span = tl[-1][0] - tl[0][0] if len(tl) > 1 else 0.0
        return SampleSummary(
            peak_bytes=self._peak,
            first_bytes=tl[0][1] if tl else None,
            last_bytes=tl[-1][1] if tl else None,
            timeline=tl,
            marks=marks,
            hz_achieved=round((len(tl) - 1) / span, 2) if span > 0 else None,
            peak_s=self._peak_s,
            duration_s=self._clock() - self._t0,
            readings=len(tl),
            errors=self._errors,
            limit_bytes=self.limit_bytes,
            over_limit_s=self._over_s,
            started_monotonic=self._t0,
        )
