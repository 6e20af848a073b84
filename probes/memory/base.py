"""The one shape every memory source reads into.

Each source (NVML, nvidia-smi, rocm-smi, host memory, Ollama's ``/api/ps``)
is a :class:`MemoryReader` that says whether it works here and why, describes
the device, and returns device-level :class:`Reading` s and per-process
:class:`ProcessUsage`. The GPU readers and the host one also read each device
apart (``devices()`` -> :class:`DeviceReading`, a MIG instance being a device
of its own) while ``info()`` / ``read()`` stay the summed view. Readers never raise for a value the device will not
give: that value is ``None`` (shown as "n/a"). Sizes are bytes, times are
``time.monotonic()`` seconds. The command runner for the ``*-smi`` tools also
lives here so tests can feed them recorded output.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import asdict, dataclass
from typing import Callable, Protocol, Sequence, runtime_checkable

VENDORS = ("nvidia", "amd", "apple", "cpu", "simulated", "unknown")
#: names of Ollama's own processes (the server and its model runners), as a device source names them
OLLAMA_PROCESS = re.compile(r"ollama|llama[-_]server", re.IGNORECASE)


@dataclass(frozen=True)
class DeviceInfo:
    """What the memory is: a GPU, or host memory standing in for one."""

    name: str
    vendor: str                 # one of VENDORS
    total_bytes: int | None     # None: the source does not say
    unified: bool               # system and GPU memory are one pool (Apple)
    source: str                 # the reader's name
    count: int = 1              # devices summed into this one (multi-GPU)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Reading:
    """One device-level reading. For the host source ``used_bytes`` is the
    summed RSS of the Ollama runner processes (the model's memory on CPU),
    ``total_bytes`` the system total and ``free_bytes`` the system's available
    memory."""

    t: float                    # time.monotonic() seconds
    used_bytes: int | None
    total_bytes: int | None
    free_bytes: int | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DeviceReading:
    """One device read on its own: a GPU, a MIG instance, or the host.

    ``index`` is the tool's own number (``nvidia-smi -i N``, rocm-smi's
    ``cardN``); for a MIG instance it is the instance's index on its parent
    GPU, whose index is ``mig_parent``. NVML's order need not be CUDA's."""

    index: int
    name: str
    total_bytes: int | None     # None: the driver will not say
    used_bytes: int | None
    free_bytes: int | None
    uuid: str | None = None     # GPU-..., MIG-...; None when the source does not give it
    mig_parent: int | None = None

    @property
    def label(self) -> str:
        """``"1"`` for GPU 1, ``"0:2"`` for MIG instance 2 on GPU 0."""
        return str(self.index) if self.mig_parent is None else f"{self.mig_parent}:{self.index}"

    def to_dict(self) -> dict:
        return {**asdict(self), "label": self.label}


def devices_of(reader) -> list[DeviceReading]:
    """The reader's devices one by one; ``[]`` for a source that cannot tell
    them apart (Ollama's ``/api/ps``)."""
    devices = getattr(reader, "devices", None)
    return list(devices()) if callable(devices) else []


@dataclass(frozen=True)
class ProcessUsage:
    """Memory one process holds on the device (GPU sources) or in RAM (host)."""

    pid: int
    name: str
    used_bytes: int | None

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class MemoryReader(Protocol):
    """One per source: ``nvml``, ``nvidia-smi``, ``rocm-smi``, ``host``, ``ollama-ps``."""

    name: str

    def probe(self) -> tuple[bool, str]:
        """(usable here?, one line saying why, e.g. "NVML: library not found")."""

    def info(self) -> DeviceInfo: ...

    def read(self) -> Reading: ...

    def processes(self) -> list[ProcessUsage]: ...

    def close(self) -> None: ...


class CommandError(RuntimeError):
    """A device tool ran but failed; the message is its first line of output."""


CommandRunner = Callable[[Sequence[str]], str]


def run_command(argv: Sequence[str], timeout_s: float = 10.0) -> str:
    """Run a device tool and return its stdout. A missing tool raises
    FileNotFoundError (the caller says "not found on PATH"); a failing one
    raises :class:`CommandError` with the tool's own first line."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"{argv[0]} did not answer within {timeout_s:g} s") from exc
    except PermissionError as exc:
        raise CommandError(f"{argv[0]}: permission denied") from exc
    if proc.returncode != 0:
        raise CommandError(first_line(proc.stderr) or first_line(proc.stdout)
                           or f"{argv[0]} exited with status {proc.returncode}")
    return proc.stdout


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def tool_failure(tool: str, exc: BaseException) -> str:
    """One line for why a tool could not be used."""
    if isinstance(exc, FileNotFoundError):
        return f"{tool}: not found on PATH"
    return f"{tool}: {first_line(str(exc)) or type(exc).__name__}"
