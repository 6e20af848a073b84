"""One loaded model of the simulated server (:class:`Runner`, an ``ollama
runner`` or ``llama-server`` process) and one request holding a slot of it
(:class:`Ticket`)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from probes import memmodel
from oomsim.scenario import ModelSpec
from oomsim.spread import Split


@dataclass
class Runner:
    """One loaded model (an ``ollama runner`` process)."""

    model: ModelSpec
    num_ctx: int               # per slot, as requested (``/api/ps`` context_length)
    num_batch: int             # the batch the runner uses (the current engine raises an unset one)
    num_gpu: int
    num_parallel: int
    kv_type: str               # the type really used
    placement: memmodel.Placement   # Ollama's estimate: what /api/ps shows
    actual: memmodel.Placement      # the same layers, as the runner allocates them
    pid: int
    loaded_at: float
    expires_at: float | None
    slots: threading.BoundedSemaphore
    leaked_bytes: int = 0
    transient: dict[int, int] = field(default_factory=dict)
    alive: bool = True
    requests: int = 0
    refs: int = 0              # requests between scheduling and their answer: never expired meanwhile
    unloading: bool = False    # asked to unload while busy: goes when its requests are answered
    auto_ctx: bool = False     # num_ctx chosen by the server (current engine): any auto request reuses it
    measured: bool = False     # /api/ps shows measured buffers (current engine), not the estimate
    last_error: str = ""       # what the runtime printed when it died (Ollama's captured error)
    asked_batch: int = 0       # the num_batch the load's request carried (512 when unset): a request
                               # carrying the same is served by this runner, not a reload
    split: Split | None = None     # on a machine with several GPUs: which device got which layers
    held: tuple[int, ...] = ()     # with ``split``: bytes each of split.devices really holds
    keep_s: float | None = 300.0   # the session duration (keep_alive) eviction orders by

    def device_bytes(self) -> dict[int, int]:
        """Device index -> bytes the runner's layers, KV and graph hold there."""
        if self.split is None:
            return {0: self.resident_gpu_bytes} if self.resident_gpu_bytes else {}
        return {d: b for d, b in zip(self.split.devices, self.held) if b}

    @property
    def main_device(self) -> int:
        """Where a request's scratch memory and leaks land: the first GPU with layers."""
        if self.split is None:
            return 0
        return next((d for d, b in zip(self.split.devices, self.held) if b), self.split.devices[0])

    @property
    def ctx_slot(self) -> int:
        return memmodel.clamp_ctx(self.model.arch, self.num_ctx)

    @property
    def resident_gpu_bytes(self) -> int:
        """What the runner really allocates on the GPU: the estimate without
        its spare layer, and for num_ctx x parallel cells without the
        estimate's floor of 2048."""
        if self.split is not None:
            return sum(self.held)
        p = self.actual
        return max(p.size_vram_bytes - p.buffer_bytes, 0) if p.layers_gpu else 0

    @property
    def resident_cpu_bytes(self) -> int:
        return max(self.actual.size_bytes - self.actual.size_vram_bytes, 0)

    def creep_bytes(self, now: float, per_minute: int) -> int:
        return int(max(now - self.loaded_at, 0.0) / 60.0 * per_minute) if per_minute else 0


@dataclass
class Ticket:
    """One request holding a slot of a runner."""

    id: int
    runner: Runner
    prompt_tokens: int          # evaluated (after truncation)
    sent_tokens: int
    truncated: bool
    pieces: list[str]
    done_reason: str
    prompt_eval_ns: int
    eval_ns: int
    load_ns: int
    error: str | None = None    # set when the runner fails during the request
