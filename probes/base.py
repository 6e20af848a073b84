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
from probes.ollama_api import Loaded, Ollama, canonical_name
from probes import sanity
from probes.sampler import Sampler
from probes.server import ForeignServer, ServerControl
from probes.notes import Note
from probes.units import fmt_size

#: How close to the idle level a reading must come after an unload before the
#: model counts as gone. Not a verdict (the rules judge readings): only when to
#: stop waiting for the old process to exit. A runner that has exited frees all
#: of its memory at once; 16 MiB is above the jitter of host RSS and NVML.
RELEASE_SLACK_BYTES = 16 << 20


def read_used(reader) -> int | None:
    """``reader``'s used bytes now, or None when the reading failed."""
    try:
        refresh = getattr(reader, "refresh", None)
        if refresh is not None:  # a process started a moment ago must be counted now
            refresh()
        used = reader.read().used_bytes
    except Exception:  # noqa: BLE001 - a failed reading is a value (unmeasured), not a crash
        return None
    return None if used is None else int(used)


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
    #: why the memory source cannot see the model's process or device (a server
    #: on another machine): its figures are then reported, never measured
    blind: str | None = None
    release_timeout_s: float = 60.0
    last_idle_bytes: int | None = None   # the idle reading of the latest step, for unload()
    log: Any = None                      # probes.serverlog.ServerLog: the server's log, when readable
    # told of every change to the server before it is made and after it is
    # undone (the session journal), so a killed session's changes can be undone
    on_change: Callable[[str, dict], None] | None = None

    def changed(self, event: str, **data) -> None:
        if self.on_change is not None:
            self.on_change(event, data)

    def say(self, event: str, **data) -> None:
        if self.progress is not None:
            self.progress(event, data)

    def used(self) -> int | None:
        """One reading of the memory source; None when it failed or the source
        had no value (never 0: a dead source must not look like free memory)."""
        return read_used(self.reader)

    def unload(self, model: str) -> None:
        """Unload ``model`` and wait until it is really gone: Ollama drops it
        from ``/api/ps`` before its process has exited and freed its memory, so
        the next idle reading would count the old model. Waits until the
        source reads back at the idle level of the last step (within
        :data:`RELEASE_SLACK_BYTES`), or raises ProbeError at the deadline."""
        self.api.unload(model)
        target = self.last_idle_bytes
        if target is None:
            return
        deadline = time.monotonic() + self.release_timeout_s
        used = self.used()
        while used is None or used > target + RELEASE_SLACK_BYTES:
            if time.monotonic() > deadline:
                seen = "could not be read" if used is None else f"still {fmt_size(used - target)} above idle"
                raise ProbeError(f"{model} was unloaded but its memory did not come back within "
                                 f"{self.release_timeout_s:.0f}s ({seen})",
                                 hint="another process may be loading memory; check `ollama ps` and the process list")
            self.cancel.wait(0.05)
            used = self.used()

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
                table.add_row(col, _cell(self.rows[0].get(col), col))
            if self.error:
                table.caption = self.error
            return table
        for col in columns:
            table.add_column(col, overflow="fold")
        for row in self.rows:
            table.add_row(*(_cell(row.get(col), col) for col in columns))
        if self.error:
            table.caption = self.error
        return table


#: row keys whose values are bytes (or bytes per minute): always shown as sizes,
#: so a small peak reads "464.00 KiB", never 475136
SIZE_KEYS = frozenset({"peak", "idle", "after load", "settled", "limit", "weights", "ollama size", "drift/min"})


def _cell(value, key: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key in SIZE_KEYS and isinstance(value, (int, float)):
        return fmt_size(int(value)) + ("/min" if key == "drift/min" else "")
    if isinstance(value, int) and abs(value) >= 1 << 20:
        return fmt_size(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def over_limit_text(peak: int | None, limit: int | None) -> str:
    """The error of a load or request whose measured peak went over the limit."""
    return f"out of memory: peak {fmt_size(peak)} is over the limit of {fmt_size(limit)}"


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
        peak = self.peak
        return self.limit_bytes is not None and peak is not None and peak > self.limit_bytes

    def over_limit_text(self) -> str:
        return over_limit_text(self.peak, self.limit_bytes)

    def reading(self) -> dict:
        """The fields every measurement fact carries about its own health."""
        return {"measured": self.measured, "unmeasured": self.unmeasured}

    def chart(self) -> Chart:
        idle = self.idle_bytes or 0
        timeline = tuple((round(t, 3), max(0, used - idle)) for t, used in self.sampler.timeline) \
            if self.idle_bytes is not None else ()
        marks = tuple((round(t, 3), label) for t, label in getattr(self.sampler, "marks", ()))
        return Chart(self.name, 0, self.peak, self.limit_bytes, timeline, marks)


@contextlib.contextmanager
def sampled(env: ProbeEnv, name: str) -> Iterator[Step]:
    """Take the idle reading, then sample in the background until the block ends."""
    idle = env.used()
    env.last_idle_bytes = idle
    sampler = Sampler(env.reader, hz=env.hz)
    step = Step(name, idle, sampler, env.limit_bytes, blind=env.blind)
    env.say("step", name=name, step=step)
    sampler.start()
    try:
        yield step
    finally:
        sampler.stop()
        env.say("step_done", name=name, step=step)


#: seconds the restore waits for requests still running on the server (a load cut by Ctrl-C)
RESTORE_SETTLE_S = 30.0
#: after a probe that was cut (Ctrl-C, an error, a timeout) with requests still on the
#: server, how long the restore watches ``/api/ps`` for a load landing after it
RESTORE_WATCH_S = 3.0


@contextlib.contextmanager
def restoring(env: ProbeEnv) -> Iterator[list[Loaded]]:
    """Leave the server as it was: unload what the probe loaded, and reload a
    model that was loaded before at its old context length. Runs on errors,
    timeouts and Ctrl-C too."""
    before = env.api.ps()
    key = f"loaded-{time.monotonic_ns()}"
    was = [{"name": m.name, "context_length": m.context_length} for m in before]
    env.changed("loaded_before", key=key, host=env.api.host, models=was)
    cut = True
    try:
        yield before
        cut = False
    finally:
        cancel_was_set = env.cancel.is_set()
        env.cancel.clear()  # the restore itself must not be cancelled
        settled, busy = True, 0
        try:
            # a load cut short by Ctrl-C or SIGTERM goes on in the server: let it end,
            # or the unload below runs first and the model stays loaded after we leave
            settle = getattr(env.api, "settle", None)
            if settle is not None:
                busy = env.api.in_flight()
                settled = bool(settle(RESTORE_SETTLE_S))
            # a cut request may have started a load that lands after the first pass
            restore(env.api, before, watch_s=RESTORE_WATCH_S if cut and busy else 0.0)
        except Exception as exc:
            env.changed("restore_failed", key=key, host=env.api.host, models=was, reason=str(exc),
                        settled=settled)
            raise
        finally:
            if cancel_was_set:
                env.cancel.set()
        env.changed("restored", key=key, settled=settled)


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


def restore(api: Ollama, before: list[Loaded], watch_s: float = 0.0, passes: int = 3) -> None:
    """Unload what was not loaded before (or is at another context), then
    reload what was, at its old context length. Names are compared canonically.

    With ``watch_s``, the server is then watched that long, and put back again
    (``passes`` times in all) if it moves: an unload asked for while the server
    is still loading that model does nothing in Ollama (``expireRunner`` only
    sees loaded runners), so a load a cut request had started lands after the
    first pass. Raises ProbeError if it still differs after the last pass."""
    for _ in range(max(1, passes)):
        _put_back(api, before)
        if _stays(api, before, watch_s):
            return
    raise ProbeError(f"the models loaded on {api.host} kept changing while oomvet put them back: "
                     f"{_ps_line(api.ps())} (was {_ps_line(before)})")


def _put_back(api: Ollama, before: list[Loaded]) -> None:
    want = {canonical_name(m.name): m for m in before}
    for m in api.ps():
        old = want.get(canonical_name(m.name))
        if old is None or (old.context_length and m.context_length != old.context_length):
            api.unload(m.name)
    now = {canonical_name(m.name) for m in api.ps()}
    for m in before:
        if canonical_name(m.name) not in now:
            options = {"num_ctx": m.context_length} if m.context_length else {}
            api.load(m.name, options)


def _as_before(rows: list[Loaded], before: list[Loaded]) -> bool:
    """The same models, each at its old context length where one was known."""
    now = {canonical_name(m.name): m.context_length for m in rows}
    want = {canonical_name(m.name): m.context_length for m in before}
    return now.keys() == want.keys() and all(not ctx or now[name] == ctx for name, ctx in want.items())


def _stays(api: Ollama, before: list[Loaded], watch_s: float) -> bool:
    """True when ``/api/ps`` matches ``before`` now and at every look for ``watch_s`` seconds."""
    deadline = time.monotonic() + watch_s
    while True:
        if not _as_before(api.ps(), before):
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


def _ps_line(rows: list[Loaded]) -> str:
    return ", ".join(f"{m.name} (num_ctx {m.context_length})" if m.context_length else m.name
                     for m in rows) or "nothing loaded"


def spill_error(env: ProbeEnv, model: str) -> str | None:
    """On a GPU, a model Ollama could not fit is not refused: layers go to the
    CPU (``size_vram < size`` in ``ollama ps``). That is a memory shortage too."""
    if not env.on_gpu:
        return None
    loaded = env.api.loaded(model)
    if loaded is None or loaded.placement == "gpu":
        return None
    return Note("probe.spilled", vram=fmt_size(loaded.size_vram_bytes), size=fmt_size(loaded.size_bytes))


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


@dataclass
class LogWindow:
    """The server log lines one load or request wrote (those after ``mark``)."""

    log: Any          # probes.serverlog.ServerLog, or None: the log cannot be read
    mark: Any = None

    def lines(self) -> list[str]:
        if self.log is None:
            return []
        try:
            return list(self.log.lines_since(self.mark))
        except OSError:  # a log rotated or removed meanwhile: no evidence, not a crash
            return []


def log_window(env: ProbeEnv) -> LogWindow:
    """Open a window on the server log now (before a load or a request)."""
    if env.log is None:
        return LogWindow(None)
    try:
        return LogWindow(env.log, env.log.offset())
    except OSError:
        return LogWindow(None)


def failure_fields(gen, window: LogWindow, phase: str) -> dict:
    """``failure`` / ``oom`` / ``oom_marker`` for a failed load or request, from
    its error text and the log lines of that window (probes/oomtext.py)."""
    if gen is None or gen.ok:
        return {}
    failure = gen.failure(window.lines(), phase=phase)
    return failure.fields() if failure is not None else {}


def log_facts(window: LogWindow, source: str, model: str) -> list[dict]:
    """The ``log`` fact of what the window's lines say, if they say anything."""
    lines = window.lines()
    if not lines:
        return []
    from probes.serverlog import parse

    return [parse(lines).fact(source, model)]
