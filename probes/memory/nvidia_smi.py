"""NVIDIA memory through the ``nvidia-smi`` command, for machines where NVML
cannot be loaded from Python but the tool works (containers with only the
binary mounted, odd driver installs).

The CSV parsers are pure functions over the tool's text so they are tested on
real output. A field shown as ``[N/A]`` or ``[Not Supported]`` reads as
``None``. The tool takes tens of milliseconds per call, so a sampler on this
source gets fewer readings a second than it asks for; it reports what it got.
``devices()`` reads each GPU apart, only those ``CUDA_VISIBLE_DEVICES``
leaves visible (:mod:`probes.memory.visible`); ``--query-gpu`` has no rows
for MIG instances, so a GPU in MIG mode is one device here (whole-card
numbers) and a ``MIG-...`` entry names nothing: NVML reads the instances.
Shell equivalents::

    nvidia-smi --query-gpu=memory.used,memory.total --format=csv
    nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free --format=csv
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
"""
from __future__ import annotations

import os
import re
import time

from probes.memory.base import (CommandRunner, DeviceInfo, DeviceReading, ProcessUsage, Reading,
                                run_command, tool_failure)
from probes.memory.nvml import _join_names
from probes.memory.visible import Candidate, Env, nvidia_visible

GPU_QUERY = ("nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv")
INFO_QUERY = ("nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv")
DEVICES_QUERY = ("nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free",
                 "--format=csv")
APPS_QUERY = ("nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv")

_UNIT_BYTES = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
               "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}
_HEADER = re.compile(r"^\s*([^\[]+?)\s*(?:\[([^\]]+)\])?\s*$")
_VALUE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_csv(text: str) -> list[dict[str, str | int | None]]:
    """``--format=csv`` output -> one dict per row, keyed by the query field
    (``memory.used``); sizes become bytes, bracketed markers like ``[N/A]``
    become None, other fields stay text. The header's ``[MiB]`` unit is used
    when the values carry none (``--format=csv,nounits``)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [_HEADER.match(h) for h in lines[0].split(",")]
    keys = [m.group(1).strip() if m else h.strip() for m, h in zip(header, lines[0].split(","))]
    units = [(m.group(2) or "").strip().lower() if m else "" for m in header]
    rows = []
    for line in lines[1:]:
        if line.strip().lower().startswith("no running"):
            continue  # the table form's "No running processes found"
        cells = [c.strip() for c in line.split(",")]
        if len(cells) > len(keys):
            # a process or GPU name with a comma in it: the extra cells belong to the name
            name_at = next((i for i, k in enumerate(keys) if "name" in k), 1)
            extra = len(cells) - len(keys)
            cells[name_at:name_at + extra + 1] = [", ".join(cells[name_at:name_at + extra + 1])]
        if len(cells) != len(keys):
            continue
        rows.append({k: _cell(c, u) for k, c, u in zip(keys, cells, units)})
    return rows


def _cell(text: str, header_unit: str):
    if text.startswith("[") and text.endswith("]") or text.upper() == "N/A":
        return None
    if header_unit in _UNIT_BYTES:
        m = _VALUE.match(text)
        if not m:
            return None
        unit = (m.group(2) or header_unit).lower()
        return int(float(m.group(1)) * _UNIT_BYTES.get(unit, _UNIT_BYTES[header_unit]))
    return text


def parse_gpu_csv(text: str) -> list[dict]:
    """``--query-gpu=...`` -> rows with ``memory.used`` etc. in bytes."""
    return parse_csv(text)


def parse_apps_csv(text: str) -> list[ProcessUsage]:
    """``--query-compute-apps=pid,process_name,used_memory`` -> processes.
    A GPU with no processes prints only the header (or nothing)."""
    out = []
    for row in parse_csv(text):
        pid = row.get("pid")
        if pid is None or not str(pid).isdigit():
            continue
        name = row.get("process_name") or "?"
        used = row.get("used_gpu_memory", row.get("used_memory"))
        out.append(ProcessUsage(int(pid), str(name), used if isinstance(used, int) else None))
    return out


class NvidiaSmiReader:
    name = "nvidia-smi"

    def __init__(self, runner: CommandRunner | None = None, *, index: int | None = None,
                 env: Env | None = None):
        self._run = runner or run_command
        self._index = index
        self._env = os.environ if env is None else env

    def _rows(self, argv) -> list[dict]:
        argv = list(argv)
        if self._index is not None:
            argv.insert(1, f"--id={self._index}")
        return parse_gpu_csv(self._run(argv))

    def probe(self) -> tuple[bool, str]:
        try:
            rows = self._rows(INFO_QUERY)
        except Exception as exc:  # noqa: BLE001 - any failure means "not usable", said in one line
            return False, tool_failure("nvidia-smi", exc)
        if not rows:
            return False, "nvidia-smi: no GPU listed"
        gpus = "1 GPU" if len(rows) == 1 else f"{len(rows)} GPUs"
        return True, f"nvidia-smi: {gpus}, {_names(rows)}"

    def info(self) -> DeviceInfo:
        try:
            rows = self._rows(INFO_QUERY)
        except Exception:  # noqa: BLE001
            rows = []
        return DeviceInfo(
            name=_names(rows) if rows else "NVIDIA GPU (name n/a)",
            vendor="nvidia",
            total_bytes=_sum(r.get("memory.total") for r in rows) if rows else None,
            unified=False,
            source=self.name,
            count=max(len(rows), 1),
        )

    def read(self) -> Reading:
        try:
            rows = self._rows(GPU_QUERY)
        except Exception:  # noqa: BLE001 - a failed call is a reading nobody could take
            rows = []
        t = time.monotonic()
        if not rows:
            return Reading(t, None, None, None)
        used = _sum(r.get("memory.used") for r in rows)
        total = _sum(r.get("memory.total") for r in rows)
        free = total - used if used is not None and total is not None else None
        return Reading(t, used, total, free)

    def devices(self) -> list[DeviceReading]:
        """Each visible GPU read apart; ``memory.free`` as the tool gives it
        (used + free can fall short of total: the driver reserves some)."""
        try:
            rows = self._rows(DEVICES_QUERY)
        except Exception:  # noqa: BLE001 - a failed call is a reading nobody could take
            return []
        candidates = []
        for pos, row in enumerate(rows):
            index = str(row.get("index") or "")
            uuid = row.get("uuid")
            candidates.append(Candidate(int(index) if index.isdigit() else pos,
                                        str(uuid) if uuid else None, row))
        return [_device(c.index, c.uuid, c.item) for c in nvidia_visible(candidates, self._env)]

    def processes(self) -> list[ProcessUsage]:
        try:
            return parse_apps_csv(self._run(list(APPS_QUERY)))
        except Exception:  # noqa: BLE001
            return []

    def close(self) -> None:
        pass


def _sum(values) -> int | None:
    values = list(values)
    if not values or any(not isinstance(v, int) for v in values):
        return None
    return sum(values)


def _device(index: int, uuid: str | None, row: dict) -> DeviceReading:
    total, used, free = (row.get(k) for k in ("memory.total", "memory.used", "memory.free"))
    total, used, free = (v if isinstance(v, int) else None for v in (total, used, free))
    if free is None and total is not None and used is not None:
        free = total - used
    return DeviceReading(index=index, name=str(row.get("name") or "NVIDIA GPU (name n/a)"),
                         total_bytes=total, used_bytes=used, free_bytes=free, uuid=uuid)


def _names(rows: list[dict]) -> str:
    return _join_names([str(r.get("name") or "NVIDIA GPU") for r in rows])
