"""The simulated Ollama server's state: what is loaded, where, and what the
device reads at any moment, behind one lock.

:class:`SimState` is put together from one part per job: the server's
environment (:mod:`oomsim.settings`), the device's memory
(:mod:`oomsim.memory`, per card), scheduling and loading on both engines
(:mod:`oomsim.loads`; on several cards :mod:`oomsim.spread_loads`),
evictions (:mod:`oomsim.evict`) and requests (:mod:`oomsim.requests`); this
module holds what they share (the runners, the log, expiry). The HTTP layer
(:mod:`oomsim.server`) only turns this into JSON; everything here is
callable from tests without a socket.
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Callable

from probes.serverinfo import vram_tier as vram_default_ctx
from oomsim.evict import Evictions
from oomsim.loads import Loads
from oomsim.memory import DeviceMemory
from oomsim.messages import NOT_FOUND, _library, human_bytes2
from oomsim.requests import Requests
from oomsim.runner import Runner
from oomsim.scenario import ModelSpec, Scenario
from oomsim.settings import ServerEnv, SimError, is_current
from oomsim.spread_loads import SpreadLoads


class SimState(ServerEnv, DeviceMemory, Loads, SpreadLoads, Evictions, Requests):
    """Thread-safe state of one simulated server and its device."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float] = time.monotonic):
        self.scenario = scenario
        self.clock = clock
        self.lock = threading.RLock()
        self.runners: dict[str, Runner] = {}
        self.log: list[str] = []
        self._pids = itertools.count(41000)
        self._ids = itertools.count(1)
        self._env: dict[str, str] = {}
        self.restarts = 0
        self.current = is_current(scenario.server.version)
        self.reset_env()
        self._log(f'msg="Listening on 127.0.0.1 (version {scenario.server.version})"')
        if self.current:
            for i, dev in enumerate(scenario.devices):
                self._log(f'msg="inference compute" id=GPU-{i} library={_library(self.vendor)} '
                          f'name="{dev.name}" total="{human_bytes2(dev.total_bytes)}"')
            self._log(f'msg="vram-based default context" total_vram="{human_bytes2(self._tier_vram())}" '
                      f'default_num_ctx={vram_default_ctx(self._tier_vram())}')

    # -- models ----------------------------------------------------------------
    def find(self, name: str) -> ModelSpec:
        model = self.scenario.find(name or "")
        if model is None:
            raise SimError(404, NOT_FOUND.format(name=name))
        return model

    def loaded(self) -> list[Runner]:
        with self.lock:
            self._expire(self.clock())
            return sorted(self.runners.values(), key=lambda r: -(math.inf if r.expires_at is None else r.expires_at))

    def _expire(self, now: float) -> None:
        for key, r in list(self.runners.items()):
            if r.expires_at is not None and now >= r.expires_at and not r.transient and not r.refs:
                self._drop(key, "expired")

    def _drop(self, key: str, why: str) -> None:
        r = self.runners.pop(key, None)
        if r is not None:
            r.alive = False
            self._log(f'msg="runner stopped" model={r.model.tag} pid={r.pid} reason="{why}"')

    def unload(self, name: str) -> None:
        """``keep_alive: 0``: gone now, or as soon as its requests are answered."""
        model = self.find(name)
        with self.lock:
            r = self.runners.get(model.tag.lower())
            if r is not None and (r.transient or r.refs):
                r.expires_at, r.unloading = self.clock(), True
            else:
                self._drop(model.tag.lower(), "keep_alive 0")

    def _log(self, line: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.log.append(f"time={stamp} level=INFO source=sim {line}" if "level=" not in line
                        else f"time={stamp} {line} source=sim")
        del self.log[:-2000]

    # -- views for the API ---------------------------------------------------------
    def expires_at_iso(self, runner: Runner) -> str:
        if runner.expires_at is None:
            when = datetime.now().astimezone() + timedelta(days=365 * 290)
        else:
            when = datetime.now().astimezone() + timedelta(seconds=max(runner.expires_at - self.clock(), 0.0))
        return when.isoformat()

