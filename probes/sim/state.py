"""The simulated Ollama server's memory: what is loaded, where, and what the
device reads at any moment.

Loads are placed with :func:`probes.memmodel.place` exactly as the probes
predict them; ``/api/ps`` shows that estimate. The device reading is the
memory really held: other processes, each runner's estimate less the one
spare layer the estimate keeps as a buffer, memory leaked by a runner, and a
transient scratch buffer while a request runs. A request whose peak does not
fit the device kills its runner (the crash text Ollama sends), a forced
``num_gpu`` that cannot be allocated fails the load with the runner's CUDA
out-of-memory text. The HTTP layer (:mod:`probes.sim.server`) only turns
this into JSON; everything here is callable from tests without a socket.
"""
from __future__ import annotations

import itertools
import math
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

from probes import memmodel
from probes.serverinfo import engine_of
from probes.serverinfo import vram_tier as vram_default_ctx
from probes.sim import text as simtext
from probes.sim.scenario import ModelSpec, Scenario

MIB = 1 << 20
GIB = 1 << 30

# error texts of Ollama v0.11.4 (shared/ollama-notes.md section 4)
NOT_FOUND = "model '{name}' not found"
LOAD_OOM = "llama runner process has terminated: cudaMalloc failed: out of memory"
LOAD_OOM_METAL = "llama runner process has terminated: error loading model: unable to allocate backend buffer"
CRASH = ("model runner has unexpectedly stopped, this may be due to resource limitations or an internal "
         "error, check ollama server logs for details")
RUN_ERROR = "an error was encountered while running the model: {text}"
SYSTEM_RAM = "model requires more system memory ({need}) than is available ({have})"
# what the runtime prints when an allocation fails mid-request; Ollama's status
# writer captures it and the request's error ends with it (both engines)
RUNTIME_OOM_MSG = {"nvidia": "CUDA error: out of memory", "amd": "ROCm error: out of memory",
                   "apple": "error:Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"}
RUNTIME_OOM = RUN_ERROR.format(text=RUNTIME_OOM_MSG["nvidia"])
# the current llama-server engine (v0.30+, shared/ollama-current.md 3.6)
CURRENT_LOAD_OOM = ("llama-server reported out-of-memory during startup: ggml_backend_cuda_buffer_type_alloc_buffer: "
                    "allocating {mib:.2f} MiB on device 0: cudaMalloc failed: out of memory")
CURRENT_LOAD_OOM_METAL = ("llama-server reported out-of-memory during startup: ggml_metal_buffer_init: error: "
                          "failed to allocate buffer, size = {mib:.2f} MiB")
CURRENT_HOST_OOM = ("llama-server reported out-of-memory during startup: ggml_backend_cpu_buffer_type_alloc_buffer: "
                    "failed to allocate buffer of size {size}")
CURRENT_KV_NEEDS_FA = ("llama-server process has terminated: exit status 1: llama_init_from_model: failed to "
                       "initialize the context: quantized V cache requires flash_attn to be enabled")
FIT_TARGET_DEFAULT = 1024 * (1 << 20)   # llama.cpp's --fit-target default: 1024 MiB free per device
LLAMA_SERVER = "/usr/lib/ollama/llama-server"


def is_current(version: str) -> bool:
    """Does this Ollama version run models in llama-server (v0.30 and later)?"""
    return engine_of(version) == "llama-server"

CUBLAS_WORKSPACE_BYTES = 32 * MIB
GPU_BANDWIDTH = {"nvidia": 300 * GIB, "amd": 300 * GIB, "apple": 200 * GIB}
CPU_BANDWIDTH = 40 * GIB
DISK_BANDWIDTH = 2 * GIB
PROMPT_SPEEDUP = 25      # prompt tokens go through in batches, this many times faster than generation
TEMPLATE_TOKENS = 5      # the chat template around a generate prompt
MESSAGE_TOKENS = 4       # per chat message (role markers)

ENV_DEFAULTS = {
    "OLLAMA_NUM_PARALLEL": "1",
    "OLLAMA_FLASH_ATTENTION": "false",
    "OLLAMA_KV_CACHE_TYPE": "f16",
    "OLLAMA_CONTEXT_LENGTH": "4096",
    "OLLAMA_GPU_OVERHEAD": "0",
    "OLLAMA_KEEP_ALIVE": "5m",
}

_GO_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class SimError(Exception):
    """An answer Ollama gives as ``{"error": text}`` with an HTTP status."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status
        self.text = text


def parse_keep_alive(value: Any, default_s: float | None) -> float | None:
    """Seconds to keep a model loaded; None = forever. Numbers are seconds,
    text is a Go duration (``5m``, ``1h30m``); negative means forever."""
    if value is None or value == "":
        return default_s
    if isinstance(value, bool):
        raise SimError(400, f"Unsupported type: '{type(value).__name__}'")
    if isinstance(value, (int, float)):
        return None if value < 0 else float(int(value))
    text = str(value).strip()
    try:
        number = float(text)
        return None if number < 0 else number
    except ValueError:
        pass
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        raise SimError(400, f'time: invalid duration "{text}"')
    seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    return None if seconds < 0 else seconds


def human_bytes2(n: int) -> str:
    """Ollama's ``format.HumanBytes2`` (1024-based, one decimal)."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _truthy(text: str) -> bool:
    return str(text).strip().lower() in ("1", "true", "t", "yes", "on")


@dataclass(frozen=True)
class Settings:
    """The server-wide knobs in force (from the scenario, then ``restart(env)``)."""

    num_parallel: int
    flash_attention: bool
    kv_cache_type: str         # as requested; see effective_kv_type
    context_length: int        # 0: not set (the current engine then picks by VRAM)
    gpu_overhead_bytes: int
    keep_alive_s: float | None
    flash_attention_mode: str = "off"   # auto / on / off
    fit_target_bytes: int = FIT_TARGET_DEFAULT


@dataclass
class Runner:
    """One loaded model (an ``ollama runner`` process)."""

    model: ModelSpec
    num_ctx: int               # per slot, as requested (``/api/ps`` context_length)
    num_batch: int
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

    @property
    def ctx_slot(self) -> int:
        return memmodel.clamp_ctx(self.model.arch, self.num_ctx)

    @property
    def resident_gpu_bytes(self) -> int:
        """What the runner really allocates on the GPU: the estimate without
        its spare layer, and for num_ctx x parallel cells without the
        estimate's floor of 2048."""
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


class SimState:
    """Thread-safe state of one simulated server and its device."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float] = time.monotonic):
        self.scenario = scenario
        self.clock = clock
        self.lock = threading.RLock()
        self.runners: dict[str, Runner] = {}
        self.log: list[str] = []
        self._pids = itertools.count(41000)
        self._ids = itertools.count(1)
        self._env: dict[str, str] = {}
        self.restarts = 0
        self.current = is_current(scenario.server.version)
        self.reset_env()
        self._log(f'msg="Listening on 127.0.0.1 (version {scenario.server.version})"')
        if self.current:
            self._log(f'msg="inference compute" id=GPU-0 library={_library(self.vendor)} '
                      f'name="{scenario.device.name}" total="{human_bytes2(scenario.device.total_bytes)}"')
            self._log(f'msg="vram-based default context" total_vram="{human_bytes2(self._tier_vram())}" '
                      f'default_num_ctx={vram_default_ctx(self._tier_vram())}')

    def _tier_vram(self) -> int:
        return max(self.scenario.device.total_bytes - self.scenario.server.gpu_overhead_bytes, 0)

    # -- server environment ------------------------------------------------
    def reset_env(self) -> None:
        s = self.scenario.server
        self._env = {
            "OLLAMA_NUM_PARALLEL": str(s.num_parallel),
            "OLLAMA_FLASH_ATTENTION": "true" if s.flash_attention else "false",
            "OLLAMA_KV_CACHE_TYPE": s.kv_cache_type,
            "OLLAMA_CONTEXT_LENGTH": str(s.context_length if s.context_length is not None else 4096),
            "OLLAMA_GPU_OVERHEAD": str(s.gpu_overhead_bytes),
            "OLLAMA_KEEP_ALIVE": s.keep_alive,
        }
        if is_current(s.version):
            # unset on the current engine means: flash attention auto, context by VRAM tier
            if s.flash_attention is None:
                del self._env["OLLAMA_FLASH_ATTENTION"]
            if s.context_length is None:
                del self._env["OLLAMA_CONTEXT_LENGTH"]
            if s.fit_target_mib is not None:
                self._env["LLAMA_ARG_FIT_TARGET"] = str(s.fit_target_mib)

    def env(self) -> dict[str, str]:
        with self.lock:
            return dict(self._env)

    def restart(self, env: Mapping[str, str] | None = None) -> None:
        """Stop every runner and start again with ``env`` on top of the current
        settings (an empty value puts a variable back to Ollama's default)."""
        with self.lock:
            for key in list(self.runners):
                self._drop(key, "server restart")
            for key, value in (env or {}).items():
                key = str(key)
                if value is None or str(value) == "":
                    if key in ENV_DEFAULTS:
                        self._env[key] = ENV_DEFAULTS[key]
                    else:
                        self._env.pop(key, None)
                else:
                    self._env[key] = str(value)
            self.restarts += 1
            self._log(f'msg="server restarted" env="{_env_line(self._env)}"')

    def settings(self) -> Settings:
        env = self.env()

        def uint(key: str, default: int) -> int:
            try:
                value = int(str(env.get(key, default)).strip())
            except ValueError:
                self._log(f'level=WARN msg="invalid environment variable, using default" key={key}')
                return default
            return value if value >= 0 else default

        parallel = uint("OLLAMA_NUM_PARALLEL", 1) or 1
        try:
            keep = parse_keep_alive(env.get("OLLAMA_KEEP_ALIVE", "5m"), 300.0)
        except SimError:
            keep = 300.0
        current = is_current(self.scenario.server.version)
        fa_raw = env.get("OLLAMA_FLASH_ATTENTION")
        if fa_raw is None or str(fa_raw).strip() == "":
            fa_mode = "auto" if current else "off"
        else:
            fa_mode = "on" if _truthy(fa_raw) else "off"
        return Settings(
            num_parallel=parallel,
            flash_attention=fa_mode != "off",
            kv_cache_type=str(env.get("OLLAMA_KV_CACHE_TYPE", "f16")).strip().lower() or "f16",
            context_length=uint("OLLAMA_CONTEXT_LENGTH", 0 if current else 4096) or (0 if current else 4096),
            gpu_overhead_bytes=uint("OLLAMA_GPU_OVERHEAD", 0),
            keep_alive_s=keep,
            flash_attention_mode=fa_mode,
            fit_target_bytes=uint("LLAMA_ARG_FIT_TARGET", FIT_TARGET_DEFAULT // MIB) * MIB,
        )

    # -- the device ----------------------------------------------------------
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

    # -- models ----------------------------------------------------------------
    def find(self, name: str) -> ModelSpec:
        model = self.scenario.find(name or "")
        if model is None:
            raise SimError(404, NOT_FOUND.format(name=name))
        return model

    def loaded(self) -> list[Runner]:
        with self.lock:
            self._expire(self.clock())
            return sorted(self.runners.values(), key=lambda r: -(math.inf if r.expires_at is None else r.expires_at))

    def _expire(self, now: float) -> None:
        for key, r in list(self.runners.items()):
            if r.expires_at is not None and now >= r.expires_at and not r.transient and not r.refs:
                self._drop(key, "expired")

    def _drop(self, key: str, why: str) -> None:
        r = self.runners.pop(key, None)
        if r is not None:
            r.alive = False
            self._log(f'msg="runner stopped" model={r.model.tag} pid={r.pid} reason="{why}"')

    def unload(self, name: str) -> None:
        """``keep_alive: 0``: gone now, or as soon as its requests are answered."""
        model = self.find(name)
        with self.lock:
            r = self.runners.get(model.tag.lower())
            if r is not None and (r.transient or r.refs):
                r.expires_at, r.unloading = self.clock(), True
            else:
                self._drop(model.tag.lower(), "keep_alive 0")

    def _log(self, line: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.log.append(f"time={stamp} level=INFO source=sim {line}" if "level=" not in line
                        else f"time={stamp} {line} source=sim")
        del self.log[:-2000]

    # -- scheduling ------------------------------------------------------------
    def schedule(self, name: str, options: Mapping[str, Any] | None, keep_alive: Any,
                 hold: bool = False) -> tuple[Runner, int]:
        """The runner for a request: the loaded one when its options match,
        else a (re)load. Returns (runner, load time in ns). Raises SimError.
        ``hold``: keep the runner from expiring until :meth:`release`."""
        model = self.find(name)
        options = dict(options or {})
        settings = self.settings()
        keep_s = parse_keep_alive(keep_alive, settings.keep_alive_s)
        auto = self.current and options.get("num_ctx") is None and not settings.context_length
        num_ctx = _int_option(options, "num_ctx", settings.context_length or vram_default_ctx(self._tier_vram()))
        num_batch = _int_option(options, "num_batch", 512)
        num_gpu = _int_option(options, "num_gpu", -1)
        if num_ctx < 4:
            num_ctx = 4
        if num_batch < 1:
            raise SimError(500, "llama runner process has terminated: GGML_ASSERT(n_batch > 0) failed")
        key = model.tag.lower()
        with self.lock:
            now = self.clock()
            self._expire(now)
            current = self.runners.get(key)
            same_ctx = current is not None and (current.num_ctx == num_ctx or (auto and current.auto_ctx))
            if current is not None and same_ctx and current.num_batch == num_batch \
                    and (num_gpu < 0 or current.num_gpu == num_gpu) and current.num_parallel == settings.num_parallel:
                current.expires_at = None if keep_s is None else now + max(keep_s, 0.0)
                current.refs += int(hold)
                return current, 0
            if current is not None:
                self._drop(key, "options changed, reloading")
            if self.current:
                runner = self._load_current(model, settings, num_ctx, num_batch, num_gpu, now, auto)
            else:
                runner = self._load(model, settings, num_ctx, num_batch, num_gpu, now)
            runner.expires_at = None if keep_s is None else now + max(keep_s, 0.0)
            runner.refs += int(hold)
            self.runners[key] = runner
            load_ns = int(model.weights_bytes / DISK_BANDWIDTH * 1e9)
        if self.scenario.timing.load_s:
            time.sleep(self.scenario.timing.load_s)
        return runner, load_ns

    def _warn_clamped(self, arch: memmodel.Arch, num_ctx: int, parallel: int = 0) -> bool:
        """Ollama's only trace of a num_ctx above the trained context: a WARN line
        (v0.11.4 prints the context times ``parallel`` slots)."""
        if num_ctx <= arch.context_length:
            return False
        shown = f"num_ctx={num_ctx * parallel} num_parallel={parallel}" if parallel else f"num_ctx={num_ctx}"
        self._log(f'level=WARN msg="requested context size too large for model" {shown} '
                  f'n_ctx_train={arch.context_length}')
        return True

    def _load(self, model: ModelSpec, s: Settings, num_ctx: int, num_batch: int, num_gpu: int,
              now: float) -> Runner:
        dev, arch, key = self.scenario.device, model.arch, model.tag.lower()
        self._warn_clamped(arch, num_ctx, s.num_parallel)
        kv_type = memmodel.effective_kv_type(s.kv_cache_type if s.kv_cache_type in memmodel.KV_ELEMENT_BYTES
                                             else "f16", s.flash_attention, arch.supports_flash_attention)
        if s.kv_cache_type not in ("f16", "") and kv_type == "f16":
            self._log(f'level=WARN msg="quantized kv cache requested but flash attention disabled" '
                      f'type={s.kv_cache_type}')
        min_gpu = memmodel.MIN_GPU_BYTES_METAL if dev.unified else memmodel.MIN_GPU_BYTES_CUDA

        def placement(free: int, layers: int = num_gpu, floor: int = memmodel.ESTIMATE_MIN_CTX) -> memmodel.Placement:
            return memmodel.place(arch, model.weights_bytes, num_ctx, s.num_parallel, num_batch, kv_type, free,
                                  num_gpu=layers, overhead_bytes=s.gpu_overhead_bytes, min_gpu_bytes=min_gpu,
                                  unified=dev.unified, estimate_min_ctx=floor)

        free = self._gpu_free_for_load(now, exclude=key)
        p = placement(free)
        if not p.full_gpu and num_gpu < 0:
            # like the scheduler, make room by unloading idle models, then try again
            idle = [k for k, r in self.runners.items() if k != key and not r.transient]
            if idle:
                for k in idle:
                    self._drop(k, "evicted to make room")
                free = self._gpu_free_for_load(now, exclude=key)
                p = placement(free)
        if p.layers_gpu == 0 and kv_type != "f16":
            kv_type = "f16"  # no flash attention on CPU at v0.11.4
            p = placement(free)
        self._log(f'msg=offload library={_library(dev.vendor)} layers.requested={num_gpu} '
                  f'layers.model={p.layers_total} layers.offload={p.layers_gpu} '
                  f'memory.available="[{human_bytes2(free)}]" memory.required.full="{human_bytes2(p.size_bytes)}" '
                  f'memory.required.partial="{human_bytes2(p.size_vram_bytes)}" '
                  f'memory.required.kv="{human_bytes2(p.kv_bytes)}" '
                  f'memory.weights.total="{human_bytes2(p.weights_bytes)}" memory.graph="{human_bytes2(p.graph_bytes)}"')
        if not dev.unified:
            cpu_part = p.size_bytes - p.size_vram_bytes
            have = self._host_free(exclude=key)
            if p.layers_gpu and cpu_part > have:
                raise SimError(500, SYSTEM_RAM.format(need=human_bytes2(cpu_part), have=human_bytes2(have)))
        # the runner gets --n-gpu-layers from the estimate and allocates for the real context
        actual = placement(free, layers=p.layers_gpu, floor=0)
        resident = max(actual.size_vram_bytes - actual.buffer_bytes, 0) if p.layers_gpu else 0
        if dev.unified:
            resident += actual.size_bytes - actual.size_vram_bytes
            available = dev.total_bytes - dev.used_by_others_bytes - sum(
                self._runner_bytes(r, now) for k, r in self.runners.items() if k != key)
        else:
            available = free
        if p.layers_gpu and resident > available:
            # only a forced num_gpu gets here: the runner tries and the allocation fails
            self._log(f'level=ERROR msg="llama runner terminated" error="cudaMalloc failed: out of memory" '
                      f'layers={p.layers_gpu}')
            raise SimError(500, LOAD_OOM_METAL if dev.unified else LOAD_OOM)
        pid = next(self._pids)
        self._log(f'msg="llama runner started" model={model.tag} pid={pid} ctx-size={num_ctx * s.num_parallel} '
                  f'batch-size={num_batch} n-gpu-layers={p.layers_gpu} parallel={s.num_parallel} kv-type={kv_type}')
        return Runner(model=model, num_ctx=num_ctx, num_batch=num_batch, num_gpu=num_gpu,
                      num_parallel=s.num_parallel, kv_type=kv_type, placement=p, actual=actual, pid=pid,
                      loaded_at=now,
                      expires_at=None, slots=threading.BoundedSemaphore(s.num_parallel))

    def _load_current(self, model: ModelSpec, s: Settings, num_ctx: int, num_batch: int, num_gpu: int,
                      now: float, auto: bool, retried: bool = False) -> Runner:
        """A load on the current engine: Ollama starts llama-server with ``-c
        num_ctx x parallel``, llama.cpp's fit places the layers so that
        ``fit_target`` stays free, and /api/ps shows the buffers it allocated.
        A failed automatic-context load is retried once at a smaller context."""
        dev, arch, key = self.scenario.device, model.arch, model.tag.lower()
        if self._warn_clamped(arch, num_ctx):
            num_ctx = arch.context_length
        if not options_batch_set(num_batch) and num_ctx > 4096:
            num_batch = 2048 if num_ctx > 32768 else 1024   # automaticGenerationBatch
        kv = s.kv_cache_type if s.kv_cache_type in memmodel.KV_ELEMENT_BYTES else "f16"
        args = [LLAMA_SERVER, "--model", f"/root/.ollama/models/blobs/sha256-{_blob(model.tag)}", "--port", "0",
                "--host", "127.0.0.1", "--no-webui", "--offline", "-c", str(num_ctx * s.num_parallel),
                "-np", str(s.num_parallel), "--log-verbosity", "4", "--no-log-prefix", "--no-log-timestamps"]
        if kv != "f16":
            args += ["--cache-type-k", kv, "--cache-type-v", kv]
        args += ["--flash-attn", s.flash_attention_mode, "-b", str(num_batch), "-ub", str(num_batch)]
        if num_gpu >= 0:
            args += ["-ngl", str(num_gpu)]
        self._log(f'msg="starting llama-server" cmd="{" ".join(args)}"')
        if kv != "f16":
            if s.flash_attention_mode == "off":
                self._log("llama_init_from_model: failed to initialize the context: quantized V cache requires "
                          "flash_attn to be enabled")
                self._log(f'level=ERROR msg="llama-server terminated" error="exit status 1" model={model.tag}')
                raise SimError(500, CURRENT_KV_NEEDS_FA)
            if s.flash_attention_mode == "auto":
                self._log("llama_context: enabling flash_attn since it is required for quantized V cache")
        free = self._gpu_free_for_load(now, exclude=key)

        def fit(layers: int = num_gpu) -> memmodel.Placement:
            return memmodel.place(arch, model.weights_bytes, num_ctx, s.num_parallel, num_batch, kv, free,
                                  num_gpu=layers, overhead_bytes=s.fit_target_bytes, min_gpu_bytes=0,
                                  unified=dev.unified, estimate_min_ctx=0)

        p = fit()
        gpu = max(p.size_vram_bytes - p.buffer_bytes, 0) if p.layers_gpu else 0
        host = p.size_bytes - p.size_vram_bytes
        self._log(f"common_params_fit_impl: projected to use {gpu // MIB} MiB of device memory vs. "
                  f"{free // MIB} MiB of free device memory")
        if num_gpu >= 0:
            self._log(f"common_fit_params: failed to fit params to free device memory: n_gpu_layers already set "
                      f"by user to {num_gpu}, abort")
        failure = None
        if num_gpu > 0 and gpu > free:
            failure = (CURRENT_LOAD_OOM_METAL if dev.unified else CURRENT_LOAD_OOM).format(mib=gpu / MIB)
            self._log(failure.split(": ", 1)[1])
        elif not dev.unified and host > self._host_free(exclude=key):
            failure = CURRENT_HOST_OOM.format(size=host)
            self._log(failure.split(": ", 1)[1])
        if failure is not None:
            self._log(f'msg="Load failed" model={model.tag} error="{failure}"')
            lower = 32768 if num_ctx > 32768 else 4096 if num_ctx > 4096 else 0
            if auto and not retried and lower:
                self._log(f'level=WARN msg="llama-server load failed; reducing automatic context and retrying once" '
                          f'model={model.tag} old_num_ctx={num_ctx} new_num_ctx={lower} old_num_batch={num_batch} '
                          f'new_num_batch=512')
                return self._load_current(model, s, lower, 512, num_gpu, now, auto, retried=True)
            raise SimError(500, failure)
        device = {"nvidia": "CUDA0", "amd": "ROCm0", "apple": "MTL0"}[dev.vendor]
        share = p.layers_gpu / max(p.layers_total, 1)
        gpu_weights = int(p.weights_bytes * share)
        gpu_kv = int(p.kv_bytes * min(p.layers_gpu, arch.block_count) / max(arch.block_count, 1))
        for where, kind, size in ((device, "model", gpu_weights), ("CPU", "model", p.weights_bytes - gpu_weights),
                                  (device, "KV", gpu_kv), ("CPU", "KV", p.kv_bytes - gpu_kv),
                                  (device if p.layers_gpu else "CPU", "compute", p.graph_bytes)):
            if size > 0:
                self._log(f"{_buffer_func(kind)}: {where:>10} {kind} buffer size = {size / MIB:8.2f} MiB")
        self._log(f"load_tensors: offloaded {p.layers_gpu}/{p.layers_total} layers to GPU")
        pid = next(self._pids)
        self._log('msg="llama-server started in 0.05 seconds"')
        return Runner(model=model, num_ctx=num_ctx, num_batch=num_batch, num_gpu=num_gpu,
                      num_parallel=s.num_parallel, kv_type=kv, placement=p, actual=p, pid=pid, loaded_at=now,
                      expires_at=None, slots=threading.BoundedSemaphore(s.num_parallel), auto_ctx=auto,
                      measured=True)

    def release(self, runner: Runner) -> None:
        """The request that scheduled ``runner`` with ``hold`` is answered."""
        with self.lock:
            runner.refs = max(runner.refs - 1, 0)
            self._expire(self.clock())

    def set_expiry(self, runner: Runner, keep_alive: Any) -> None:
        keep_s = 0.0 if runner.unloading else parse_keep_alive(keep_alive, self.settings().keep_alive_s)
        with self.lock:
            runner.expires_at = None if keep_s is None else self.clock() + max(keep_s, 0.0)
            self._expire(self.clock())

    # -- requests ----------------------------------------------------------------
    def begin(self, runner: Runner, prompt: str, options: Mapping[str, Any] | None, *,
              extra_tokens: int = TEMPLATE_TOKENS, answer_to: str | None = None,
              timeout_s: float = 600.0) -> Ticket:
        """Start a request on ``runner``: wait for a free slot, add the
        request's scratch memory, and crash the runner if the device is now
        over its total. ``prompt`` is everything sent (it is what counts
        against num_ctx); ``answer_to`` the text the answer is about (default:
        the prompt). Raises SimError (500) for a crash or a runner error."""
        options = dict(options or {})
        if not runner.slots.acquire(timeout=timeout_s):
            raise SimError(503, "server busy, please try again.  maximum pending requests exceeded")
        try:
            return self._begin(runner, prompt, options, extra_tokens, prompt if answer_to is None else answer_to)
        except BaseException:
            runner.slots.release()
            raise

    def _begin(self, runner: Runner, prompt: str, options: dict, extra_tokens: int, answer_to: str) -> Ticket:
        faults = self.scenario.faults
        model = runner.model
        sent = simtext.count_tokens(prompt) + extra_tokens
        ctx = runner.ctx_slot
        truncated = sent > ctx
        evaluated = ctx if truncated else sent
        seed = _int_option(options, "seed", 0)
        if seed < 0:
            seed = 0
        num_predict = _int_option(options, "num_predict", -1)
        limit = 10 * ctx if num_predict <= 0 or num_predict > 10 * ctx else num_predict
        kind = faults.incoherent.get(model.tag, "coherent")
        words = simtext.pieces(simtext.answer(answer_to, seed, kind, limit))
        done_reason = "stop"
        if len(words) > limit or kind == "repetitive":
            words = words[:limit]
            done_reason = "length"
        p = runner.placement
        scratch = 0
        if p.layers_gpu:
            scratch = CUBLAS_WORKSPACE_BYTES + 8 * model.arch.embedding_length * min(evaluated, runner.num_batch)
        scratch += faults.peak_extra_bytes
        per_token_s = self._seconds_per_token(runner)
        with self.lock:
            if not runner.alive:
                raise SimError(500, CRASH)
            ticket = Ticket(next(self._ids), runner, evaluated, sent, truncated, words, done_reason,
                            int(evaluated * per_token_s / PROMPT_SPEEDUP * 1e9), int(len(words) * per_token_s * 1e9), 0)
            if truncated:
                self._log(f'level=WARN msg="truncating input prompt" limit={ctx} prompt={sent} keep=4 new={ctx}')
            runner.transient[ticket.id] = scratch
            runner.requests += 1
            dev = self.scenario.device
            now = self.clock()
            need = dev.used_by_others_bytes + sum(self._runner_bytes(r, now) for r in self.runners.values())
            if need > dev.total_bytes:
                runner.transient.pop(ticket.id, None)
                raise SimError(500, self._runtime_oom(runner, need))
            if model.tag in faults.runner_error:
                runner.transient.pop(ticket.id, None)
                raise SimError(500, RUN_ERROR.format(text=faults.runner_error[model.tag]))
        return ticket

    def _runtime_oom(self, runner: Runner, need: int) -> str:
        """The runner's allocation failed mid-request: it dies, the log has the
        runtime's out-of-memory lines, and the request's error ends with what
        Ollama's status writer captured. The current engine also expires every
        loaded model ("runtime OOM detected")."""
        msg = RUNTIME_OOM_MSG[self.vendor]
        dev = self.scenario.device
        self._log(f"ggml_backend_sched_graph_compute: {msg}")
        self._log("  current device: 0, in function ggml_backend_cuda_graph_compute at ggml-cuda.cu:2510")
        self._log(f'level=ERROR msg="{"llama-server" if self.current else "llama runner"} terminated" '
                  f'error="{msg}" model={runner.model.tag} needed="{human_bytes2(need)}" '
                  f'total="{human_bytes2(dev.total_bytes)}"')
        runner.last_error = msg
        self._drop(runner.model.tag.lower(), "crashed: out of memory")
        text = RUN_ERROR.format(text=msg)
        if self.current:
            self._log(f'level=WARN msg="runtime OOM detected; expiring loaded models to clear memory before next '
                      f'request" model={runner.model.tag} error="{text}"')
            for key, other in list(self.runners.items()):
                if other.transient or other.refs:
                    other.expires_at, other.unloading = self.clock(), True
                else:
                    self._drop(key, "expired after runtime OOM")
        return text

    def died_error(self, runner: Runner) -> str:
        """What a request still streaming from a runner that died gets: the
        captured error when it crashed, the generic text otherwise (a restart)."""
        return RUN_ERROR.format(text=runner.last_error) if runner.last_error else CRASH

    def _seconds_per_token(self, runner: Runner) -> float:
        p = runner.placement
        share_gpu = p.layers_gpu / max(p.layers_total, 1)
        weights = runner.model.weights_bytes
        return (weights * share_gpu / GPU_BANDWIDTH[self.vendor]
                + weights * (1 - share_gpu) / CPU_BANDWIDTH)

    def finish(self, ticket: Ticket, keep_alive: Any = None) -> None:
        """End a request: release its scratch, keep any leak, renew keep_alive."""
        runner = ticket.runner
        with self.lock:
            scratch = runner.transient.pop(ticket.id, None)
            if scratch is not None and runner.alive:
                runner.leaked_bytes += self.scenario.faults.leak_per_request_bytes
            if runner.alive:
                self.set_expiry(runner, keep_alive)
        runner.slots.release()

    # -- views for the API ---------------------------------------------------------
    def expires_at_iso(self, runner: Runner) -> str:
        if runner.expires_at is None:
            when = datetime.now().astimezone() + timedelta(days=365 * 290)
        else:
            when = datetime.now().astimezone() + timedelta(seconds=max(runner.expires_at - self.clock(), 0.0))
        return when.isoformat()


def _int_option(options: Mapping[str, Any], key: str, default: int) -> int:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        raise SimError(400, f"option {key!r} must be of type integer")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SimError(400, f"option {key!r} must be of type integer") from None


def options_batch_set(num_batch: int) -> bool:
    """Was num_batch sent (not Ollama's 512 default)? Ollama raises only the default."""
    return num_batch != 512


def _blob(tag: str) -> str:
    import hashlib

    return hashlib.sha256(tag.encode()).hexdigest()


def _buffer_func(kind: str) -> str:
    return {"model": "load_tensors", "KV": "llama_kv_cache", "compute": "sched_reserve"}[kind]


def _library(vendor: str) -> str:
    return {"nvidia": "cuda", "amd": "rocm", "apple": "metal"}.get(vendor, "cpu")


def _env_line(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(env.items()))
