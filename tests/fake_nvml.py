"""A queue-driven stand-in for the ``pynvml`` module.

Tests enqueue what the next NVML calls return or raise, inject the fake into
:class:`probes.memory.nvml.NvmlReader` (or ``select_reader(nvml_lib=...)``),
and read ``.history`` for what was called. Errors are shaped like pynvml's:
``NVMLError(code)`` maps to a subclass (``NVMLError_NotSupported``...) whose
``str()`` is the library's own message ("Not Supported", "Driver Not
Loaded"...). A memory value stays until the next one is enqueued, as a real
device's memory does; asking before anything was enqueued is a test bug.

Several GPUs (``gpus=(name, ...)``, each with a UUID) and MIG instances
(:meth:`FakeNvml.with_mig`) behave as pynvml documents them: a handle past
the device count is Invalid Argument; ``nvmlDeviceGetMigMode`` is Not
Supported on a card without MIG and ``[current, pending]`` on one with it;
``nvmlDeviceGetMaxMigDeviceCount`` is 0 unless MIG is on; an empty instance
slot is Not Found, a slot past the maximum Invalid Argument. A MIG handle
takes the per-device queries (name, UUID, memory) like a GPU handle.
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
                 driver: str = "550.54.14", uuids=None):
        self.gpus = list(gpus)
        self.uuids = list(uuids) if uuids is not None else [_uuid("GPU", i) for i in range(len(self.gpus))]
        self.missing = missing
        self.driver = driver
        self.history: list[tuple] = []
        self.initialized = 0
        self._queues: dict[tuple, deque] = defaultdict(deque)
        self._last: dict[tuple, object] = {}
        self._mig: dict[int, dict] = {}     # gpu -> mode, max_count, slots {slot: (name, uuid)}
        for code, (name, _) in _ERRORS.items():
            setattr(self, f"NVMLError_{name}", NVMLError.classes[code])

    # -- what tests enqueue ---------------------------------------------
    def with_mig(self, gpu: int, instances: dict[int, str] | None = None, *, enabled: bool = True,
                 max_count: int = 7) -> "FakeNvml":
        """GPU ``gpu`` can do MIG (mode on unless ``enabled=False``); ``instances``:
        {slot: name, e.g. "NVIDIA A100-SXM4-80GB MIG 3g.40gb"}; other slots are empty."""
        mode = 1 if enabled else 0
        slots = {k: (name, _uuid("MIG", gpu * 16 + k)) for k, name in (instances or {}).items()}
        self._mig[gpu] = {"mode": [mode, mode], "max": max_count, "slots": slots}
        return self

    def mig_uuid(self, gpu: int, slot: int) -> str:
        return self._mig[gpu]["slots"][slot][1]

    def enqueue_memory(self, used: int, total: int, *, gpu: int = 0, mig: int | None = None) -> "FakeNvml":
        """The next memory reading of GPU ``gpu`` (or of its MIG instance ``mig``)."""
        self._queues[("nvmlDeviceGetMemoryInfo", _key(gpu, mig))].append(
            SimpleNamespace(used=used, total=total, free=total - used))
        return self

    def enqueue_processes(self, procs, *, gpu: int = 0) -> "FakeNvml":
        """``procs``: [(pid, used_bytes or None)]."""
        self._queues[("nvmlDeviceGetComputeRunningProcesses", gpu)].append(
            [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in procs])
        return self

    def enqueue_error(self, error, call: str = "nvmlDeviceGetMemoryInfo", *, gpu: int | None = 0,
                      mig: int | None = None):
        """The next ``call`` raises ``error`` ("Not Supported", "GPU is lost", a code...).
        Calls that take no device (nvmlInit, nvmlDeviceGetCount...) use ``gpu=None``."""
        per_device = call.startswith("nvmlDeviceGet") and call != "nvmlDeviceGetCount"
        self._queues[(call, _key(gpu, mig) if per_device else None)].append(nvml_error(error))
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
        if not 0 <= index < len(self.gpus):
            raise NVMLError(2)
        return SimpleNamespace(index=index, key=index)

    def nvmlDeviceGetName(self, handle):
        self.history.append(("nvmlDeviceGetName", handle.key))
        return self._next("nvmlDeviceGetName", handle.key, default=self._name(handle))

    def nvmlDeviceGetUUID(self, handle):
        self.history.append(("nvmlDeviceGetUUID", handle.key))
        return self._next("nvmlDeviceGetUUID", handle.key, default=self._uuid_of(handle))

    def nvmlDeviceGetMemoryInfo(self, handle):
        self.history.append(("nvmlDeviceGetMemoryInfo", handle.key))
        return self._next("nvmlDeviceGetMemoryInfo", handle.key)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self.history.append(("nvmlDeviceGetComputeRunningProcesses", handle.key))
        return self._next("nvmlDeviceGetComputeRunningProcesses", handle.key, default=[])

    def nvmlDeviceGetMigMode(self, handle):
        self.history.append(("nvmlDeviceGetMigMode", handle.key))
        mig = self._mig.get(handle.key)
        if mig is None:
            raise NVMLError(3)   # Not Supported: no MIG on this card (or a MIG handle)
        return list(mig["mode"])

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        self.history.append(("nvmlDeviceGetMaxMigDeviceCount", handle.key))
        mig = self._mig.get(handle.key)
        return mig["max"] if mig is not None and mig["mode"][0] == 1 else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        self.history.append(("nvmlDeviceGetMigDeviceHandleByIndex", handle.key, index))
        mig = self._mig.get(handle.key)
        if mig is None or mig["mode"][0] != 1:
            raise NVMLError(3)
        if not 0 <= index < mig["max"]:
            raise NVMLError(2)
        if index not in mig["slots"]:
            raise NVMLError(6)   # Not Found: no instance in this slot
        return SimpleNamespace(index=index, parent=handle.key, key=(handle.key, index))

    def _name(self, handle) -> str:
        if isinstance(handle.key, tuple):
            return self._mig[handle.key[0]]["slots"][handle.key[1]][0]
        return self.gpus[handle.key]

    def _uuid_of(self, handle) -> str:
        if isinstance(handle.key, tuple):
            return self.mig_uuid(*handle.key)
        return self.uuids[handle.key]

    def calls(self, name: str) -> int:
        return sum(1 for h in self.history if h[0] == name)


def _key(gpu, mig):
    return gpu if mig is None or gpu is None else (gpu, mig)


def _uuid(kind: str, n: int) -> str:
    """A UUID shaped like the driver's (``GPU-8932f937-d72c-4106-c12f-20bd9faed9f6``)."""
    digits = f"{n + 1:08x}" * 4
    return f"{kind}-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"
