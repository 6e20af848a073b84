"""The simulated device's memory: what each runner really holds (its estimate
without the spare layer, leaks, creep, a request's scratch), what NVML or
``*-smi`` would read as used, and what the scheduler sees as free before a load."""
from __future__ import annotations

from oomsim.runner import Runner


class DeviceMemory:
    """The accounting part of :class:`oomsim.state.SimState` (reads
    ``scenario``, ``runners``, ``lock``, ``clock``)."""

    def _tier_vram(self) -> int:
        return max(self.scenario.device.total_bytes - self.scenario.server.gpu_overhead_bytes, 0)

    @property
    def vendor(self) -> str:
        return self.scenario.device.vendor

    def _runner_bytes(self, r: Runner, now: float) -> int:
        """Device memory one runner holds now (on unified memory: all of it)."""
        if not (r.placement.layers_gpu or self.scenario.device.unified):
            return 0  # a CPU-only runner holds nothing on the device
        held = (r.resident_gpu_bytes + r.leaked_bytes + sum(r.transient.values())
                + r.creep_bytes(now, self.scenario.faults.leak_per_minute_bytes))
        if self.scenario.device.unified:
            held += r.resident_cpu_bytes
        return held

    def used_bytes(self, now: float | None = None) -> int:
        """What NVML / rocm-smi would read as used (never above the total)."""
        with self.lock:
            now = self.clock() if now is None else now
            self._expire(now)
            used = self.scenario.device.used_by_others_bytes + sum(
                self._runner_bytes(r, now) for r in self.runners.values())
            return min(used, self.scenario.device.total_bytes)

    def reading(self) -> tuple[int, int, int]:
        """(total, used, free) bytes."""
        total = self.scenario.device.total_bytes
        used = self.used_bytes()
        return total, used, total - used

    def processes(self) -> list[tuple[int, str, int]]:
        """(pid, process name, device bytes): the other processes, then the runners."""
        with self.lock:
            now = self.clock()
            self._expire(now)
            out = []
            if self.scenario.device.used_by_others_bytes:
                out.append((2101, "/usr/lib/xorg/Xorg", self.scenario.device.used_by_others_bytes))
            for r in self.runners.values():
                held = self._runner_bytes(r, now)
                if held:
                    out.append((r.pid, "/usr/local/bin/ollama", held))
            return out

    def _gpu_free_for_load(self, now: float, exclude: str | None = None) -> int:
        """Free memory as Ollama's scheduler sees it before a load."""
        dev = self.scenario.device
        others = [r for k, r in self.runners.items() if k != exclude]
        if dev.unified:
            # Metal offers a working set of about 3/4 of unified memory
            return max(int(dev.total_bytes * 0.75) - sum(r.placement.size_vram_bytes for r in others), 0)
        used = dev.used_by_others_bytes + sum(self._runner_bytes(r, now) for r in others)
        return max(dev.total_bytes - used, 0)

    def _host_free(self, exclude: str | None = None) -> int:
        host = self.scenario.host
        held = sum(r.resident_cpu_bytes for k, r in self.runners.items() if k != exclude)
        return max(host.total_bytes - host.used_bytes - held, 0)
