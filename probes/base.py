"""What every measurement procedure shares: its environment, sampling a step,
restoring the server afterwards, and the shape of a result.

A probe takes a :class:`ProbeEnv` (the server, the memory reader, the limit),
measures, and returns a :class:`ProbeResult` that renders itself in the
terminal, serialises for ``--json`` and the report, and turns into facts in
the contract of ``rules/facts.py``. Usage is always measured as a difference
from the idle reading taken at the start of a step, so memory held by other
processes never counts against the model.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rich.table import Table

from probes.errors import ProbeError, ProbeTimeout
from probes.ollama_api import Loaded, Ollama
from probes.sampler import Sampler
from probes.server import ForeignServer, ServerControl
from probes.units import fmt_size

# usage back within this of the level before a request counts as "released"
BACK_TO_BASELINE_FRACTION = 0.05
BACK_TO_BASELINE_MIN_BYTES = 16 << 20


class Cancelled(ProbeError):
    """The user stopped the probe (Ctrl-C in the chat); the server was restored."""

    exit_code = 130


@dataclass
class ProbeEnv:
    """Everything a probe may touch. ``limit_bytes`` caps the model's usage
    (min of --budget and what the device can give); None means no cap."""

    api: Ollama
    reader: Any                      # probes.memory MemoryReader
    limit_bytes: int | None = None
    device: Any = None               # probes.memory DeviceInfo
    control: ServerControl = field(default_factory=ForeignServer)
    hz: float = 20.0
    timeout_s: float = 900.0
    progress: Callable[[str, dict], None] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    on_gpu: bool = False             # True when the device is a GPU (spilling to CPU is then a shortage)
    # told of every change to the server before it is made and after it is
    # undone (the session journal), so a killed session's changes can be undone
    on_change: Callable[[str, dict], None] | None = None

    def changed(self, event: str, **data) -> None:
        if self.on_change is not None:
            self.on_change(event, data)

    def say(self, event: str, **data) -> None:
        if self.progress is not None:
            self.progress(event, data)

    def used(self) -> int:
        refresh = getattr(self.reader, "refresh", None)
        if refresh is not None:
            refresh()
        reading = self.reader.read()
        return int(reading.used_bytes or 0)

    def sleep(self, seconds: float, deadline: float | None = None) -> None:
        """Sleep that wakes up for Ctrl-C (``cancel``) and the probe timeout."""
        end = time.monotonic() + seconds
        while True:
            self.check(deadline)
            left = end - time.monotonic()
            if left <= 0:
                return
            self.cancel.wait(min(left, 0.1))

    def check(self, deadline: float | None) -> None:
        if self.cancel.is_set():
            raise Cancelled("probe stopped by the user")
        if deadline is not None and time.monotonic() > deadline:
            raise ProbeTimeout(f"the probe ran past its timeout of {self.timeout_s:.0f}s")


@dataclass(frozen=True)
class Chart:
    """A memory timeline for the report: ``timeline`` is (seconds, bytes used by
    the model), already relative to ``baseline_bytes``'s idle reading."""

    name: str
    baseline_bytes: int
    peak_bytes: int | None
    limit_bytes: int | None
    timeline: tuple[tuple[float, int], ...]
    marks: tuple[tuple[float, str], ...] = ()

    def to_dict(self) -> dict:
        return {"name": self.name, "baseline": self.baseline_bytes, "peak": self.peak_bytes,
                "limit": self.limit_bytes, "timeline": [list(p) for p in self.timeline],
                "marks": [list(m) for m in self.marks]}


@dataclass
class ProbeResult:
    """What a probe found: facts for the rules, charts for the report, rows for the terminal."""

    name: str
    ok: bool
    facts: list[dict] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)       # one dict per measured step, for tables
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return {"probe": self.name, "ok": self.ok, "error": self.error, "wall_s": round(self.wall_s, 2),
                "facts": self.facts, "rows": self.rows, "notes": self.notes,
                "charts": [c.to_dict() for c in self.charts]}

    def __rich__(self) -> Table:
        table = Table(title=f"probe {self.name} — {'ok' if self.ok else 'failed'} ({self.wall_s:.1f}s)",
                      title_justify="left")
        columns = list(dict.fromkeys(k for row in self.rows for k in row))
        if len(self.rows) == 1:  # one step: a key/value list reads better than one wide row
            table.add_column("")
            table.add_column("")
            for col in columns:
                table.add_row(col, _cell(self.rows[0].get(col)))
            if self.error:
                table.caption = self.error
            return table
        for col in columns:
            table.add_column(col, overflow="fold")
        for row in self.rows:
            table.add_row(*(_cell(row.get(col)) for col in columns))
        if self.error:
            table.caption = self.error
        return table


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and abs(value) >= 1 << 20:
        return fmt_size(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


@dataclass
class Step:
    """One sampled step: the idle reading, then everything the sampler saw."""

    name: str
    idle_bytes: int
    sampler: Sampler
    limit_bytes: int | None
    started: float = field(default_factory=time.monotonic)
    _seen_max: int = 0  # the highest reading taken through now(), between sampler ticks

    def now(self) -> int:
        """The model's usage now (reading minus idle); a reading the source
        could not give (n/a) falls back to the last value the sampler saw."""
        refresh = getattr(self.sampler.reader, "refresh", None)
        if refresh is not None:  # a runner started a moment ago must be counted now
            refresh()
        used = self.sampler.reader.read().used_bytes
        if used is None:
            timeline = self.sampler.timeline
            used = timeline[-1][1] if timeline else self.idle_bytes
        self._seen_max = max(self._seen_max, used)
        return used - self.idle_bytes

    def mark(self, label: str) -> None:
        self.sampler.mark(label)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def peak(self) -> int:
        peak = max(self.sampler.peak_bytes or 0, self._seen_max, self.idle_bytes)
        return peak - self.idle_bytes

    def over_limit(self) -> bool:
        return self.limit_bytes is not None and self.peak > self.limit_bytes

    def over_limit_text(self) -> str:
        return f"out of memory: peak {fmt_size(self.peak)} is over the limit of {fmt_size(self.limit_bytes)}"

    def chart(self) -> Chart:
        timeline = tuple((round(t, 3), max(0, used - self.idle_bytes)) for t, used in self.sampler.timeline)
        marks = tuple((round(t, 3), label) for t, label in getattr(self.sampler, "marks", ()))
        return Chart(self.name, 0, self.peak, self.limit_bytes, timeline, marks)


@contextlib.contextmanager
def sampled(env: ProbeEnv, name: str) -> Iterator[Step]:
    """Take the idle reading, then sample in the background until the block ends."""
    idle = env.used()
    sampler = Sampler(env.reader, hz=env.hz)
    step = Step(name, idle, sampler, env.limit_bytes)
    env.say("step", name=name, step=step)
    sampler.start()
    try:
        yield step
    finally:
        sampler.stop()
        env.say("step_done", name=name, step=step)


@contextlib.contextmanager
def restoring(env: ProbeEnv) -> Iterator[list[Loaded]]:
    """Leave the server as it was: unload what the probe loaded, and reload a
    model that was loaded before at its old context length. Runs on errors,
    timeouts and Ctrl-C too."""
    before = env.api.ps()
    key = f"loaded-{time.monotonic_ns()}"
    was = [{"name": m.name, "context_length": m.context_length} for m in before]
    env.changed("loaded_before", key=key, host=env.api.host, models=was)
    try:
        yield before
    finally:
        cancel_was_set = env.cancel.is_set()
        env.cancel.clear()  # the restore itself must not be cancelled
        try:
            restore(env.api, before)
        except Exception as exc:
            env.changed("restore_failed", key=key, host=env.api.host, models=was, reason=str(exc))
            raise
        finally:
            if cancel_was_set:
                env.cancel.set()
        env.changed("restored", key=key)


@contextlib.contextmanager
def server_settings(env: ProbeEnv, wanted: dict[str, str]) -> Iterator[bool]:
    """Run the block with these server-wide settings (``OLLAMA_NUM_PARALLEL``...),
    restarting a server oomvet owns and putting it back afterwards. Yields
    False when the server would need a restart oomvet may not do: the block
    then measures the server as it is."""
    current = env.control.env()
    defaults = {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KV_CACHE_TYPE": "f16", "OLLAMA_FLASH_ATTENTION": "0"}
    changes = {k: str(v) for k, v in wanted.items() if current.get(k, defaults.get(k, "")) != str(v)}
    if not changes:
        yield True
        return
    if not env.control.can_restart():
        yield False
        return
    back = {k: current.get(k, defaults.get(k, "")) for k in changes}
    key = f"settings-{time.monotonic_ns()}"
    env.changed("settings_before", key=key, host=env.api.host, settings=back, wanted=changes)
    env.control.restart(changes)
    try:
        yield True
    finally:
        try:
            env.control.restart(back)
        except Exception as exc:
            env.changed("restore_failed", key=key, host=env.api.host, settings=back, reason=str(exc))
            raise
        env.changed("settings_restored", key=key)


def restore(api: Ollama, before: list[Loaded]) -> None:
    want = {m.name: m for m in before}
    for m in api.ps():
        if m.name not in want or (want[m.name].context_length and m.context_length != want[m.name].context_length):
            api.unload(m.name)
    now = {m.name for m in api.ps()}
    for m in before:
        if m.name not in now:
            options = {"num_ctx": m.context_length} if m.context_length else {}
            api.load(m.name, options)


def spill_error(env: ProbeEnv, model: str) -> str | None:
    """On a GPU, a model Ollama could not fit is not refused: layers go to the
    CPU (``size_vram < size`` in ``ollama ps``). That is a memory shortage too."""
    if not env.on_gpu:
        return None
    loaded = env.api.loaded(model)
    if loaded is None or loaded.placement == "gpu":
        return None
    return (f"spilled to the CPU: only {fmt_size(loaded.size_vram_bytes)} of {fmt_size(loaded.size_bytes)} "
            f"on the GPU")


def timed(fn):
    """Decorator: fill ``wall_s`` of the ProbeResult the probe returns."""
    def wrapper(*args, **kwargs):
        started = time.monotonic()
        result = fn(*args, **kwargs)
        result.wall_s = time.monotonic() - started
        return result
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper
