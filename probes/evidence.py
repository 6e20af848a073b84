"""What a failed load or request leaves behind as evidence: the server log
lines it wrote (a :class:`LogWindow` opened before it), the failure fields
read from its error text and those lines (:mod:`probes.oomtext`), and a model
Ollama spilled to the CPU (``ollama ps`` showing less than 100% GPU).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from probes.base import ProbeEnv
from probes.notes import Note
from probes.units import fmt_size


def spill_error(env: ProbeEnv, model: str) -> str | None:
    """On a GPU, a model Ollama could not fit is not refused: layers go to the
    CPU (``size_vram < size`` in ``ollama ps``). That is a memory shortage too."""
    if not env.on_gpu:
        return None
    loaded = env.api.loaded(model)
    if loaded is None or loaded.placement == "gpu":
        return None
    return Note("probe.spilled", vram=fmt_size(loaded.size_vram_bytes), size=fmt_size(loaded.size_bytes))


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
    """``failure`` / ``oom_marker`` for a failed load or request, from
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
