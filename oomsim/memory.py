"""The simulated devices' memory: what each runner really holds on each card
(its estimate without the spare layer, leaks, creep, a request's scratch),
what NVML or ``*-smi`` would read as used per card, and what the scheduler
sees as free on each card before a load. Device 0 is the scenario's first
card; a machine with one card has only device 0."""
from __future__ import annotations

from oomsim.devspec import DeviceSpec
from oomsim.runner import Runner


class DeviceMemory:
    """The accounting part of :class:`oomsim.state.SimState` (reads
    ``scenario``, ``runners``, ``lock``, ``clock``)."""

    def _tier_vram(self) -> int:
        # v0.34.4 sums every GPU's total less OLLAMA_GPU_OVERHEAD (server/routes.go)
        overhead = self.scenario.server.gpu_overhead_bytes
        return sum(max(d.total_bytes - overhead, 0) for d in self.scenario.devices)

    @property
    def vendor(self) -> str:
        return self.scenario.device.vendor

    @property
    def devices(self) -> tuple[DeviceSpec, ...]:
        return self.scenario.devices

    def _extra_bytes(self, r: Runner, now: float) -> int:
        """What a runner holds beyond its layers: leaks, scratch, creep (on its main GPU)."""
        return r.leaked_bytes + sum(r.transient.values()) + r.creep_bytes(now, self.scenario.faults.leak_per_minute_bytes)

    def _runner_bytes(self, r: Runner, now: float, index: int | None = None) -> int:
        """Device memory one runner holds now on device ``index`` (None: all
        devices; on unified memory: all of it, its CPU part included)."""
        if not (r.placement.layers_gpu or self.scenario.device.unified):
            return 0  # a CPU-only runner holds nothing on the device
        per = r.device_bytes()
        if index is None:
            held = sum(per.values())
        else:
            held = per.get(index, 0)
            if index != r.main_device:
                return held
        held += self._extra_bytes(r, now)
        if self.scenario.device.unified:
            held += r.resident_cpu_bytes
        return held

    def used_bytes(self, now: float | None = None, index: int = 0) -> int:
        """What NVML / rocm-smi would read as used on device ``index`` (never above its total)."""
        with self.lock:
            now = self.clock() if now is None else now
            self._expire(now)
            dev = self.devices[index]
            used = dev.used_by_others_bytes + sum(self._runner_bytes(r, now, index) for r in self.runners.values())
            return min(used, dev.total_bytes)

    def reading(self, index: int = 0) -> tuple[int, int, int]:
        """(total, used, free) bytes of device ``index``."""
        total = self.devices[index].total_bytes
        used = self.used_bytes(index=index)
        return total, used, total - used

    def processes(self, index: int | None = None) -> list[tuple[int, str, int]]:
        """(pid, process name, device bytes) on device ``index``: the other
        processes, then the runners. None: every device, bytes summed per pid."""
        with self.lock:
            now = self.clock()
            self._expire(now)
            out: dict[int, list] = {}
            for i in (range(len(self.devices)) if index is None else (index,)):
                others = self.devices[i].used_by_others_bytes
                if others:
                    # one desktop process per card, as each card's X server client shows
                    out.setdefault(2101 + i, [2101 + i, "/usr/lib/xorg/Xorg", 0])[2] += others
            for r in self.runners.values():
                held = self._runner_bytes(r, now, index)
                if held:
                    out.setdefault(r.pid, [r.pid, "/usr/local/bin/ollama", 0])[2] += held
            return [tuple(v) for v in out.values()]

    def over_device(self, now: float) -> tuple[int, int] | None:
        """(device index, bytes needed) of the first card whose holdings exceed it, or None."""
        for i, dev in enumerate(self.devices):
            need = dev.used_by_others_bytes + sum(self._runner_bytes(r, now, i) for r in self.runners.values())
            if need > dev.total_bytes:
                return i, need
        return None

    def _gpu_free_for_load(self, now: float, exclude: str | None = None, index: int = 0) -> int:
        """Free memory on device ``index`` as Ollama's scheduler sees it before a load."""
        dev = self.devices[index]
        others = [r for k, r in self.runners.items() if k != exclude]
        if dev.unified:
            # Metal offers a working set of about 3/4 of unified memory
            return max(int(dev.total_bytes * 0.75) - sum(r.placement.size_vram_bytes for r in others), 0)
        used = dev.used_by_others_bytes + sum(self._runner_bytes(r, now, index) for r in others)
        return max(dev.total_bytes - used, 0)

    def _host_free(self, exclude: str | None = None) -> int:
        host = self.scenario.host
        held = sum(r.resident_cpu_bytes for k, r in self.runners.items() if k != exclude)
        return max(host.total_bytes - host.used_bytes - held, 0)
