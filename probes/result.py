"""What a probe hands back: :class:`ProbeResult` (facts for the rules, charts
for the report, rows for the terminal) and the :class:`Chart` of one step.

A result renders itself in the terminal (``__rich__``), serialises for
``--json`` and the report, and carries facts in the contract of
``rules/facts.py``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.table import Table

from probes.units import fmt_size


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
    #: the probe ran to the end and the server answered it; never a verdict
    #: (whether what it measured fits is the rules' reading of its facts)
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
        table = Table(title=f"probe {self.name} — {'ran' if self.ok else 'broke off'} ({self.wall_s:.1f}s)",
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
SIZE_KEYS = frozenset({"peak", "idle", "after load", "settled", "limit", "ollama size", "drift/min"})


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

