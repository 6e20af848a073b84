"""A probe running in the chat: a live panel with the memory gauge against
the limit and a sparkline, while the probe works in a thread. Ctrl-C stops
the probe (the probe restores the server) and raises
:class:`probes.base.Cancelled`; a second Ctrl-C quits the chat.
"""
from __future__ import annotations

import signal
import threading
from typing import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.text import Text

from common.catalog import t
from assistant.session.render import probe_name
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
    """Run ``work`` in a thread while a live panel shows its memory. Ctrl-C
    asks the probe to stop (``env.cancel``); once it has ended, and so put
    the server back, Cancelled is raised. A second Ctrl-C quits the chat
    (QuitSession). While the panel is up, Ctrl-C only sets a flag (a handler
    of its own): a KeyboardInterrupt landing wherever the panel's code
    happens to be, as it is drawn or taken down, once left a refresh running
    and the chat hung."""
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
    presses = {"n": 0}

    def on_ctrl_c(signum, frame):
        presses["n"] += 1
        env.cancel.set()

    old_progress = env.progress
    env.progress = lambda event, data: state.__setitem__("step", data.get("step")) if event == "step" else None
    env.cancel.clear()
    old_handler = _handle_sigint(on_ctrl_c)
    try:
        worker.start()
        said = 0
        with Live(_panel(label, state, env), console=console, refresh_per_second=8, transient=True) as live:
            while not done.wait(0.12):
                if presses["n"] > 1:
                    raise QuitSession()
                if presses["n"] and not said:
                    said = 1
                    console.print(t("ui.probe.stopping"))
                live.update(_panel(label, state, env, stopping=bool(presses["n"])))
    finally:
        _handle_sigint(old_handler)
        env.progress = old_progress
    interrupted = presses["n"] > 0
    if "error" in box:
        if isinstance(box["error"], Cancelled) or interrupted:
            console.print(t("ui.probe.stopped"))
            raise Cancelled("stopped by the user")
        raise box["error"]
    if interrupted:
        console.print(t("ui.probe.stopped"))
        raise Cancelled("stopped by the user")
    return box["result"]


def _handle_sigint(handler):
    """Install ``handler`` for SIGINT and return the one it replaces; off the
    main thread (where Python refuses), nothing changes."""
    if threading.current_thread() is not threading.main_thread() or handler is None:
        return None
    return signal.signal(signal.SIGINT, handler)


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
    title = t("ui.probe.stopping") if stopping else t("ui.probe.running", name=probe_name(label))
    return Panel(Group(Text(step.name if step else label, style="bold"), bar, text,
                       Text(sparkline(values), style="green")), title=title, title_align="left")

