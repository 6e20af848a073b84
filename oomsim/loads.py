"""Scheduling and loading on the simulated server, for both engines.

On one card, loads are placed with :func:`probes.memmodel.place` exactly as
the probes predict them; ``/api/ps`` shows that estimate (several cards:
:mod:`oomsim.spread_loads`). The legacy runner (v0.11.4) evicts idle models
one at a time to make room (:mod:`oomsim.evict`) and fails a forced
``num_gpu`` that cannot be allocated with the runner's CUDA out-of-memory
text; the current engine (llama-server) evicts when its prediction is above
80% of free, fits layers so that ``fit_target`` stays free and retries a
failed automatic-context load once at a smaller context.
"""
from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import replace
from typing import Any, Mapping

from probes import memmodel
from probes.serverinfo import vram_tier as vram_default_ctx
from oomsim.messages import (CURRENT_HOST_OOM, CURRENT_KV_NEEDS_FA, CURRENT_LOAD_OOM, CURRENT_LOAD_OOM_METAL,
                                 LOAD_OOM, LOAD_OOM_METAL, SYSTEM_RAM, _library, human_bytes2)
from oomsim.runner import Runner
from oomsim.scenario import ModelSpec
from oomsim.settings import Settings, SimError, _int_option, parse_keep_alive

MIB = 1 << 20
GIB = 1 << 30
LLAMA_SERVER = "/usr/lib/ollama/llama-server"
DISK_BANDWIDTH = 2 * GIB


class Loads:
    """The scheduling part of :class:`oomsim.state.SimState`."""

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
            if current is not None and same_ctx and (current.asked_batch or current.num_batch) == num_batch \
                    and (num_gpu < 0 or current.num_gpu == num_gpu) and current.num_parallel == settings.num_parallel:
                current.expires_at = None if keep_s is None else now + max(keep_s, 0.0)
                current.keep_s = keep_s
                current.refs += int(hold)
                return current, 0
            if current is not None:
                self._drop(key, "options changed, reloading")
            self._enforce_max_loaded(settings, key)
            if model.embedding:
                settings = replace(settings, num_parallel=1)  # embedding models always load with one slot
            if self.current:
                runner = self._load_current(model, settings, num_ctx, num_batch, num_gpu, now, auto)
            else:
                runner = self._load(model, settings, num_ctx, num_batch, num_gpu, now)
            runner.asked_batch, runner.keep_s = num_batch, keep_s
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
        kv_type = self._legacy_kv_type(arch, s)
        if len(self.devices) > 1:
            return self._load_spread(model, s, num_ctx, num_batch, num_gpu, kv_type, now)
        min_gpu = memmodel.MIN_GPU_BYTES_METAL if dev.unified else memmodel.MIN_GPU_BYTES_CUDA

        def placement(free: int, layers: int = num_gpu, floor: int = memmodel.ESTIMATE_MIN_CTX) -> memmodel.Placement:
            return memmodel.place(arch, model.weights_bytes, num_ctx, s.num_parallel, num_batch, kv_type, free,
                                  num_gpu=layers, overhead_bytes=s.gpu_overhead_bytes, min_gpu_bytes=min_gpu,
                                  unified=dev.unified, estimate_min_ctx=floor)

        free = self._gpu_free_for_load(now, exclude=key)
        p = placement(free)
        if not p.full_gpu and num_gpu < 0:
            # like the scheduler, unload idle models one at a time until it fits (or none is left)
            def fits() -> bool:
                nonlocal free, p
                free = self._gpu_free_for_load(now, exclude=key)
                p = placement(free)
                return p.full_gpu
            self._make_room(fits, key)
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

    def _legacy_kv_type(self, arch: memmodel.Arch, s: Settings) -> str:
        kv_type = memmodel.effective_kv_type(s.kv_cache_type if s.kv_cache_type in memmodel.KV_ELEMENT_BYTES
                                             else "f16", s.flash_attention, arch.supports_flash_attention)
        if s.kv_cache_type not in ("f16", "") and kv_type == "f16":
            self._log(f'level=WARN msg="quantized kv cache requested but flash attention disabled" '
                      f'type={s.kv_cache_type}')
        return kv_type

    def _load_current(self, model: ModelSpec, s: Settings, num_ctx: int, num_batch: int, num_gpu: int,
                      now: float, auto: bool, retried: bool = False) -> Runner:
        """A load on the current engine: Ollama starts llama-server with ``-c
        num_ctx x parallel``, llama.cpp's fit places the layers so that
        ``fit_target`` stays free, and /api/ps shows the buffers it allocated.
        A failed automatic-context load is retried once at a smaller context."""
        dev, arch, key = self.scenario.device, model.arch, model.tag.lower()
        if self._warn_clamped(arch, num_ctx):
            num_ctx = arch.context_length
        if not options_batch_set(num_batch):   # automaticGenerationBatch: by the context of all slots
            num_batch = max(num_batch, memmodel.automatic_batch(memmodel.ENGINE_LLAMA_SERVER, num_ctx, s.num_parallel))
        kv = s.kv_cache_type if s.kv_cache_type in memmodel.KV_ELEMENT_BYTES else "f16"
        args = [LLAMA_SERVER, "--model", f"/root/.ollama/models/blobs/sha256-{_blob(model.tag)}", "--port", "0",
                "--host", "127.0.0.1", "--no-webui", "--offline", "-c", str(num_ctx * s.num_parallel),
                "-np", str(s.num_parallel), "--log-verbosity", "4", "--no-log-prefix", "--no-log-timestamps"]
        if kv != "f16":
            args += ["--cache-type-k", kv, "--cache-type-v", kv]
        args += ["--flash-attn", s.flash_attention_mode, "-b", str(num_batch), "-ub", str(num_batch)]
        gpus, single = self._current_gpus(model, s, num_ctx, num_batch, num_gpu, now)
        if single:
            args += ["--split-mode", "none", "--main-gpu", "0"]
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
        # "auto" is on for every simulated device (as on the CPU and the GPUs Ollama builds for)
        compute = memmodel.llama_server_compute_bytes(arch, num_ctx, num_batch, s.num_parallel,
                                                      s.flash_attention_mode != "off", kv)

        def fit(layers: int = num_gpu) -> memmodel.Placement:
            return memmodel.place(arch, model.weights_bytes, num_ctx, s.num_parallel, num_batch, kv, free,
                                  num_gpu=layers, overhead_bytes=s.fit_target_bytes, min_gpu_bytes=0,
                                  unified=dev.unified, estimate_min_ctx=0, compute_bytes=compute)

        split = None
        if len(self.devices) > 1:
            free = sum(f for _, f in gpus)
            p, split = self._current_split(model, s, num_ctx, num_batch, num_gpu, kv, compute, gpus)
        else:
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
        if split is not None:
            self._log_split_buffers(model, p, split, kv, num_ctx, s)
        else:
            self._log_buffers(p, arch)
        self._log(f"load_tensors: offloaded {p.layers_gpu}/{p.layers_total} layers to GPU")
        pid = next(self._pids)
        self._log('msg="llama-server started in 0.05 seconds"')
        return Runner(model=model, num_ctx=num_ctx, num_batch=num_batch, num_gpu=num_gpu,
                      num_parallel=s.num_parallel, kv_type=kv, placement=p, actual=p, pid=pid, loaded_at=now,
                      expires_at=None, slots=threading.BoundedSemaphore(s.num_parallel), auto_ctx=auto,
                      measured=True, split=split, held=split.alloc if split is not None else ())

    def _log_buffers(self, p: memmodel.Placement, arch: memmodel.Arch) -> None:
        """llama-server's buffer lines on a one-GPU machine (what /api/ps is built from)."""
        device = {"nvidia": "CUDA0", "amd": "ROCm0", "apple": "MTL0"}[self.vendor]
        share = p.layers_gpu / max(p.layers_total, 1)
        gpu_weights = int(p.weights_bytes * share)
        gpu_kv = int(p.kv_bytes * min(p.layers_gpu, arch.block_count) / max(arch.block_count, 1))
        for where, kind, size in ((device, "model", gpu_weights), ("CPU", "model", p.weights_bytes - gpu_weights),
                                  (device, "KV", gpu_kv), ("CPU", "KV", p.kv_bytes - gpu_kv),
                                  (device if p.layers_gpu else "CPU", "compute", p.graph_bytes)):
            if size > 0:
                self._log(f"{_buffer_func(kind)}: {where:>10} {kind} buffer size = {size / MIB:8.2f} MiB")

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


def options_batch_set(num_batch: int) -> bool:
    """Was num_batch sent (not Ollama's 512 default)? Ollama raises only the default."""
    return num_batch != 512


def _blob(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()


def _buffer_func(kind: str) -> str:
    return {"model": "load_tensors", "KV": "llama_kv_cache", "compute": "sched_reserve"}[kind]

