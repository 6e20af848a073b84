"""One call to a server, finished within a deadline in all.

httpx bounds each read of a reply, so a reply that keeps dripping a few bytes
at a time never times out there; :func:`within` bounds the whole call.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable


class Overdue(Exception):
    """A call ran past its whole-reply deadline."""


def within(fn: Callable[[], Any], limit_s: float | None, running: set | None = None) -> Any:
    """``fn()``, or :class:`Overdue` once ``limit_s`` seconds have passed. The
    call runs in a daemon thread that is left to end with its connection; the
    caller goes on at once (and, in the main thread, still gets Ctrl-C).
    ``running``, when given, holds the call until it has ended, so a caller
    that gave up on it (Ctrl-C during a load) can still wait for what the
    server is doing before it puts the server back (:func:`settle`).

    The wait is on an Event, not on ``Thread.join``: on CPython 3.11-3.12 a
    join cut by KeyboardInterrupt leaves the thread reading as finished
    (``is_alive()`` False, a later join returns at once) while it still runs,
    and the restore after Ctrl-C would not wait for the load it must."""
    if not limit_s or limit_s <= 0:
        return fn()
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            box["error"] = exc
        finally:
            done.set()
            if running is not None:
                running.discard(done)

    if running is not None:
        running.add(done)
    threading.Thread(target=work, name="server-call", daemon=True).start()
    if not done.wait(limit_s):
        raise Overdue()
    if "error" in box:
        raise box["error"]
    return box["value"]


def settle(running: set, limit_s: float) -> bool:
    """Wait up to ``limit_s`` in all for the calls in ``running`` to end; True
    when none is left."""
    deadline = time.monotonic() + limit_s
    for done in list(running):
        done.wait(max(0.0, deadline - time.monotonic()))
    return not running
