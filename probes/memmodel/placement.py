"""Where a model's layers land when the server has several GPUs, before it loads.

Two engines, two placements. The legacy runner (v0.11.4, ``server/sched.go``
and ``llm/memory.go`` EstimateGPULayers): the whole model on the one GPU with
the most free memory when it fits there (unless ``OLLAMA_SCHED_SPREAD``), else
over all GPUs, largest free first; every GPU that takes layers holds the
per-GPU minimum, one spare layer and the graph; the layers go from the last
block down, each to GPU ``i % (GPUs still with room)``, and a GPU that refuses
one layer gets no more; the output layer last; what fits nowhere stays on the
CPU. The current engine (v0.30+, ``selectLlamaServerPlacement`` and llama.cpp's
``--fit``): Ollama picks one GPU when its estimate (file + f16 KV,
``PredictServerVRAM``) is at most 80% of that GPU's free memory, else all of
them; llama.cpp then splits the layers in proportion to free memory (its
default ``tensor_split``) and, when a GPU would keep less than the fit target
free (``LLAMA_ARG_FIT_TARGET``, 1024 MiB), fills the GPUs back to front
instead, the first blocks and the output layer on the CPU. Per-layer sizes
come from what :func:`~probes.memmodel.runner.place` uses (one GPU).
Predictions only; nothing here reads a GPU. By hand: ``ollama ps`` (the
split), the server log's ``layers.split=`` (v0.11) or ``common_params_fit_impl``
lines (v0.30+).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from probes.memmodel.arch import MIB, Arch
# the per-layer KV cache place() counts (sliding windows included): one formula, not two
from probes.memmodel.runner import (ESTIMATE_MIN_CTX, MIN_GPU_BYTES_CUDA, kv_layers, graph_bytes,
                                    kv_bytes_per_token, output_layer_bytes)

FIT_TARGET_BYTES = 1024 * MIB   # llama.cpp's --fit-target default, per GPU
SINGLE_GPU_PERCENT = 80          # v0.30+: one GPU when the estimate is at most 80% of its free memory


@dataclass(frozen=True)
class Layers:
    """A model as the engines place it, in bytes: each repeating block with its
    KV cache (``blk.0`` first), the output layer, and the graph (the compute
    buffer) with every layer on the GPU (``graph_full``) or some on the CPU."""

    blocks: tuple[int, ...]
    output: int
    graph_full: int
    graph_partial: int


def model_layers(arch: Arch, weights_bytes: int, num_ctx: int, num_parallel: int = 1, num_batch: int = 512,
                 kv_type: str = "f16", *, output_bytes: int | None = None,
                 estimate_min_ctx: int = ESTIMATE_MIN_CTX, compute_bytes: int | None = None) -> Layers:
    """The layers of one model as :func:`~probes.memmodel.runner.place` cuts
    them: the weights less the output layer split evenly over the blocks,
    each block with its own KV cache. The legacy estimate counts at least
    ``estimate_min_ctx`` cells and its own graph; the current engine passes
    ``estimate_min_ctx=0`` and its compute buffer (``compute_bytes``)."""
    kv = kv_layers(arch, num_ctx, num_parallel, kv_type, num_batch, estimate_min_ctx)
    full, partial = graph_bytes(arch, num_ctx, num_parallel, num_batch, kv_type, estimate_min_ctx)
    if compute_bytes is not None:
        full = partial = int(compute_bytes)
    out = output_bytes if output_bytes is not None else output_layer_bytes(arch, int(weights_bytes))
    base, rest = divmod(int(weights_bytes) - out, max(arch.block_count, 1))
    blocks = tuple(base + (1 if i < rest else 0) + kv[i] for i in range(arch.block_count))
    return Layers(blocks, int(out), int(full), int(partial))


def server_vram_prediction(arch: Arch, weights_bytes: int, num_ctx: int, num_parallel: int = 1) -> int:
    """Ollama v0.30+'s own estimate before it picks GPUs (``PredictServerVRAM``):
    the file and an f16 KV cache of ``num_ctx x parallel`` cells, no graph."""
    return int(weights_bytes) + int(kv_bytes_per_token(arch, "f16") * int(num_ctx) * max(int(num_parallel), 1))


@dataclass(frozen=True)
class CardShare:
    """What one GPU holds of a model."""

    card: int          # the GPU's place in the list given (0 = the first --vram)
    layers: int        # blocks, and the output layer when it is here
    bytes: int         # everything the engine puts there: layers, graph, the per-GPU minimum (legacy)
    output: bool       # the output layer is here

    def to_dict(self) -> dict:
        return {"card": self.card, "layers": self.layers, "bytes": self.bytes, "output": self.output}


@dataclass(frozen=True)
class Split:
    """Where one model's layers land: the GPUs that take some (``shares``) and
    what is left on the CPU. ``slow``: a layer or the output layer runs on
    the CPU, which every token then waits for."""

    engine: str
    shares: tuple[CardShare, ...]
    blocks: int            # the model's repeating blocks (the output layer is one more)
    cpu_layers: int        # blocks left on the CPU
    output_on_cpu: bool
    cpu_bytes: int

    @property
    def mode(self) -> str:
        """``one`` (one GPU), ``spread`` (several) or ``cpu`` (no GPU takes a layer)."""
        return "cpu" if not self.shares else "one" if len(self.shares) == 1 else "spread"

    @property
    def slow(self) -> bool:
        return self.cpu_layers > 0 or self.output_on_cpu

    @property
    def slow_reason(self) -> str | None:
        """``layers_on_cpu`` (blocks, maybe the output too), ``output_on_cpu``, or None."""
        if self.cpu_layers > 0:
            return "layers_on_cpu"
        return "output_on_cpu" if self.output_on_cpu else None

    def on(self, card: int) -> CardShare | None:
        return next((s for s in self.shares if s.card == card), None)

    def to_dict(self) -> dict:
        return {"engine": self.engine, "mode": self.mode, "cards": [s.to_dict() for s in self.shares],
                "layers_total": self.blocks + 1, "cpu_layers": self.cpu_layers, "output_on_cpu": self.output_on_cpu,
                "cpu_bytes": self.cpu_bytes, "slow": self.slow, "slow_reason": self.slow_reason}


def _by_free(free: Sequence[int]) -> list[int]:
    return sorted(range(len(free)), key=lambda i: -int(free[i]))   # stable: the first of equals first


# --- the legacy runner (v0.11.4) --------------------------------------------------------------------------


def _estimate(layers: Layers, free: Sequence[int], gpus: list[int], overhead: int, min_gpu: int,
              unified: bool) -> Split:
    """EstimateGPULayers on the GPUs ``gpus`` (indexes into ``free``), in that order."""
    full, partial = layers.graph_full, layers.graph_partial
    if unified:
        partial = full
    elif len(gpus) > 1:
        full = partial   # several GPUs: always the partial graph
    graph = max(full, partial)
    blocks, out = layers.blocks, layers.output
    layer0 = blocks[0] if blocks else 0
    alloc = {g: 0 for g in gpus}
    count = {g: 0 for g in gpus}
    room = [g for g in gpus if free[g] >= overhead + graph + min_gpu + 2 * layer0]
    for g in room:
        alloc[g] += min_gpu + layer0   # the minimum and one spare layer, on every GPU that may take layers
    placed = cpu_layers = cpu_bytes = 0
    for i in range(len(blocks) - 1, -1, -1):
        for j in range(len(room), 0, -1):
            g = room[i % j]
            if free[g] > overhead + alloc[g] + graph + blocks[i]:
                alloc[g] += blocks[i]
                count[g] += 1
                placed += 1
                break
            del room[i % j]   # a GPU that refused one layer gets no more
        if not room:
            cpu_layers += 1
            cpu_bytes += blocks[i]
    output_gpu = None
    for j in range(len(room), 0, -1):
        g = room[placed % j]
        if free[g] > overhead + alloc[g] + graph + out:
            alloc[g] += out
            count[g] += 1
            output_gpu = g
            break
    if output_gpu is None:
        cpu_bytes += out
    fully = cpu_layers == 0 and output_gpu is not None
    shares = tuple(CardShare(g, count[g], int(alloc[g] + (full if fully else partial)), g == output_gpu)
                   for g in sorted(gpus) if count[g] > 0)
    if not shares:   # not one layer: Ollama runs it all on the CPU
        return Split("runner", (), len(blocks), len(blocks), True, sum(blocks) + out)
    return Split("runner", shares, len(blocks), cpu_layers, output_gpu is None, int(cpu_bytes))


def legacy_split(layers: Layers, free: Sequence[int], *, spread: bool = False, overhead_bytes: int = 0,
                 min_gpu_bytes: int = MIN_GPU_BYTES_CUDA, unified: bool = False) -> Split:
    """v0.11.4's placement on GPUs with ``free`` bytes free each (in the order
    the server lists them): the largest GPU alone when the whole model fits
    there (``spread`` is ``OLLAMA_SCHED_SPREAD``, which skips that), else all of
    them largest first when it fits over them, else all of them as listed
    with what does not fit on the CPU. ``overhead_bytes`` is
    ``OLLAMA_GPU_OVERHEAD``; ``unified`` an Apple GPU."""
    if not free:
        return _estimate(layers, [], [], overhead_bytes, min_gpu_bytes, unified)
    order = _by_free(free)
    if not spread:
        for g in order:
            alone = _estimate(layers, free, [g], overhead_bytes, min_gpu_bytes, unified)
            if not alone.slow:
                return alone
    together = _estimate(layers, free, order, overhead_bytes, min_gpu_bytes, unified)
    if not together.slow:
        return together
    return _estimate(layers, free, list(range(len(free))), overhead_bytes, min_gpu_bytes, unified)


# --- the current engine (v0.30+: Ollama picks the GPUs, llama.cpp's --fit the layers) ---------------------


def _contents(layers: Layers, gpus: list[int], counts: dict[int, int]) -> dict[int, list[int]]:
    """Which items (block indexes; ``len(blocks)`` is the output layer) each GPU
    holds for ``counts`` layers per GPU, as llama.cpp maps them: the GPUs take
    the last layers, in GPU order; the output layer is on a GPU only when
    every layer is (else the GPU range is the last blocks)."""
    n = len(layers.blocks)
    k = sum(counts.values())
    items = list(range(n + 1)) if k >= n + 1 else list(range(n - k, n))
    held, at = {}, 0
    for g in gpus:
        held[g] = items[at:at + counts.get(g, 0)]
        at += counts.get(g, 0)
    return held


def _bytes(layers: Layers, items: list[int]) -> int:
    if not items:
        return 0
    n = len(layers.blocks)
    return sum(layers.output if i == n else layers.blocks[i] for i in items) + layers.graph_full


def _fit(layers: Layers, free: Sequence[int], gpus: list[int], margin: int) -> Split:
    """llama.cpp's ``--fit`` for a dense model on ``gpus``: its default split
    (in proportion to free memory) when every GPU keeps ``margin`` free, else
    each GPU from the last one back takes as many of the remaining last
    layers as keep the margin."""
    n = len(layers.blocks)
    total = n + 1
    target = {g: int(free[g]) - margin for g in gpus}
    whole = sum(int(free[g]) for g in gpus) or 1
    counts, cut = {g: 0 for g in gpus}, 0.0
    bounds = []
    for g in gpus:
        cut += int(free[g]) / whole
        bounds.append((cut, g))
    for il in range(total):
        share = il / total
        counts[next((g for c, g in bounds if share < c), gpus[-1])] += 1
    held = _contents(layers, gpus, counts)
    if any(_bytes(layers, held[g]) > target[g] for g in gpus):
        counts = {g: 0 for g in gpus}
        for pos in range(len(gpus) - 1, -1, -1):
            g = gpus[pos]
            left = total - sum(counts.values())
            for c in range(1, left + 1):
                trial = {**counts, g: c}
                if _bytes(layers, _contents(layers, gpus, trial)[g]) > target[g]:
                    break
                counts = trial
        held = _contents(layers, gpus, counts)
    on_gpu = {i for g in gpus for i in held[g]}
    cpu = [i for i in range(total) if i not in on_gpu]
    shares = tuple(CardShare(g, len(held[g]), _bytes(layers, held[g]), n in held[g]) for g in sorted(gpus) if held[g])
    return Split("llama-server", shares, n, sum(1 for i in cpu if i < n), n in cpu,
                 sum(layers.output if i == n else layers.blocks[i] for i in cpu))


def current_split(layers: Layers, free: Sequence[int], *, predicted_bytes: int, spread: bool = False,
                  margin_bytes: int = FIT_TARGET_BYTES) -> Split:
    """v0.30+'s placement on GPUs with ``free`` bytes free each (as listed):
    Ollama's single-GPU choice (the GPU with the most free memory among those
    where ``predicted_bytes``, :func:`server_vram_prediction`, is at most 80%
    of it; not with ``spread``), then llama.cpp's fit on what it chose with
    ``margin_bytes`` (``LLAMA_ARG_FIT_TARGET``) kept free per GPU. Mixture-of-
    experts models (fit moves their expert tensors first) are placed as dense."""
    if not free:
        n = len(layers.blocks)
        return Split("llama-server", (), n, n, True, sum(layers.blocks) + layers.output)
    gpus = list(range(len(free)))
    if len(gpus) > 1 and not spread and predicted_bytes > 0:
        fits = [g for g in _by_free(free) if predicted_bytes <= int(free[g]) * SINGLE_GPU_PERCENT // 100]
        if fits:
            gpus = fits[:1]
    return _fit(layers, free, gpus, int(margin_bytes))
