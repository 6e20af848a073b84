"""Loads on a machine with several GPUs, for both engines: which cards a
model goes to (:mod:`oomsim.spread` does the arithmetic), making room first
as the scheduler does (:mod:`oomsim.evict`), and the log lines the real
server prints about it — ``layers.split`` and ``--tensor-split`` on the
legacy engine, one buffer line per device and ``selecting single GPU`` on
the current one."""
from __future__ import annotations

import hashlib
import threading

from probes import memmodel
from oomsim import spread
from oomsim.devspec import device_uuid
from oomsim.messages import LOAD_OOM, SYSTEM_RAM, _library, human_bytes2
from oomsim.runner import Runner
from oomsim.scenario import ModelSpec
from oomsim.settings import Settings, SimError

MIB = 1 << 20
GIB = 1 << 30
BACKEND = {"nvidia": "CUDA", "amd": "ROCm", "apple": "MTL"}


class SpreadLoads:
    """The several-GPU part of :class:`oomsim.state.SimState`."""

    # -- both engines ----------------------------------------------------------------
    def _estimated_free(self, now: float, key: str, index: int) -> int:
        """updateFreeSpace: the smaller of the card's free memory and its total
        less what the loaded runners' estimates put on it."""
        dev = self.devices[index]
        predicted = 0
        for k, r in self.runners.items():
            if k == key:
                continue
            if r.split is None:
                predicted += r.placement.size_vram_bytes if index == 0 else 0
            else:
                predicted += dict(zip(r.split.devices, r.split.alloc)).get(index, 0)
        return max(min(self._gpu_free_for_load(now, key, index), dev.total_bytes - predicted), 0)

    def _by_free(self, now: float, key: str) -> list[tuple[int, int]]:
        """(device, free) most free first, as ``sort.Reverse(ByFreeMemory)``."""
        frees = [(i, self._estimated_free(now, key, i)) for i in range(len(self.devices))]
        return sorted(frees, key=lambda g: -g[1])

    def _name(self, index: int) -> str:
        return device_uuid(self.devices[index], index)

    # -- legacy engine (v0.11.4) -----------------------------------------------------
    def _load_spread(self, model: ModelSpec, s: Settings, num_ctx: int, num_batch: int, num_gpu: int,
                     kv_type: str, now: float) -> Runner:
        arch, key = model.arch, model.tag.lower()
        est = spread.parts(arch, model.weights_bytes, num_ctx, s.num_parallel, num_batch, kv_type,
                           memmodel.ESTIMATE_MIN_CTX)
        real = spread.parts(arch, model.weights_bytes, num_ctx, s.num_parallel, num_batch, kv_type)
        minimum, need = memmodel.MIN_GPU_BYTES_CUDA, (num_gpu if num_gpu >= 0 else arch.block_count + 1)

        def guess(gpus) -> spread.Split:
            return spread.estimate(est, gpus, num_gpu, s.gpu_overhead_bytes, minimum)

        def best_full_fit() -> spread.Split | None:   # pickBestFullFitByLibrary
            gpus = self._by_free(now, key)
            if not s.sched_spread:
                for g in gpus:
                    e = guess([g])
                    if e.layers_gpu and e.layers_gpu >= need:
                        self._log(f'msg="new model will fit in available VRAM in single GPU, loading" '
                                  f'model={_path(model)} gpu={self._name(g[0])} parallel={s.num_parallel} '
                                  f'available={g[1]} required="{human_bytes2(e.vram_bytes)}"')
                        return e
            e = guess(gpus)
            if e.layers_gpu and e.layers_gpu >= need:
                self._log(f'msg="new model will fit in available VRAM, loading" model={_path(model)} '
                          f'library={_library(self.vendor)} parallel={s.num_parallel} '
                          f'required="{human_bytes2(e.vram_bytes)}"')
                return e
            return None

        chosen = best_full_fit()
        if chosen is None and any(k != key for k in self.runners):
            def fits() -> bool:
                nonlocal chosen
                chosen = best_full_fit()
                return chosen is not None
            self._make_room(fits, key)
        gpus = self._by_free(now, key) if chosen is None else [(i, self._estimated_free(now, key, i))
                                                              for i in chosen.devices]
        e = chosen or guess(gpus)           # pickBestPartialFitByLibrary: every GPU (one library)
        self._log(f'msg=offload library={_library(self.vendor)} layers.requested={num_gpu} '
                  f'layers.model={arch.block_count + 1} layers.offload={e.layers_gpu} '
                  f'layers.split={e.tensor_split if len(gpus) > 1 else ""} '
                  f'memory.available="[{" ".join(human_bytes2(f) for _, f in gpus)}]" '
                  f'memory.gpu_overhead="{human_bytes2(s.gpu_overhead_bytes)}" '
                  f'memory.required.full="{human_bytes2(e.size_bytes)}" '
                  f'memory.required.partial="{human_bytes2(e.vram_bytes)}" '
                  f'memory.required.kv="{human_bytes2(sum(est.kv))}" '
                  f'memory.required.allocations="[{" ".join(human_bytes2(a) for a in e.alloc)}]" '
                  f'memory.weights.total="{human_bytes2(model.weights_bytes)}" '
                  f'memory.graph.full="{human_bytes2(est.full)}" memory.graph.partial="{human_bytes2(est.partial)}"')
        where = e.where if num_gpu < 0 else spread.forced(est, gpus, num_gpu, e.layers)
        layers = tuple(sum(1 for w in where if w == d) for d in e.devices)
        graph = real.full if len(e.devices) == 1 and all(w is not None for w in where) else real.partial
        held = spread.resident(real, where, e.devices, minimum, graph)
        cpu = sum(real.layer(i) for i, w in enumerate(where) if w is None)
        n_gpu = sum(layers)
        if n_gpu and e.size_bytes - e.vram_bytes > self._host_free(exclude=key):
            raise SimError(500, SYSTEM_RAM.format(need=human_bytes2(e.size_bytes - e.vram_bytes),
                                                  have=human_bytes2(self._host_free(exclude=key))))
        free = dict(gpus)
        for d, b in zip(e.devices, held):
            if b > free.get(d, 0):
                # only a forced num_gpu gets here: the runner tries and the allocation fails
                self._log(f'level=ERROR msg="llama runner terminated" error="cudaMalloc failed: out of memory" '
                          f'layers={n_gpu} device={d}')
                raise SimError(500, LOAD_OOM)
        if num_gpu >= 0:
            e = spread.Split(e.devices, layers, tuple(b + est.layer0 if b else 0 for b in held), where,
                             sum(held) + len(held) * est.layer0 + cpu, sum(held) + len(held) * est.layer0,
                             graph, est.layer0 * len(held), minimum * len(held))
        pid = next(self._pids)
        args = [f"--model /root/.ollama/models/blobs/sha256-{_blob(model)}", f"--ctx-size {num_ctx * s.num_parallel}",
                f"--batch-size {num_batch}", f"--n-gpu-layers {n_gpu}", "--threads 8", f"--parallel {s.num_parallel}"]
        if len(e.devices) > 1:
            args.append(f"--tensor-split {','.join(str(n) for n in layers)}")
        self._log(f'msg="starting llama server" cmd="/usr/local/bin/ollama runner {" ".join(args)} --port 39{pid % 1000:03d}"')
        self._log(f'msg="llama runner started" model={model.tag} pid={pid} ctx-size={num_ctx * s.num_parallel} '
                  f'batch-size={num_batch} n-gpu-layers={n_gpu} parallel={s.num_parallel} kv-type={kv_type}'
                  + (f' tensor-split={",".join(str(n) for n in layers)}' if len(e.devices) > 1 else ""))
        self._log(f"load_tensors: offloaded {n_gpu}/{arch.block_count + 1} layers to GPU")
        kv_total, real_kv = sum(est.kv), sum(real.kv)
        shown = memmodel.Placement(arch.block_count + 1, n_gpu, e.size_bytes, e.vram_bytes, kv_total, e.graph_bytes,
                                   model.weights_bytes, e.buffer_bytes, e.min_bytes)
        actual = memmodel.Placement(arch.block_count + 1, n_gpu, sum(held) + cpu, sum(held), real_kv, graph,
                                    model.weights_bytes, 0, minimum * sum(1 for b in held if b))
        split = spread.Split(e.devices, layers, e.alloc, where, e.size_bytes, e.vram_bytes, e.graph_bytes,
                             e.buffer_bytes, e.min_bytes)
        return Runner(model=model, num_ctx=num_ctx, num_batch=num_batch, num_gpu=num_gpu,
                      num_parallel=s.num_parallel, kv_type=kv_type, placement=shown, actual=actual, pid=pid,
                      loaded_at=now, expires_at=None, slots=threading.BoundedSemaphore(s.num_parallel),
                      split=split, held=held)

    # -- current engine (v0.34.4) ----------------------------------------------------
    def _current_gpus(self, model: ModelSpec, s: Settings, num_ctx: int, num_batch: int, num_gpu: int,
                      now: float) -> tuple[list[tuple[int, int]], bool]:
        """selectLlamaServerPlacement, after the preflight eviction: the
        (device, free) list the load gets, and whether one GPU was picked
        out of several (``--split-mode none --main-gpu 0``)."""
        arch, key = model.arch, model.tag.lower()
        predicted = spread.predicted_vram(arch, model.weights_bytes, num_ctx, s.num_parallel)
        surcharge = 0 if model.embedding else 2 * GIB if num_batch >= 2048 else 768 * MIB if num_batch >= 1024 else 0

        def choose() -> tuple[list[tuple[int, int]], bool]:
            frees = [(i, self._gpu_free_for_load(now, key, i)) for i in range(len(self.devices))]
            if len(frees) <= 1 or num_gpu == 0:
                return frees, False
            if not s.sched_spread:
                ok = [g for g in frees if predicted <= g[1] * 80 // 100]
                if ok:
                    return [max(ok, key=lambda g: g[1])], True
            return frees, False

        gpus, single = choose()
        explicit = 0 < num_gpu < arch.block_count + 1

        def fits() -> bool:
            nonlocal gpus, single
            gpus, single = choose()
            if not any(k != key for k in self.runners):
                return True
            free = sum(f for _, f in gpus)
            ok = predicted + surcharge <= free * 80 // 100
            what = "fits alongside existing models" if ok else "predicted to exceed available memory, evicting"
            self._log(f'msg="llama-server model {what}" predicted="{human_bytes2(predicted + surcharge)}" '
                      f'predicted_num_ctx={memmodel.clamp_ctx(arch, num_ctx) * s.num_parallel} '
                      f'num_batch={num_batch} available="{human_bytes2(free)}" gpu_free="{human_bytes2(free)}" '
                      f'system_free="{human_bytes2(self._host_free(exclude=key))}" system_limited=false')
            return ok

        if not explicit and num_gpu != 0 and any(k != key for k in self.runners):
            self._make_room(fits, key)
        if single:
            i, free = gpus[0]
            dev = self.devices[i]
            self._log(f'msg="selecting single GPU for llama-server model" main_gpu=0 id={self._name(i)} '
                      f'filter_id="" library={BACKEND[dev.vendor]} name={BACKEND[dev.vendor]}{i} '
                      f'description="{dev.name}" integrated=false predicted="{human_bytes2(predicted)}" '
                      f'available="{human_bytes2(free)}"')
        return gpus, single

    def _current_split(self, model: ModelSpec, s: Settings, num_ctx: int, num_batch: int, num_gpu: int,
                       kv: str, compute: int, gpus: list[tuple[int, int]]) -> tuple[memmodel.Placement, spread.Split]:
        """llama.cpp's fit over the chosen devices, as a Placement (measured:
        what the runner holds) and the per-device split."""
        arch = model.arch
        p = spread.parts(arch, model.weights_bytes, num_ctx, s.num_parallel, num_batch, kv, compute_bytes=compute)
        if len(gpus) == 1:
            e = spread.estimate(p, gpus, num_gpu, s.fit_target_bytes, 0)
            held = tuple(max(a - e.buffer_bytes, 0) for a in e.alloc)
            e = spread.Split(e.devices, e.layers, held, e.where, e.size_bytes - e.buffer_bytes,
                             e.vram_bytes - e.buffer_bytes, e.graph_bytes, 0, 0)
        else:
            e = spread.fit_split(p, gpus, s.fit_target_bytes, num_gpu)
        placement = memmodel.Placement(arch.block_count + 1, e.layers_gpu, e.size_bytes, e.vram_bytes, sum(p.kv),
                                       p.full, model.weights_bytes, 0, 0)
        return placement, e

    def _log_split_buffers(self, model: ModelSpec, p: memmodel.Placement, split: spread.Split, kv: str,
                           num_ctx: int, s: Settings) -> None:
        """llama-server's per-device lines: fit's device table, then model / KV
        / compute buffers on each device (CUDA0, CUDA1, ... in the order it was
        handed them) and on the CPU."""
        parts = spread.parts(model.arch, model.weights_bytes, num_ctx, s.num_parallel, 512, kv, compute_bytes=0)
        backend = BACKEND[self.vendor]
        for k, (d, n) in enumerate(zip(split.devices, split.layers)):
            dev = self.devices[d]
            free = self._gpu_free_for_load(self.clock(), model.tag.lower(), d)
            self._log(f"common_params_fit_impl:   - {backend}{k} ({dev.name}): {n:2d} layers (0 overflowing), "
                      f"{split.alloc[k] // MIB:6d} MiB used, {max(free - split.alloc[k], 0) // MIB:6d} MiB free")
        names = {d: f"{backend}{k}" for k, d in enumerate(split.devices)}
        rows: dict[tuple[str, str], int] = {}
        for i, w in enumerate(split.where):
            where = names[w] if w is not None else "CPU"
            weights = parts.output if i == len(parts.blocks) else parts.blocks[i]
            rows[(where, "model")] = rows.get((where, "model"), 0) + weights
            if i < len(parts.kv):
                rows[(where, "KV")] = rows.get((where, "KV"), 0) + parts.kv[i]
        for d, n in zip(split.devices, split.layers):
            if n:
                rows[(names[d], "compute")] = p.graph_bytes
        if not split.layers_gpu:
            rows[("CPU", "compute")] = p.graph_bytes
        func = {"model": "load_tensors", "KV": "llama_kv_cache", "compute": "sched_reserve"}
        for kind in ("model", "KV", "compute"):
            for (where, k), size in rows.items():
                if k == kind and size > 0:
                    self._log(f"{func[kind]}: {where:>10} {kind} buffer size = {size / MIB:8.2f} MiB")


def _blob(model: ModelSpec) -> str:
    return hashlib.sha256(model.tag.encode()).hexdigest()


def _path(model: ModelSpec) -> str:
    return f"/root/.ollama/models/blobs/sha256-{_blob(model)}"
