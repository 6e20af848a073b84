"""Host memory: the model process's resident memory and the system totals.

On a CPU-only machine the model lives in the process Ollama starts for it, a
child of ``ollama serve``: ``ollama runner ...`` up to v0.29, llama.cpp's
``llama-server --model ...`` from v0.30 (see :func:`is_ollama_runner`), so
its RSS is the model's memory;
on Apple silicon system and GPU memory are one pool and the same numbers are
the device's. Runner processes are found with psutil, restricted to
descendants of the server when its pid is known. The pid list is cached and
rescanned at most every ``refresh_s`` (only new pids are inspected), so
20-100 readings a second stay cheap, and a process that vanishes between two
readings is simply no longer counted. Shell equivalents::

    ps -o pid,rss,args -p $(pgrep -f 'ollama runner|llama-server --model')
    free -b          # total / available

Caveat on macOS: Metal buffers count in the process's memory footprint and
may not all show in RSS; compare readings as differences, as the method does.
"""
from __future__ import annotations

import os
import platform
import sys
import threading
import time
from typing import Callable, Iterable, Sequence

import psutil

from probes.memory.base import DeviceInfo, DeviceReading, ProcessUsage, Reading
from probes.units import fmt_size

Matcher = Callable[[Sequence[str]], bool]

# a process younger than this when first seen may still be between fork and
# exec (cmdline still the server's), so it is looked at again on the next scan
_YOUNG_S = 2.0
_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)


def _exe_name(arg0: str) -> str:
    exe = arg0.replace("\\", "/").rsplit("/", 1)[-1].lower()  # Windows paths too
    return exe[:-4] if exe.endswith(".exe") else exe


def is_ollama_runner(cmdline: Sequence[str]) -> bool:
    """Does this process hold a model for Ollama? Both eras:

    * legacy (v0.29 and before): ``/usr/local/bin/ollama runner --model ...``
      (and ``ollama.exe runner``), the in-process runner; from v0.30 ``ollama
      runner`` is also the MLX engine for safetensors models;
    * current (v0.30+): ``.../lib/ollama/llama-server --model BLOB ...``.
      Ollama also runs ``llama-server`` for GPU discovery, for a second and
      with no model (``--port N --host 127.0.0.1 --no-webui --offline
      --verbose``, then ``--list-devices``); those hold no model and never
      count, so only an instance given ``--model``/``-m`` does.
    """
    if len(cmdline) < 2:
        return False
    exe = _exe_name(cmdline[0])
    if exe == "ollama":
        return cmdline[1] == "runner"
    if exe == "llama-server":
        return any(arg in ("--model", "-m") or arg.startswith("--model=") for arg in cmdline[1:])
    return False


def is_unified_memory_host() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


class HostReader:
    """Watches the Ollama runner processes (or any pid set) in host memory.

    ``server_pid``: only runners descending from this process count; a
    callable returning the pid follows a server that oomvet restarts.
    ``pids``: watch exactly these pids instead of discovering runners.
    ``match``: decides from a cmdline whether a process is a runner.
    """

    name = "host"

    def __init__(self, *, server_pid: int | Callable[[], int | None] | None = None, pids: Iterable[int] | None = None,
                 match: Matcher = is_ollama_runner, refresh_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self._server_pid = server_pid
        self._fixed = None if pids is None else [int(p) for p in pids]
        self._match = match
        self._refresh_s = refresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._procs: dict[int, psutil.Process] = {}
        self._not_runner: dict[int, float] = {}   # pid -> create_time, known non-runners
        self._scanned_at: float | None = None
        self._unified = is_unified_memory_host()

    # -- discovery -------------------------------------------------------
    def _current(self) -> list[psutil.Process]:
        with self._lock:
            now = self._clock()
            if self._scanned_at is None or now - self._scanned_at >= self._refresh_s:
                self._scan()
                self._scanned_at = now
            return list(self._procs.values())

    def refresh(self) -> None:
        """Rescan now (e.g. right after asking Ollama to load a model)."""
        with self._lock:
            self._scan()
            self._scanned_at = self._clock()

    def _scan(self) -> None:
        if self._fixed is not None:
            for pid in self._fixed:
                if pid not in self._procs:
                    try:
                        self._procs[pid] = psutil.Process(pid)
                    except _GONE:
                        pass
            self._drop_dead()
            return
        live = set(psutil.pids())
        for pid in [p for p in self._procs if p not in live]:
            del self._procs[pid]
        for pid in [p for p in self._not_runner if p not in live]:
            del self._not_runner[pid]
        self._drop_dead()
        wall = time.time()
        for pid in live:
            if pid in self._procs or pid == os.getpid():
                continue
            seen = self._not_runner.get(pid)
            if seen is not None and wall - seen >= _YOUNG_S:
                continue
            try:
                proc = psutil.Process(pid)
                created = proc.create_time()
                is_runner = self._match(proc.cmdline()) and self._descends(proc)
            except _GONE:
                continue
            if is_runner:
                self._procs[pid] = proc
                self._not_runner.pop(pid, None)
            else:
                self._not_runner[pid] = created

    def _descends(self, proc: psutil.Process) -> bool:
        server_pid = self._server_pid() if callable(self._server_pid) else self._server_pid
        if server_pid is None:
            return True
        try:
            return any(p.pid == server_pid for p in proc.parents())
        except _GONE:
            return False

    def _drop_dead(self) -> None:
        for pid, proc in list(self._procs.items()):
            if not proc.is_running():
                del self._procs[pid]

    # -- MemoryReader ----------------------------------------------------
    def probe(self) -> tuple[bool, str]:
        vm = psutil.virtual_memory()
        runners = self._current()
        what = "unified memory" if self._unified else "system memory"
        if self._fixed is not None:
            found = f"{len(runners)} watched process(es)"
        elif runners:
            found = f"{len(runners)} ollama runner process(es)"
        else:
            found = "no ollama runner running yet"
        return True, f"host: {what} {fmt_size(vm.total)}, {fmt_size(vm.available)} available; {found}"

    def info(self) -> DeviceInfo:
        vm = psutil.virtual_memory()
        if self._unified:
            return DeviceInfo(f"{_cpu_name() or 'Apple silicon'} (unified memory)", "apple",
                              vm.total, True, self.name)
        return DeviceInfo(f"host memory ({_cpu_name() or platform.machine() or 'CPU'})", "cpu",
                          vm.total, False, self.name)

    def read(self) -> Reading:
        """used = summed RSS of the runners; total / free = system total / available."""
        used = sum(u for _, u in self._rss(self._current()))
        vm = psutil.virtual_memory()
        return Reading(self._clock(), used, vm.total, vm.available)

    def devices(self) -> list[DeviceReading]:
        """The host as the one device: used = total - available (everything
        the system holds, not only the runners, as a GPU's used is)."""
        vm = psutil.virtual_memory()
        return [DeviceReading(0, self.info().name, vm.total, vm.total - vm.available, vm.available)]

    def processes(self) -> list[ProcessUsage]:
        return [ProcessUsage(p.pid, _name(p), rss) for p, rss in self._rss(self._current())]

    def processes_for(self, pids: Iterable[int]) -> list[ProcessUsage]:
        """RSS of any pids (those that exist); what the tests point at a child."""
        procs = []
        for pid in pids:
            try:
                procs.append(psutil.Process(int(pid)))
            except _GONE:
                pass
        return [ProcessUsage(p.pid, _name(p), rss) for p, rss in self._rss(procs)]

    def close(self) -> None:
        with self._lock:
            self._procs.clear()
            self._not_runner.clear()
            self._scanned_at = None

    def _rss(self, procs: list[psutil.Process]) -> list[tuple[psutil.Process, int]]:
        out, gone = [], False
        for p in procs:
            try:
                out.append((p, p.memory_info().rss))
            except _GONE:
                gone = True
        if gone:
            with self._lock:
                self._scanned_at = None  # rescan on the next reading
        return out


def _name(proc: psutil.Process) -> str:
    """``ollama runner`` or ``llama-server``: the engine, not its arguments."""
    try:
        cmd = proc.cmdline()
        if cmd and _exe_name(cmd[0]) == "llama-server":
            return "llama-server"
        return " ".join([os.path.basename(cmd[0]), *cmd[1:2]]) if cmd else proc.name()
    except _GONE:
        return "?"


def _cpu_name() -> str | None:
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.lower().startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            return None
    if sys.platform == "darwin":
        try:
            import subprocess
            name = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                  text=True, timeout=2).stdout.strip()
            if name:
                return name  # "Apple M2 Pro"
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or None
