"""The simulated devices as the memory readers see them: a pynvml-compatible
module object here, and (in :mod:`oomsim.smi`) a runner that answers
``nvidia-smi`` / ``rocm-smi`` command lines with the text those tools print.

Both read the same :class:`oomsim.state.SimState`, so every source agrees
with ``/api/ps`` and with each other, card by card. Per vendor, what a real
machine offers:

- nvidia: NVML works; ``nvidia-smi`` answers; ``rocm-smi`` is not installed.
- amd: NVML fails as on a machine without the NVIDIA driver (library not
  found); ``rocm-smi`` answers; ``nvidia-smi`` is not installed.
- apple: no tool exists on a Mac, but the readers have no way yet to read a
  simulated unified-memory pool, so NVML answers with the scenario's device
  name (e.g. "Apple M2 Pro") and the unified pool's numbers; the vendor is
  told by the name (documented in docs/scenarios.md).

NVML counts physical cards (``nvmlDeviceGetCount``). A card split into MIG
slices is one device in MIG mode (``nvmlDeviceGetMigMode`` -> [1, 1]) whose
slices are reached with ``nvmlDeviceGetMigDeviceHandleByIndex``; each slice
reports its own memory and processes, the card the sum of its slices.
"""
from __future__ import annotations

from dataclasses import dataclass

from oomsim.devspec import Card, card_uuid, cards, device_uuid
from oomsim.nvml_errors import (NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED,
                                NVML_ERROR_UNINITIALIZED, SUBCLASSES, NVMLError, NVMLError_InvalidArgument,
                                NVMLError_LibraryNotFound, NVMLError_Uninitialized)
from oomsim.smi import SmiRunner
from oomsim.state import SimState

__all__ = ["SimNvml", "SmiRunner", "Memory", "ProcessInfo"]

NVML_DEVICE_MIG_ENABLE = 1
NO_INSTANCE = 0xFFFFFFFF


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
    gpuInstanceId: int = NO_INSTANCE  # noqa: N815
    computeInstanceId: int = NO_INSTANCE  # noqa: N815


@dataclass(frozen=True)
class _Handle:
    index: int                 # physical card
    slot: int | None = None    # MIG slice of that card (a MIG device handle)


class SimNvml:
    """Stands in for the ``pynvml`` module; one handle per card, plus MIG handles."""

    NVMLError = NVMLError
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE

    def __init__(self, state: SimState):
        self._state = state
        self._inits = 0
        self._cards = cards(state.scenario.devices)

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

    def _card(self, handle) -> Card:
        self._check()
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self._cards):
            raise NVMLError_InvalidArgument()
        card = self._cards[handle.index]
        if handle.slot is not None and not 0 <= handle.slot < len(card.devices):
            raise NVMLError_InvalidArgument()
        return card

    def _devices(self, handle) -> tuple[int, ...]:
        """The scenario devices behind a handle: a slice, or every slice of a card."""
        card = self._card(handle)
        return card.devices if handle.slot is None else (card.devices[handle.slot],)

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
        return len(self._cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        self._check()
        if not isinstance(index, int) or not 0 <= index < len(self._cards):
            raise NVMLError_InvalidArgument()
        return _Handle(index)

    def nvmlDeviceGetName(self, handle) -> str:  # noqa: N802
        card = self._card(handle)
        return card.name if handle.slot is None else self._state.devices[card.devices[handle.slot]].name

    def nvmlDeviceGetUUID(self, handle) -> str:  # noqa: N802
        card = self._card(handle)
        if handle.slot is not None:
            i = card.devices[handle.slot]
            return device_uuid(self._state.devices[i], i)
        if not card.mig:
            return device_uuid(self._state.devices[card.devices[0]], card.devices[0])
        return card_uuid(card, handle.index)

    def nvmlDeviceGetIndex(self, handle) -> int:  # noqa: N802
        self._card(handle)
        if handle.slot is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.index

    def nvmlDeviceGetMemoryInfo(self, handle, version: int | None = None) -> Memory:  # noqa: N802
        card = self._card(handle)
        readings = [self._state.reading(i) for i in self._devices(handle)]
        used = sum(u for _, u, _ in readings)
        total = card.total_bytes if handle.slot is None else readings[0][0]
        return Memory(total=total, free=total - used, used=used)

    def _procs(self, handle, ollama: bool) -> list[ProcessInfo]:
        card = self._card(handle)
        out = []
        for i in self._devices(handle):
            mig = self._state.devices[i].mig
            ids = (mig.gpu_instance, mig.compute_instance) if card.mig and mig else (NO_INSTANCE, NO_INSTANCE)
            out += [ProcessInfo(pid, used, *ids) for pid, name, used in self._state.processes(i)
                    if ("ollama" in name) == ollama]
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, handle) -> list[ProcessInfo]:  # noqa: N802
        return self._procs(handle, True)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle) -> list[ProcessInfo]:  # noqa: N802
        return self._procs(handle, False)

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        self._card(handle)
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    # -- MIG ---------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle) -> list[int]:  # noqa: N802
        """[current, pending]; a card without MIG support answers NOT_SUPPORTED."""
        card = self._card(handle)
        if handle.slot is not None or not card.mig:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [NVML_DEVICE_MIG_ENABLE, NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle) -> int:  # noqa: N802
        card = self._card(handle)
        if handle.slot is not None or not card.mig:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return Card.MAX_MIG

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index: int) -> _Handle:  # noqa: N802
        card = self._card(handle)
        if handle.slot is not None or not card.mig:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not isinstance(index, int) or not 0 <= index < Card.MAX_MIG:
            raise NVMLError_InvalidArgument()
        if index >= len(card.devices):
            raise NVMLError(NVML_ERROR_NOT_FOUND)  # no instance in that slot
        return _Handle(handle.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, handle) -> int:  # noqa: N802
        self._card(handle)
        return int(handle.slot is not None)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle) -> _Handle:  # noqa: N802
        self._card(handle)
        if handle.slot is None:
            raise NVMLError_InvalidArgument()
        return _Handle(handle.index)

    def _mig(self, handle):
        card = self._card(handle)
        if handle.slot is None:
            raise NVMLError_InvalidArgument()
        return self._state.devices[card.devices[handle.slot]].mig

    def nvmlDeviceGetGpuInstanceId(self, handle) -> int:  # noqa: N802
        return self._mig(handle).gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle) -> int:  # noqa: N802
        return self._mig(handle).compute_instance


# NVMLError_NotSupported, ... on the module object, as pynvml has them
for _name, _klass in SUBCLASSES.items():
    setattr(SimNvml, _name, _klass)
