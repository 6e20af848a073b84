"""A probe running in the chat: a live panel with the memory gauge against
the limit and a sparkline, while the probe works in a thread. Ctrl-C stops
the probe (the probe restores the server) and raises
:class:`probes.base.Cancelled`; a second Ctrl-C quits the chat.
"""
from __future__ import annotations

import threading
from typing import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.text import Text

from common.catalog import t
from probes.base import Cancelled
from probes.result import ProbeResult
from probes.units import fmt_size

SPARK = "▁▂▃▄▅▆▇█"


class QuitSession(Exception):
    """The user typed /quit or pressed Ctrl-C twice."""


def sparkline(values: list[int], width: int = 40) -> str:
    if not values:
        return ""
    values = values[-width:]
    lo, hi = min(values), max(values)
    span = hi - lo or 1
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in values)


def run_probe(console: Console, label: str, work: Callable[[], ProbeResult], env) -> ProbeResult:
    """Run ``work`` in a thread while a live panel shows its memory; Ctrl-C
    stops the probe (it restores the server) and raises Cancelled, a second
    Ctrl-C quits."""
    box: dict = {}
    # an Event, not worker.is_alive(): on CPython 3.11-3.12 a join cut by Ctrl-C leaves
    # the thread reading as finished while its probe still runs (and restores the server)
    done = threading.Event()

    def target():
        try:
            box["result"] = work()
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=target, name=f"probe-{label}", daemon=True)
    state = {"step": None}
    old_progress = env.progress
    env.progress = lambda event, data: state.__setitem__("step", data.get("step")) if event == "step" else None
    env.cancel.clear()
    worker.start()
    interrupted = False
    try:
        with Live(_panel(label, state, env), console=console, refresh_per_second=8,
                  transient=True) as live:
            while not done.is_set():
                try:
                    done.wait(0.12)
                    live.update(_panel(label, state, env, stopping=interrupted))
                except KeyboardInterrupt:
                    if interrupted:
                        raise QuitSession() from None
                    interrupted = True
                    env.cancel.set()
                    console.print(t("ui.probe.stopping"))
    finally:
        env.progress = old_progress
    if "error" in box:
        if isinstance(box["error"], Cancelled) or interrupted:
            console.print(t("ui.probe.stopped"))
            raise Cancelled("stopped by the user")
        raise box["error"]
    if interrupted:
        console.print(t("ui.probe.stopped"))
        raise Cancelled("stopped by the user")
    return box["result"]



def _panel(label: str, state: dict, env, stopping: bool = False) -> Panel:
    step = state.get("step")
    limit = env.limit_bytes
    used = peak = 0
    values: list[int] = []
    if step is not None:
        values = [max(0, u - step.idle_bytes) for _, u in step.sampler.timeline]
        used = values[-1] if values else 0
        peak = step.peak
    bar = ProgressBar(total=float(limit or max(peak, 1)), completed=float(min(used, limit or used)), width=40)
    text = Text(t("ui.gauge", used=fmt_size(used), limit=fmt_size(limit), peak=fmt_size(peak)))
    title = t("ui.probe.stopping") if stopping else t("ui.probe.running", name=label)
    return Panel(Group(Text(step.name if step else label, style="bold"), bar, text,
                       Text(sparkline(values), style="green")), title=title, title_align="left")

