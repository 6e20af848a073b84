"""A queue-driven stand-in for the ``pynvml`` module.

Tests enqueue what the next NVML calls return or raise, inject the fake into
:class:`probes.memory.nvml.NvmlReader` (or ``select_reader(nvml_lib=...)``),
and read ``.history`` for what was called. Errors are shaped like pynvml's:
``NVMLError(code)`` maps to a subclass (``NVMLError_NotSupported``...) whose
``str()`` is the library's own message ("Not Supported", "Driver Not
Loaded"...). A memory value stays until the next one is enqueued, as a real
device's memory does; asking before anything was enqueued is a test bug.
"""
from __future__ import annotations

from collections import defaultdict, deque
from types import SimpleNamespace

MiB = 1 << 20
GiB = 1 << 30

from oomsim.nvml_errors import ERRORS as _ERRORS
from oomsim.nvml_errors import SUBCLASSES, NVMLError

_BY_MESSAGE = {msg: code for code, (_, msg) in _ERRORS.items()}
_BY_NAME = {name: code for code, (name, _) in _ERRORS.items()}
globals().update(SUBCLASSES)


def nvml_error(which) -> NVMLError:
    """``nvml_error("Not Supported")``, ``nvml_error("NotSupported")`` or ``nvml_error(3)``."""
    if isinstance(which, NVMLError):
        return which
    code = which if isinstance(which, int) else _BY_MESSAGE.get(which, _BY_NAME.get(which))
    if code is None:
        raise ValueError(f"unknown NVML error {which!r}")
    return NVMLError(code)


class FakeNvml:
    """``pynvml`` as a test wants it. ``missing=True``: no libnvidia-ml here."""

    NVMLError = NVMLError

    def __init__(self, gpus=("NVIDIA GeForce RTX 4090",), *, missing: bool = False,
                 driver: str = "550.54.14"):
        self.gpus = list(gpus)
        self.missing = missing
        self.driver = driver
        self.history: list[tuple] = []
        self.initialized = 0
        self._queues: dict[tuple, deque] = defaultdict(deque)
        self._last: dict[tuple, object] = {}
        for code, (name, _) in _ERRORS.items():
            setattr(self, f"NVMLError_{name}", NVMLError.classes[code])

    # -- what tests enqueue ---------------------------------------------
    def enqueue_memory(self, used: int, total: int, *, gpu: int = 0) -> "FakeNvml":
        self._queues[("nvmlDeviceGetMemoryInfo", gpu)].append(
            SimpleNamespace(used=used, total=total, free=total - used))
        return self

    def enqueue_processes(self, procs, *, gpu: int = 0) -> "FakeNvml":
        """``procs``: [(pid, used_bytes or None)]."""
        self._queues[("nvmlDeviceGetComputeRunningProcesses", gpu)].append(
            [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in procs])
        return self

    def enqueue_error(self, error, call: str = "nvmlDeviceGetMemoryInfo", *, gpu: int | None = 0):
        """The next ``call`` raises ``error`` ("Not Supported", "GPU is lost", a code...).
        Calls that take no device (nvmlInit, nvmlDeviceGetCount...) use ``gpu=None``."""
        key = (call, gpu if call.startswith("nvmlDeviceGet") and call != "nvmlDeviceGetCount" else None)
        self._queues[key].append(nvml_error(error))
        return self

    def _next(self, call: str, gpu=None, default=None):
        q = self._queues[(call, gpu)]
        if q:
            item = q.popleft()
            if isinstance(item, Exception):
                raise item
            self._last[(call, gpu)] = item
            return item
        if (call, gpu) in self._last:
            return self._last[(call, gpu)]
        if default is not None:
            return default
        raise AssertionError(f"FakeNvml: {call} (gpu {gpu}) called with nothing enqueued")

    # -- the pynvml surface the reader uses -------------------------------
    def nvmlInit(self):
        self.history.append(("nvmlInit",))
        if self.missing:
            raise NVMLError(12)
        self._next("nvmlInit", default=True)
        self.initialized += 1

    def nvmlShutdown(self):
        self.history.append(("nvmlShutdown",))
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self):
        self.history.append(("nvmlSystemGetDriverVersion",))
        return self._next("nvmlSystemGetDriverVersion", default=self.driver)

    def nvmlDeviceGetCount(self):
        self.history.append(("nvmlDeviceGetCount",))
        return self._next("nvmlDeviceGetCount", default=len(self.gpus))

    def nvmlDeviceGetHandleByIndex(self, index):
        self.history.append(("nvmlDeviceGetHandleByIndex", index))
        return SimpleNamespace(index=index)

    def nvmlDeviceGetName(self, handle):
        self.history.append(("nvmlDeviceGetName", handle.index))
        return self._next("nvmlDeviceGetName", handle.index, default=self.gpus[handle.index])

    def nvmlDeviceGetMemoryInfo(self, handle):
        self.history.append(("nvmlDeviceGetMemoryInfo", handle.index))
        return self._next("nvmlDeviceGetMemoryInfo", handle.index)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self.history.append(("nvmlDeviceGetComputeRunningProcesses", handle.index))
        return self._next("nvmlDeviceGetComputeRunningProcesses", handle.index, default=[])

    def calls(self, name: str) -> int:
        return sum(1 for h in self.history if h[0] == name)
