"""Part 1 of the GPU check: oomvet's memory readers against a real card.

A CUDA process (``cuda_worker.py``) takes known amounts of device memory in
steps; oomvet's NVML and nvidia-smi readers read it per process and for the
device, and the sampler reads it at 20 and 100 Hz (steps caught, readings a
second, CPU cost in % of one core). Everything the card said is also saved
raw (``nvidia-smi -q -x``, the CSV queries the reader makes, NVML's fields,
MIG mode, both process lists) for ``tests/data/gpu/``. On a machine with no
NVIDIA GPU the same steps run as far as they can and say so.
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from probes.memory.base import Reading
from probes.memory.nvidia_smi import APPS_QUERY, GPU_QUERY, INFO_QUERY, NvidiaSmiReader
from probes.memory.nvml import NvmlReader
from probes.sampler import Sampler

MiB = 1 << 20
#: (MiB held, seconds held): long steps every reader sees, then 150, 60 and 25 ms
#: ones that tell 20 Hz from 100 Hz; levels are multiples of 16 MiB (cuda_worker.py)
STEP_PLAN = ((0, 0.6), (1024, 0.5), (4096, 0.5), (512, 0.5), (8192, 0.5), (2048, 0.15), (6144, 0.15),
             (1024, 0.06), (3072, 0.06), (512, 0.025), (2560, 0.025), (0, 0.6))
#: levels held while both readers read the worker's process and the device
PROCESS_LEVELS = (0, 1024, 4096, 16384, 0)
RATES = (20.0, 100.0)
#: a reading within this much of the level it should show counts as that level
TOLERANCE_BYTES = 48 * MiB
#: what nvidia-smi can say in one CSV besides what the reader asks (kept raw)
WIDE_QUERY = ("nvidia-smi", "--query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used,"
              "memory.free,memory.reserved,mig.mode.current,mig.mode.pending,compute_mode,persistence_mode",
              "--format=csv")


def run_tool(argv, out: Path | None = None, timeout_s: float = 30.0) -> dict:
    """Run a tool, keep its stdout raw in ``out``; never raises."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
        rec = {"rc": proc.returncode, "stderr": proc.stderr[-2000:]}
        text = proc.stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        rec, text = {"rc": None, "stderr": f"{type(exc).__name__}: {exc}"}, ""
    if out is not None:
        out.write_text(text)
    rec.update(argv=list(argv), took_s=round(time.monotonic() - t0, 3), bytes=len(text))
    return rec


class PidReader:
    """One process's device memory as a reader's device-level reading, so the
    sampler (which reads ``used_bytes``) samples the per-process figure."""

    def __init__(self, reader, pid: int):
        self.reader, self.pid, self.name = reader, pid, f"{reader.name}/pid"

    def read(self) -> Reading:
        used = next((p.used_bytes for p in self.reader.processes() if p.pid == self.pid), None)
        return Reading(time.monotonic(), used, None, None)


def steps_caught(summary, steps: list[dict], base_bytes: int | None) -> list[dict]:
    """For each step the worker held: whether any reading inside its window
    shows its level (``base_bytes`` + the level, within TOLERANCE_BYTES), and
    how long after the step began the first such reading came."""
    out = []
    for s in steps:
        want = None if base_bytes is None else base_bytes + s["mib"] * MiB
        lo, hi = s["t0"] - summary.started_monotonic, s["t1"] - summary.started_monotonic
        seen = [t for t, used in summary.timeline
                if lo <= t <= hi and want is not None and abs(used - want) <= TOLERANCE_BYTES]
        out.append({"mib": s["mib"], "held_s": round(s["t1"] - s["t0"], 3), "caught": bool(seen),
                    "readings_in_window": sum(1 for t, _ in summary.timeline if lo <= t <= hi),
                    "latency_s": round(seen[0] - lo, 4) if seen else None})
    return out


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (nvidia-smi calls)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def sample_run(worker, reader, hz: float, plan=STEP_PLAN) -> dict:
    """The sampler on ``reader`` at ``hz`` while the worker walks ``plan``."""
    wall0, cpu0 = time.monotonic(), _cpu_s()
    sampler = Sampler(reader, hz=hz).start()
    reply = worker.ask({"op": "steps", "steps": [list(s) for s in plan]})
    summary = sampler.stop()
    wall, cpu = time.monotonic() - wall0, _cpu_s() - cpu0
    steps = reply.get("steps", [])
    base = summary.timeline[0][1] if summary.timeline else None
    caught = steps_caught(summary, steps, base)
    return {"reader": reader.name, "hz": hz, "hz_achieved": summary.hz_achieved, "readings": summary.readings,
            "errors": summary.errors, "peak_bytes": summary.peak_bytes, "base_bytes": base,
            "cpu_percent_of_core": round(100 * cpu / wall, 2) if wall > 0 else None,
            "steps_caught": sum(c["caught"] for c in caught), "steps": len(caught), "per_step": caught,
            "worker_error": reply.get("error"), "timeline": [list(p) for p in summary.timeline]}


def process_levels(worker, nvml, smi, pid: int, levels=PROCESS_LEVELS, hold_s: float = 0.4) -> list[dict]:
    """At each level, what each reader (``nvml``, ``nvidia-smi``) says of the
    worker and of the device, against what its allocator took."""
    rows = []
    for mib in levels:
        state = worker.ask({"op": "steps", "steps": [[mib, hold_s]]})
        row = {"mib": mib, "reserved": state.get("reserved"), "driver_free": state.get("free"),
               "driver_total": state.get("total")}
        for reader in (nvml, smi):
            procs = reader.processes()
            mine = next((p for p in procs if p.pid == pid), None)
            row[reader.name] = {"device": reader.read().to_dict(), "process_bytes": mine.used_bytes if mine else None,
                                "process_seen": mine is not None,
                                "processes": [p.to_dict() for p in procs]}
        rows.append(row)
    for name in ("nvml", "nvidia-smi"):
        for row in rows:
            row[name]["error_mib"] = error_mib(row[name]["process_bytes"], rows[0][name]["process_bytes"],
                                               row["reserved"], rows[0]["reserved"])
            row[name]["device_error_mib"] = error_mib(row[name]["device"]["used_bytes"],
                                                      rows[0][name]["device"]["used_bytes"],
                                                      row["reserved"], rows[0]["reserved"])
    return rows


def error_mib(got: int | None, got_idle: int | None, reserved: int | None, reserved_idle: int | None) -> float | None:
    """How far a reader's figure for the worker moved from what its allocator
    took since the idle level (the CUDA context and the first small block are
    in both idle figures, so they cancel)."""
    if None in (got, got_idle, reserved, reserved_idle):
        return None
    return round(((got - got_idle) - (reserved - reserved_idle)) / MiB, 1)


def nvml_fields(lib) -> dict:
    """NVML's own answers, field by field (an error is kept as its text): what
    the reader uses and what it does not yet (MIG mode, memory v2's reserved,
    graphics processes, the v3 process entries' instance ids)."""
    def ask(fn, *args):
        try:
            value = getattr(lib, fn)(*args)
        except Exception as exc:  # noqa: BLE001 - the error is the reading
            return {"error": f"{type(exc).__name__}: {exc}"}
        return _plain(value)

    out = {"driver": ask("nvmlSystemGetDriverVersion"), "nvml": ask("nvmlSystemGetNVMLVersion"),
           "cuda_driver": ask("nvmlSystemGetCudaDriverVersion_v2"), "count": ask("nvmlDeviceGetCount"),
           "devices": []}
    count = out["count"] if isinstance(out["count"], int) else 0
    for i in range(count):
        h = lib.nvmlDeviceGetHandleByIndex(i)
        dev = {fn: ask(fn, h) for fn in (
            "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetBAR1MemoryInfo",
            "nvmlDeviceGetMigMode", "nvmlDeviceGetComputeMode", "nvmlDeviceGetPersistenceMode",
            "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
            "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetMaxMigDeviceCount")}
        v2 = getattr(lib, "nvmlMemory_v2", None)
        dev["nvmlDeviceGetMemoryInfo_v2"] = ask("nvmlDeviceGetMemoryInfo", h, v2) if v2 else None
        out["devices"].append(dev)
    return out


def _plain(value):
    """pynvml's ctypes structures and lists as JSON data."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    fields = getattr(value, "_fields_", None)
    if fields:
        return {name: _plain(getattr(value, name)) for name, *_ in fields}
    return repr(value)


def raw_tools(raw: Path) -> dict:
    """The tools' own text, as the readers parse it and in full."""
    runs = {"nvidia-smi -L": run_tool(["nvidia-smi", "-L"], raw / "nvidia-smi-L.txt"),
            "nvidia-smi -q -x": run_tool(["nvidia-smi", "-q", "-x"], raw / "nvidia-smi-q.xml"),
            "gpu-query": run_tool(GPU_QUERY, raw / "query-gpu.csv"),
            "info-query": run_tool(INFO_QUERY, raw / "query-gpu-info.csv"),
            "apps-query": run_tool(APPS_QUERY, raw / "query-compute-apps.csv"),
            "wide-query": run_tool(WIDE_QUERY, raw / "query-gpu-wide.csv")}
    return runs


def oomvet_devices(raw: Path) -> dict:
    """``oomvet devices --json`` with no server, as a user would run it first."""
    return run_tool([sys.executable, "-m", "assistant", "devices", "--json"], raw / "oomvet-devices.json",
                    timeout_s=60)


def run(worker, raw: Path, log) -> dict:
    """All of part 1; ``worker`` None means no CUDA process could be started."""
    raw.mkdir(parents=True, exist_ok=True)
    result = {"tools": raw_tools(raw), "devices": oomvet_devices(raw)}
    log(f"part 1: nvidia-smi rc={result['tools']['nvidia-smi -L']['rc']}, "
        f"devices rc={result['devices']['rc']}")
    nvml, smi = NvmlReader(), NvidiaSmiReader()
    result["probe"] = {"nvml": nvml.probe(), "nvidia-smi": smi.probe()}
    log(f"part 1: probe {result['probe']}")
    if nvml.probe()[0]:
        from probes.memory.nvml import import_pynvml
        lib = import_pynvml()
        (raw / "nvml-fields-idle.json").write_text(json.dumps(nvml_fields(lib), indent=1))
    if worker is None or not nvml.probe()[0]:
        result["skipped"] = "no CUDA process or no NVML here: nothing to measure against"
        return result
    pid = worker.info["pid"]
    result["worker"] = worker.info
    result["levels"] = process_levels(worker, nvml, smi, pid)
    worker.ask({"op": "steps", "steps": [[4096, 0.3]]})   # a level to be seen in the raw dumps
    (raw / "nvml-fields-holding-4GiB.json").write_text(json.dumps(nvml_fields(lib), indent=1))
    run_tool(APPS_QUERY, raw / "query-compute-apps-holding-4GiB.csv")
    run_tool(["nvidia-smi", "-q", "-x"], raw / "nvidia-smi-q-holding-4GiB.xml")
    worker.ask({"op": "release"})
    result["sampling"] = []
    for reader in (nvml, PidReader(nvml, pid), smi, PidReader(smi, pid)):
        for hz in RATES:
            rec = sample_run(worker, reader, hz)
            log(f"part 1: {rec['reader']} @ {hz:g} Hz: {rec['steps_caught']}/{rec['steps']} steps, "
                f"{rec['hz_achieved']} Hz achieved, {rec['cpu_percent_of_core']}% of a core")
            result["sampling"].append(rec)
    nvml.close()
    return result
