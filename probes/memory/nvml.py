"""NVIDIA memory through NVML, the library nvidia-smi itself reads.

The only module in oomvet that imports ``pynvml``, and only when a reader is
first used, under a lock; NVML is shut down on ``close()`` or at exit. Any
pynvml-compatible object can stand in for the library (the queue-driven fake
in the tests, the GPU simulator). A field the driver will not give (``Not
Supported``, ``GPU is lost`` ...) reads as ``None``, never as a crash. By
default all GPUs are summed, as Ollama spreads a model over every GPU it sees;
``index`` picks one; only the GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible
count, and a GPU in MIG mode counts as the one MIG instance a CUDA process
gets (the first visible), in the sum too. ``devices()`` reads each GPU apart, only those
``CUDA_VISIBLE_DEVICES`` leaves visible (see :mod:`probes.memory.visible`),
and a GPU in MIG mode as its MIG instances (``nvmlDeviceGetMigMode`` current
mode 1; an empty instance slot answers Not Found and is skipped). A stand-in
without the MIG calls reads as a card without MIG. Shell equivalents::

    nvidia-smi --query-gpu=memory.used,memory.total --format=csv
    nvidia-smi -L          # GPUs and MIG instances with their UUIDs
"""
from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
from collections import Counter
from typing import Any, Callable

from probes.memory.base import DeviceInfo, DeviceReading, ProcessUsage, Reading
from probes.memory.visible import Candidate, Env, nvidia_visible

# NVML return codes that mean "no usable NVML here" (nvml.h)
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_MIG_ENABLED = 1        # NVML_DEVICE_MIG_ENABLE

_IMPORT_LOCK = threading.Lock()


def import_pynvml():
    """The real library; its deprecated-shim FutureWarning is not the user's business."""
    with _IMPORT_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pynvml  # noqa: PLC0415 - lazy on purpose: most machines have no NVIDIA GPU
    return pynvml


class NvmlReader:
    name = "nvml"

    def __init__(self, lib: Any = None, *, index: int | None = None,
                 import_lib: Callable[[], Any] = import_pynvml,
                 pid_name: Callable[[int], str] | None = None, env: Env | None = None):
        self._lib = lib
        self._env = os.environ if env is None else env
        self._import_lib = import_lib
        self._index = index
        self._pid_name = pid_name or _pid_name
        self._lock = threading.Lock()
        self._handles: list | None = None
        self._indices: list[int] = []
        self._memory: list | None = None   # the handles a summed reading reads (MIG instances for a MIG card)
        self._failure: str | None = None
        self._initialized = False

    # -- lifecycle -------------------------------------------------------
    def _ensure(self) -> list:
        """Init NVML once; returns the device handles or raises _UnusableError."""
        with self._lock:
            if self._handles is not None:
                return self._handles
            if self._failure is not None:
                raise _UnusableError(self._failure)
            try:
                if self._lib is None:
                    self._lib = self._import_lib()
                lib = self._lib
                lib.nvmlInit()
                self._initialized = True
            except ImportError:
                self._failure = "NVML: library not found"
                raise _UnusableError(self._failure) from None
            except Exception as exc:  # noqa: BLE001 - NVMLError or an OSError from ctypes
                self._failure = self._describe(exc)
                raise _UnusableError(self._failure) from None
            atexit.register(self.close)
            try:
                count = lib.nvmlDeviceGetCount()
                indices = list(range(count)) if self._index is None else [self._index]
                handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in indices]
            except Exception as exc:  # noqa: BLE001
                self._failure = self._describe(exc)
                self._shutdown_locked()
                raise _UnusableError(self._failure) from None
            if not handles:
                self._failure = "NVML: no NVIDIA GPU found"
                self._shutdown_locked()
                raise _UnusableError(self._failure)
            self._handles, self._indices = handles, indices
            return handles

    def _describe(self, exc: BaseException) -> str:
        code = getattr(exc, "value", None)
        not_found = getattr(self._lib, "NVMLError_LibraryNotFound", None)
        if code == _LIBRARY_NOT_FOUND or (not_found and isinstance(exc, not_found)):
            return "NVML: library not found"
        if code == _FUNCTION_NOT_FOUND:
            return "NVML: driver too old (function not found)"
        return f"NVML: {exc}"

    def close(self) -> None:
        with self._lock:
            self._shutdown_locked()

    def _shutdown_locked(self) -> None:
        self._handles = self._memory = None
        atexit.unregister(self.close)
        if self._initialized:
            self._initialized = False
            try:
                self._lib.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down: nothing left to tell anyone
                pass

    # -- MemoryReader ----------------------------------------------------
    def probe(self) -> tuple[bool, str]:
        try:
            handles = self._ensure()
        except _UnusableError as exc:
            return False, str(exc)
        info = self.info()
        driver = self._field(self._lib.nvmlSystemGetDriverVersion)
        suffix = f", driver {_text(driver)}" if driver is not None else ""
        gpus = "1 GPU" if len(handles) == 1 else f"{len(handles)} GPUs"
        return True, f"NVML: {gpus}, {info.name}{suffix}"

    def _memory_handles(self) -> list:
        """What a summed reading reads: the GPUs the environment leaves
        visible, and for a GPU in MIG mode one MIG instance, the first visible
        (the parent's memory info is the whole card's, while a CUDA process
        such as Ollama's only ever gets one instance: a 40 GiB slice of an
        80 GiB card is a 40 GiB device, whatever other slices it has).
        When nothing is visible (an empty CUDA_VISIBLE_DEVICES), every GPU,
        as before. Raises _UnusableError like :meth:`_ensure`."""
        handles = self._ensure()
        if self._memory is None:
            units = self._units()
            # a CUDA process (Ollama's) gets one MIG instance: the first visible one, not every slice
            mig = [u for u in units if u[2] is not None][:1]
            self._memory = [u[1] for u in units if u[2] is None] + [u[1] for u in mig] or handles
        return self._memory

    def info(self) -> DeviceInfo:
        handles = self._memory_handles()
        names = [self._field(self._lib.nvmlDeviceGetName, h) for h in handles]
        mems = [self._field(self._lib.nvmlDeviceGetMemoryInfo, h) for h in handles]
        totals = [getattr(m, "total", None) for m in mems]
        return DeviceInfo(
            name=_join_names([_text(n) if n is not None else "NVIDIA GPU (name n/a)" for n in names]),
            vendor="nvidia",
            total_bytes=_sum(totals),
            unified=False,
            source=self.name,
            count=len(handles),
        )

    def read(self) -> Reading:
        """Device-level used / total / free, summed over the GPUs read."""
        try:
            handles = self._memory_handles()
        except _UnusableError:
            return Reading(time.monotonic(), None, None, None)
        mems = [self._field(self._lib.nvmlDeviceGetMemoryInfo, h) for h in handles]
        t = time.monotonic()
        return Reading(
            t=t,
            used_bytes=_sum([getattr(m, "used", None) for m in mems]),
            total_bytes=_sum([getattr(m, "total", None) for m in mems]),
            free_bytes=_sum([getattr(m, "free", None) for m in mems]),
        )

    def processes(self) -> list[ProcessUsage]:
        """Compute processes and their device memory (``None`` where the driver
        hides it, e.g. Windows WDDM); a process on two GPUs is summed."""
        try:
            handles = self._ensure()
        except _UnusableError:
            return []
        used: dict[int, int | None] = {}
        for h in handles:
            for p in self._field(self._lib.nvmlDeviceGetComputeRunningProcesses, h) or []:
                pid = int(p.pid)
                mem = getattr(p, "usedGpuMemory", None)
                if pid in used:
                    used[pid] = None if used[pid] is None or mem is None else used[pid] + int(mem)
                else:
                    used[pid] = None if mem is None else int(mem)
        return [ProcessUsage(pid, self._name_of(pid), mem) for pid, mem in sorted(used.items())]

    def devices(self) -> list[DeviceReading]:
        """Each visible GPU, or each MIG instance of one in MIG mode, read apart."""
        try:
            return [self._device(*unit) for unit in self._units()]
        except _UnusableError:
            return []

    def _units(self) -> list[tuple]:
        """``(index, handle, mig parent or None, uuid)`` of every visible GPU,
        a GPU in MIG mode as its instances."""
        handles = self._ensure()
        candidates, instances = [], {}
        for index, h in zip(self._indices, handles):
            uuid = self._uuid(h)
            candidates.append(Candidate(index, uuid, (index, h, None, uuid)))
            migs = self._mig_handles(h)
            if migs is not None:
                instances[index] = [(k, mh, index, self._uuid(mh)) for k, mh in migs]
                candidates += [Candidate(None, unit[3], unit) for unit in instances[index]]
        units: dict[tuple, tuple] = {}  # a MIG instance named twice (GPU-... and MIG-...) counts once
        for c in nvidia_visible(candidates, self._env):
            index, _, parent, _ = c.item
            for unit in instances.get(index, [c.item]) if parent is None else [c.item]:
                units.setdefault((unit[2], unit[0]), unit)
        return list(units.values())

    def _mig_handles(self, handle) -> list | None:
        """The MIG instances of a GPU in MIG mode as (index, handle); None when
        MIG is off or not supported (``nvmlDeviceGetMigMode`` says Not Supported)."""
        mode = self._optional("nvmlDeviceGetMigMode", handle)
        if not mode or mode[0] != _MIG_ENABLED:
            return None
        found = []
        for k in range(self._optional("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = self._optional("nvmlDeviceGetMigDeviceHandleByIndex", handle, k)
            if mig is not None:  # Not Found: no instance in this slot
                found.append((k, mig))
        return found

    def _device(self, index: int, handle, parent: int | None, uuid: str | None) -> DeviceReading:
        name = self._field(self._lib.nvmlDeviceGetName, handle)
        mem = self._field(self._lib.nvmlDeviceGetMemoryInfo, handle)
        return DeviceReading(
            index=index, name=_text(name) if name is not None else "NVIDIA GPU (name n/a)",
            total_bytes=_int(getattr(mem, "total", None)), used_bytes=_int(getattr(mem, "used", None)),
            free_bytes=_int(getattr(mem, "free", None)), uuid=uuid, mig_parent=parent)

    def _uuid(self, handle) -> str | None:
        uuid = self._optional("nvmlDeviceGetUUID", handle)
        return _text(uuid) if uuid else None

    def _optional(self, call: str, *args):
        """A query a pynvml stand-in may lack (the simulator has no MIG): absent reads as n/a."""
        fn = getattr(self._lib, call, None)
        return None if fn is None else self._field(fn, *args)

    def _name_of(self, pid: int) -> str:
        """The driver's own name for the process (a path: it sees processes of
        other containers too), else what this machine's process table says."""
        name = self._field(getattr(self._lib, "nvmlSystemGetProcessName", lambda _pid: None), pid)
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        return os.path.basename(str(name)) if name else self._pid_name(pid)

    def _field(self, fn, *args):
        """One NVML query; an NVMLError for this field means "n/a"."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, getattr(self._lib, "NVMLError", ())):
                return None
            raise


class _UnusableError(Exception):
    """NVML cannot be used here; the message is the one-line reason."""


def _sum(values: list) -> int | None:
    if not values or any(v is None for v in values):
        return None
    return int(sum(values))


def _int(value) -> int | None:
    return None if value is None else int(value)


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _join_names(names: list[str]) -> str:
    counts = Counter(names)
    return " + ".join(n if c == 1 else f"{c} x {n}" for n, c in counts.items())


def _pid_name(pid: int) -> str:
    try:
        import psutil
        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001 - another container's pid, or already gone
        return "?"
