"""The simulated device as the memory readers see it: a pynvml-compatible
module object, and a runner that answers ``nvidia-smi`` / ``rocm-smi`` command
lines with the text those tools print.

Both read the same :class:`oomsim.state.SimState`, so every source agrees
with ``/api/ps`` and with each other. Per vendor, what a real machine offers:

- nvidia: NVML works; ``nvidia-smi`` answers; ``rocm-smi`` is not installed.
- amd: NVML fails as on a machine without the NVIDIA driver (library not
  found); ``rocm-smi`` answers; ``nvidia-smi`` is not installed.
- apple: no tool exists on a Mac, but the readers have no way yet to read a
  simulated unified-memory pool, so NVML answers with the scenario's device
  name (e.g. "Apple M2 Pro") and the unified pool's numbers; the vendor is
  told by the name (documented in docs/scenarios.md).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from typing import Sequence

from oomsim.nvml_errors import (NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED,
                                    NVML_ERROR_UNINITIALIZED, SUBCLASSES, NVMLError, NVMLError_InvalidArgument,
                                    NVMLError_LibraryNotFound, NVMLError_Uninitialized)
from oomsim.state import SimState

MIB = 1 << 20


@dataclass(frozen=True)
class Memory:
    """``nvmlDeviceGetMemoryInfo``: bytes."""

    total: int
    free: int
    used: int


@dataclass(frozen=True)
class ProcessInfo:
    """``nvmlDeviceGetComputeRunningProcesses`` entries: usedGpuMemory in bytes."""

    pid: int
    usedGpuMemory: int  # noqa: N815 - pynvml's name
    gpuInstanceId: int = 0xFFFFFFFF  # noqa: N815
    computeInstanceId: int = 0xFFFFFFFF  # noqa: N815


@dataclass(frozen=True)
class _Handle:
    index: int


class SimNvml:
    """Stands in for the ``pynvml`` module; one device, index 0."""

    NVMLError = NVMLError
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND

    def __init__(self, state: SimState):
        self._state = state
        self._inits = 0

    # -- library lifecycle -----------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names throughout
        if self._state.vendor == "amd":
            raise NVMLError_LibraryNotFound()
        self._inits += 1

    def nvmlInitWithFlags(self, flags: int = 0) -> None:  # noqa: N802
        self.nvmlInit()

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._check()
        self._inits -= 1

    def _check(self) -> None:
        if self._inits <= 0:
            raise NVMLError_Uninitialized()

    def _handle(self, handle) -> None:
        self._check()
        if not isinstance(handle, _Handle) or handle.index != 0:
            raise NVMLError_InvalidArgument()

    # -- system ----------------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._check()
        return self._state.scenario.device.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:  # noqa: N802
        self._check()
        return "12.550.54.14"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        self._check()
        return 12040

    def nvmlSystemGetProcessName(self, pid: int) -> str:  # noqa: N802
        self._check()
        for p, name, _ in self._state.processes():
            if p == pid:
                return name
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    # -- devices -----------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._check()
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        self._check()
        if index != 0:
            raise NVMLError_InvalidArgument()
        return _Handle(0)

    def nvmlDeviceGetName(self, handle) -> str:  # noqa: N802
        self._handle(handle)
        return self._state.scenario.device.name

    def nvmlDeviceGetUUID(self, handle) -> str:  # noqa: N802
        self._handle(handle)
        digest = hashlib.sha1(self._state.scenario.device.name.encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def nvmlDeviceGetIndex(self, handle) -> int:  # noqa: N802
        self._handle(handle)
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle, version: int | None = None) -> Memory:  # noqa: N802
        self._handle(handle)
        total, used, free = self._state.reading()
        return Memory(total=total, free=free, used=used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle) -> list[ProcessInfo]:  # noqa: N802
        self._handle(handle)
        return [ProcessInfo(pid, used) for pid, name, used in self._state.processes() if "ollama" in name]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle) -> list[ProcessInfo]:  # noqa: N802
        self._handle(handle)
        return [ProcessInfo(pid, used) for pid, name, used in self._state.processes() if "ollama" not in name]

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        self._handle(handle)
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


# NVMLError_NotSupported, ... on the module object, as pynvml has them
for _name, _klass in SUBCLASSES.items():
    setattr(SimNvml, _name, _klass)


class SmiRunner:
    """``runner(argv) -> stdout`` for the simulated device's command-line tool.

    Behaves like ``subprocess.run(argv, check=True).stdout``: a tool this
    vendor does not have raises FileNotFoundError, a query the tool would
    refuse raises CalledProcessError."""

    def __init__(self, state: SimState):
        self._state = state
        self.history: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        argv = tuple(str(a) for a in argv)
        self.history.append(argv)
        tool = argv[0].rsplit("/", 1)[-1] if argv else ""
        vendor = self._state.vendor
        if tool == "nvidia-smi" and vendor == "nvidia":
            return self._nvidia_smi(argv)
        if tool == "rocm-smi" and vendor == "amd":
            return self._rocm_smi(argv)
        raise FileNotFoundError(2, "No such file or directory", tool or "?")

    # nvidia-smi --query-gpu=memory.used,memory.total --format=csv[,noheader][,nounits]
    def _nvidia_smi(self, argv: tuple[str, ...]) -> str:
        query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
        apps = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-compute-apps=")), None)
        fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "")
        if not fmt.startswith("csv") or (query is None) == (apps is None):
            raise subprocess.CalledProcessError(2, list(argv), output="", stderr="Invalid combination of input arguments.")
        header, units = "noheader" not in fmt, "nounits" not in fmt
        total, used, free = self._state.reading()
        dev = self._state.scenario.device

        def mib(n: int) -> str:
            return f"{n // MIB} MiB" if units else str(n // MIB)

        if query is not None:
            values = {
                "memory.used": ("memory.used [MiB]", mib(used)),
                "memory.total": ("memory.total [MiB]", mib(total)),
                "memory.free": ("memory.free [MiB]", mib(free)),
                "name": ("name", dev.name),
                "index": ("index", "0"),
                "driver_version": ("driver_version", dev.driver_version),
                "count": ("count", "1"),
            }
            fields = [f.strip() for f in query.split(",")]
            bad = [f for f in fields if f not in values]
            if bad:
                raise subprocess.CalledProcessError(2, list(argv), output="",
                                                    stderr=f'Field "{bad[0]}" is not a valid field to query.')
            rows = [", ".join(values[f][1] for f in fields)]
            head = ", ".join(values[f][0] for f in fields)
        else:
            fields = [f.strip() for f in apps.split(",")]
            known = {"pid", "process_name", "used_memory", "used_gpu_memory", "name"}
            bad = [f for f in fields if f not in known]
            if bad:
                raise subprocess.CalledProcessError(2, list(argv), output="",
                                                    stderr=f'Field "{bad[0]}" is not a valid field to query.')
            heads = {"pid": "pid", "process_name": "process_name", "name": "process_name",
                     "used_memory": "used_gpu_memory [MiB]", "used_gpu_memory": "used_gpu_memory [MiB]"}
            head = ", ".join(heads[f] for f in fields)
            rows = []
            for pid, name, held in self._state.processes():
                if "ollama" not in name:
                    continue  # nvidia-smi lists compute apps; the desktop is a graphics process
                cells = {"pid": str(pid), "process_name": name, "name": name,
                         "used_memory": mib(held), "used_gpu_memory": mib(held)}
                rows.append(", ".join(cells[f] for f in fields))
        return "\n".join(([head] if header else []) + rows) + "\n"

    # rocm-smi --showmeminfo vram --json, --showproductname --json, --showpids --json
    def _rocm_smi(self, argv: tuple[str, ...]) -> str:
        total, used, _ = self._state.reading()
        dev = self._state.scenario.device
        as_json = "--json" in argv
        if "--showmeminfo" in argv:
            data = {"card0": {"VRAM Total Memory (B)": str(total), "VRAM Total Used Memory (B)": str(used)}}
            text = (f"GPU[0]\t\t: VRAM Total Memory (B): {total}\n"
                    f"GPU[0]\t\t: VRAM Total Used Memory (B): {used}\n")
        elif "--showproductname" in argv:
            data = {"card0": {"Card Series": dev.name, "Card Model": "0x744c", "Card Vendor":
                              "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "SIMULATED"}}
            text = f"GPU[0]\t\t: Card Series: \t\t{dev.name}\n"
        elif "--showpids" in argv:
            procs = {f"PID{pid}": f"{name.rsplit('/', 1)[-1]}, 1, {held}, 0, 0"
                     for pid, name, held in self._state.processes() if "ollama" in name}
            data = {"system": procs} if procs else {"system": {}}
            text = "".join(f"{k[3:]}\t{v}\n" for k, v in procs.items()) or "No KFD PIDs currently running\n"
        elif "--showdriverversion" in argv:
            data = {"system": {"Driver version": "6.7.0"}}
            text = "Driver version: 6.7.0\n"
        else:
            raise subprocess.CalledProcessError(2, list(argv), output="", stderr="rocm-smi: unsupported option")
        if as_json:
            return json.dumps(data) + "\n"
        bar = "=" * 24
        return f"{bar} ROCm System Management Interface {bar}\n{text}{bar} End of ROCm SMI Log {bar}\n"
