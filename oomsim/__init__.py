"""A GPU and an Ollama server in one process, played from a scenario file.

``start(scenario)`` serves Ollama's API on a loopback port and hands back what
the rest of oomvet needs to point at it: the URL, a pynvml-compatible object
and an ``*-smi`` command runner for the memory readers, and a
:class:`probes.server.ServerControl` for restarts. The probes and the rules
cannot tell it from a real server; the memory numbers come from
:mod:`probes.memmodel`, the same arithmetic the probes predict with. Scenario
format and the shipped scenarios: ``docs/scenarios.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from oomsim.devices import SimNvml, SmiRunner
from oomsim.scenario import Scenario, ScenarioError, load_scenario, scenario_from_dict
from oomsim.server import SimControl, SimServer
from oomsim.settings import SimError
from oomsim.state import SimState

__all__ = ["start", "SimHandle", "Scenario", "ScenarioError", "load_scenario", "scenario_from_dict",
           "SimServer", "SimState", "SimNvml", "SmiRunner", "SimControl", "SimError"]


@dataclass
class SimHandle:
    """A running simulator. Use as a context manager, or call ``stop()``."""

    scenario: Scenario
    server: SimServer
    nvml: SimNvml
    smi_runner: Callable[[Sequence[str]], str] | None
    control: SimControl

    @property
    def host(self) -> str:
        """The server URL, e.g. ``http://127.0.0.1:43121``."""
        return self.server.host

    @property
    def state(self) -> SimState:
        return self.server.state

    @property
    def vendor(self) -> str:
        return self.scenario.device.vendor

    @property
    def unified(self) -> bool:
        return self.scenario.device.unified

    def log(self) -> list[str]:
        """The server log so far (slog-style lines, like ``journalctl -u ollama``)."""
        return list(self.server.state.log)

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> "SimHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start(scenario: str | Path | Scenario | dict, port: int = 0) -> SimHandle:
    """Load the scenario (a path, a parsed dict or a Scenario) and start serving.
    A bad scenario raises ScenarioError, a busy port ProbeError; one line each."""
    if isinstance(scenario, Scenario):
        scn = scenario
    elif isinstance(scenario, dict):
        scn = scenario_from_dict(scenario)
    else:
        scn = load_scenario(scenario)
    server = SimServer(scn, port=port).start()
    smi = SmiRunner(server.state) if scn.device.vendor in ("nvidia", "amd") else None
    return SimHandle(scn, server, SimNvml(server.state), smi, server.control())
