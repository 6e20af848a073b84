"""Which memory source to trust on this machine, and why.

Sources are tried in a fixed order, the most direct measurement first: NVML,
nvidia-smi, rocm-smi, then host memory (always available: it is how the
method runs on a CPU-only or unified-memory machine). Every source is probed
so ``oomvet devices`` can say why the others were not used. Ollama's
``/api/ps`` is an estimate and is never selected as the measurement.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from common.errors import ProbeError
from probes.memory.base import CommandRunner, MemoryReader
from probes.memory.host import HostReader
from probes.memory.nvidia_smi import NvidiaSmiReader
from probes.memory.nvml import NvmlReader
from probes.memory.rocm_smi import RocmSmiReader

SOURCE_ORDER = ("nvml", "nvidia-smi", "rocm-smi", "host")
ESTIMATE_SOURCE = "ollama-ps"


@dataclass(frozen=True)
class SourceStatus:
    name: str
    usable: bool
    reason: str     # one line, e.g. "NVML: library not found"


@dataclass(frozen=True)
class Selection:
    reader: MemoryReader
    statuses: tuple[SourceStatus, ...]
    why: str        # one line in English
    why_code: str = "first-usable"   # first-usable | forced | host-fallback | unified

    def to_dict(self) -> dict:
        return {
            "selected": self.reader.name,
            "why": self.why,
            "why_code": self.why_code,
            "sources": [{"name": s.name, "usable": s.usable, "reason": s.reason,
                         "selected": s.name == self.reader.name} for s in self.statuses],
        }


def _readers(server_pid, nvml_lib, smi_runner, env) -> dict[str, Any]:
    return {
        "nvml": NvmlReader(lib=nvml_lib, env=env),
        "nvidia-smi": NvidiaSmiReader(runner=smi_runner, env=env),
        "rocm-smi": RocmSmiReader(runner=smi_runner, env=env),
        "host": HostReader(server_pid=server_pid),
    }


def select_reader(force: str | None = None, *, server_pid: int | None = None,
                  nvml_lib: Any = None, smi_runner: CommandRunner | None = None,
                  env: Mapping[str, str] | None = None) -> Selection:
    """Probe every source; return the first usable one (or the forced one).

    ``nvml_lib`` replaces the pynvml module (test fake, GPU simulator);
    ``smi_runner(argv) -> stdout`` replaces running nvidia-smi / rocm-smi;
    ``env`` replaces ``os.environ`` for the ``*_VISIBLE_DEVICES`` variables.
    A forced source that is unknown or unusable raises ProbeError (exit 2).
    """
    if force is not None:
        force = force.strip().lower()
        if force == ESTIMATE_SOURCE:
            raise ProbeError(
                "--memory-source ollama-ps: /api/ps is Ollama's estimate, shown beside a "
                "measurement and never in its place; choose " + ", ".join(SOURCE_ORDER))
        if force not in SOURCE_ORDER:
            raise ProbeError(f"unknown memory source {force!r}; choose " + ", ".join(SOURCE_ORDER))
    readers = _readers(server_pid, nvml_lib, smi_runner, env)
    statuses = []
    for name in SOURCE_ORDER:
        usable, reason = readers[name].probe()
        statuses.append(SourceStatus(name, usable, reason))
    by_name = {s.name: s for s in statuses}

    if force is not None:
        chosen = by_name[force]
        if not chosen.usable:
            _close_all(readers)
            raise ProbeError(f"--memory-source {force} cannot be used here: {chosen.reason}",
                             hint="run `oomvet devices` to see which sources work")
        why, code = f"{force}: forced with --memory-source", "forced"
    else:
        chosen = next(s for s in statuses if s.usable)  # host is always usable
        if chosen.name != "host":
            why, code = (f"{chosen.name}: the first usable source in the order "
                         + " > ".join(SOURCE_ORDER)), "first-usable"
        elif readers["host"].info().unified:
            why, code = ("host: unified memory, system and GPU share one pool; the runner's "
                         "resident memory is the model's memory"), "unified"
        else:
            why, code = ("host: no GPU source usable, so the Ollama runner's resident memory "
                         "is the model's memory on CPU"), "host-fallback"
    for name, reader in readers.items():
        if name != chosen.name:
            reader.close()
    return Selection(readers[chosen.name], tuple(statuses), why, code)


def _close_all(readers: dict) -> None:
    for reader in readers.values():
        reader.close()
