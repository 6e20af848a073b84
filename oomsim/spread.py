"""Where a load goes on a machine with several GPUs, written from Ollama's
own source (not from :mod:`probes.memmodel`'s placement, which this
simulator exists to check).

Legacy engine (v0.11.4): ``llm/memory.go`` EstimateGPULayers over a list of
GPUs — every GPU that can hold the graph, its minimum and two layers gets one
spare layer; layers go from the last one down, layer ``i`` to
``gpusWithSpace[i % j]``, and a GPU that refuses a layer leaves the list; the
output layer last; every GPU that got layers also gets the graph (the partial
one whenever there is more than one GPU). ``server/sched.go``
pickBestFullFitByLibrary tries each GPU alone, most free memory first
(unless ``OLLAMA_SCHED_SPREAD``), then all of them.

Current engine (v0.34.4): ``server/sched.go`` selectLlamaServerPlacement —
one GPU when ``PredictServerVRAM`` (weights + f16 KV) is at most 80% of its
free memory (the freest such GPU), else every GPU; llama.cpp's fit then
splits the layers over the chosen devices in proportion to their free memory
(llama.cpp's default tensor split), keeping ``fit_target`` free on each and
one compute buffer per device used; what does not fit stays on the CPU.

Only the sizes of a model's parts (KV per cell, graph, output layer) come
from :mod:`probes.memmodel`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from probes import memmodel


@dataclass(frozen=True)
class Parts:
    """A model's pieces as the estimate sizes them, in bytes."""

    blocks: tuple[int, ...]    # repeating layers' weights, blk.0 first
    kv: tuple[int, ...]        # KV cache of each layer
    output: int                # output layer weights
    full: int                  # graph when every layer is on the GPU(s)
    partial: int               # graph when some are not

    @property
    def layer0(self) -> int:
        return (self.blocks[0] if self.blocks else 0) + (self.kv[0] if self.kv else 0)

    def layer(self, i: int) -> int:
        """Layer ``i``'s bytes; ``i == len(blocks)`` is the output layer."""
        return self.output if i == len(self.blocks) else self.blocks[i] + self.kv[i]


def parts(arch: memmodel.Arch, weights_bytes: int, num_ctx: int, parallel: int, batch: int, kv_type: str,
          min_cells: int = 0, compute_bytes: int | None = None) -> Parts:
    """Split a model like EstimateGPULayers does: equal blocks, an output layer
    of ``vocab x embedding`` share, per-layer KV (sliding-window layers hold
    ``parallel x window + batch`` cells), and the graph for the context."""
    out = memmodel.output_layer_bytes(arch, weights_bytes)
    base, rest = divmod(int(weights_bytes) - out, max(arch.block_count, 1))
    blocks = tuple(base + (1 if i < rest else 0) for i in range(arch.block_count))
    parallel = max(int(parallel), 1)
    cells = max(memmodel.clamp_ctx(arch, num_ctx) * parallel, int(min_cells))
    per_cell = (arch.head_dim_k + arch.head_dim_v) * arch.head_count_kv * memmodel.KV_ELEMENT_BYTES[kv_type]
    kv = []
    for i in range(arch.block_count):
        n = cells
        if arch.arch == "gemma3" and arch.sliding_window and (i + 1) % 6 != 0:
            n = parallel * arch.sliding_window + min(cells, batch)
        elif arch.arch == "gptoss" and i % 2 == 0:
            n = parallel * 4096 + min(cells, batch)
        kv.append(int(n * per_cell))
    if compute_bytes is not None:
        full = partial = int(compute_bytes)
    else:
        full, partial = memmodel.graph_bytes(arch, num_ctx, parallel, batch, kv_type, min_cells)
    return Parts(blocks, tuple(kv), out, int(full), int(partial))


@dataclass(frozen=True)
class Split:
    """One load's placement over the machine's devices."""

    devices: tuple[int, ...]   # device indices, in the order the load was handed them (main GPU first)
    layers: tuple[int, ...]    # layers on each (Ollama's ``layers.split``)
    alloc: tuple[int, ...]     # the estimate's bytes on each (``memory.required.allocations``)
    where: tuple[int | None, ...]  # device index of each layer, blk.0 first, output last; None: CPU
    size_bytes: int            # /api/ps size
    vram_bytes: int            # /api/ps size_vram
    graph_bytes: int
    buffer_bytes: int          # spare layers the estimate keeps (one per GPU with room)
    min_bytes: int             # per-GPU minimums counted in vram_bytes

    @property
    def layers_gpu(self) -> int:
        return sum(self.layers)

    @property
    def fully(self) -> bool:
        return all(w is not None for w in self.where)

    @property
    def tensor_split(self) -> str:
        return ",".join(str(n) for n in self.layers)


def estimate(p: Parts, gpus: Sequence[tuple[int, int]], num_gpu: int = -1, overhead: int = 0,
             minimum: int = memmodel.MIN_GPU_BYTES_CUDA, unified: bool = False) -> Split:
    """EstimateGPULayers on ``gpus`` = [(device index, free bytes), ...]."""
    n_blocks = len(p.blocks)
    full, partial = p.full, p.partial
    if unified:
        partial = full
    elif len(gpus) > 1:
        full = partial  # multi-GPU always uses the partial graph
    graph_max = max(full, partial)
    free = dict(gpus)
    alloc = {i: 0 for i, _ in gpus}
    counts = {i: 0 for i, _ in gpus}
    space = [i for i, f in gpus if f >= overhead + graph_max + minimum + 2 * p.layer0]
    for i in space:
        alloc[i] += minimum + p.layer0
    where: list[int | None] = [None] * (n_blocks + 1)
    placed = 0
    for layer in range(n_blocks - 1, -1, -1):
        size = p.layer(layer)
        if num_gpu >= 0 and placed >= num_gpu:
            continue
        j = len(space)
        while j > 0:
            g = space[layer % j]
            if free[g] > overhead + alloc[g] + graph_max + size:
                alloc[g] += size
                counts[g] += 1
                where[layer] = g
                placed += 1
                break
            space.pop(layer % j)
            j -= 1
    if p.output and (num_gpu < 0 or placed < num_gpu):
        for j in range(len(space), 0, -1):
            g = space[placed % j]
            if free[g] > overhead + alloc[g] + graph_max + p.output:
                alloc[g] += p.output
                counts[g] += 1
                where[n_blocks] = g
                placed += 1
                break
    fully = placed >= n_blocks + 1
    graph = full if fully else partial
    for i in alloc:
        if counts[i] > 0:
            alloc[i] += graph
    order = tuple(i for i, _ in gpus)
    if placed == 0:
        kv_total = sum(p.kv)
        return Split(order, tuple(0 for _ in order), tuple(0 for _ in order), tuple(where),
                     sum(p.blocks) + p.output + kv_total, 0, 0, 0, 0)
    overflow = sum(p.layer(i) for i, w in enumerate(where) if w is None)
    vram = sum(alloc.values())
    with_room = sum(1 for i in order if alloc[i])
    return Split(order, tuple(counts[i] for i in order), tuple(alloc[i] for i in order), tuple(where),
                 vram + overflow, vram, graph, p.layer0 * with_room, minimum * with_room)


def forced(p: Parts, gpus: Sequence[tuple[int, int]], num_gpu: int, shares: Sequence[int]) -> tuple[int | None, ...]:
    """A forced ``num_gpu``: the runner puts that many layers (last ones first)
    on the GPUs by the tensor split it was given (``shares``; by free memory
    when the estimate placed nothing), whether they fit or not."""
    n_blocks = len(p.blocks)
    n = min(max(num_gpu, 0), n_blocks + 1)
    weights = list(shares) if sum(shares) else [f for _, f in gpus]
    total = sum(weights) or 1
    quota = [n * w // total for w in weights]
    for k in range(n - sum(quota)):
        quota[k % len(quota)] += 1
    layers = ([n_blocks] if n > n_blocks else []) + list(range(n_blocks - 1, n_blocks - 1 - min(n, n_blocks), -1))
    where: list[int | None] = [None] * (n_blocks + 1)
    k = 0
    for d, (index, _) in enumerate(gpus):
        for _ in range(quota[d]):
            where[layers[k]] = index
            k += 1
    return tuple(where)


def resident(p: Parts, where: Sequence[int | None], devices: Sequence[int], minimum: int,
             graph: int) -> tuple[int, ...]:
    """What each device really holds for layers placed as ``where``, sized by
    ``p`` (the runner's own context, no estimate floor): its minimum, its
    layers and KV, and the graph, on each device that got a layer."""
    held = []
    for d in devices:
        mine = [i for i, w in enumerate(where) if w == d]
        held.append(minimum + sum(p.layer(i) for i in mine) + graph if mine else 0)
    return tuple(held)


def predicted_vram(arch: memmodel.Arch, weights_bytes: int, num_ctx: int, parallel: int) -> int:
    """``llm.PredictServerVRAM`` (v0.34.4): file size plus an f16 KV cache of
    ``2 x layers x kv heads x (E / heads) x ctx x 2`` bytes — no graph."""
    ctx = memmodel.clamp_ctx(arch, num_ctx) * max(parallel, 1)
    head_dim = arch.embedding_length // max(arch.head_count, 1)
    return int(weights_bytes) + 2 * arch.block_count * max(arch.head_count_kv, 1) * head_dim * ctx * 2


def fit_split(p: Parts, gpus: Sequence[tuple[int, int]], fit_target: int, num_gpu: int = -1) -> Split:
    """llama.cpp's layer split with fit: a share of the layers for each device
    in proportion to its free memory, cut so that ``fit_target`` plus one
    compute buffer stay free on it; what a device cannot take goes to the
    next one with room, then to the CPU. Layers are contiguous, output last."""
    n_layers = len(p.blocks) + 1
    want = n_layers if num_gpu < 0 else min(num_gpu, n_layers)
    room = [max(f - fit_target - p.full, 0) for _, f in gpus]
    total = sum(f for _, f in gpus) or 1
    share = [want * f // total for _, f in gpus]
    share[0] += want - sum(share)
    order = list(range(n_layers - want, n_layers))  # the last ``want`` layers go to GPUs
    where: list[int | None] = [None] * n_layers
    used = [0] * len(gpus)
    counts = [0] * len(gpus)
    pending = []
    k = 0
    for d, (index, _) in enumerate(gpus):
        for layer in order[k:k + share[d]]:
            if num_gpu >= 0 or used[d] + p.layer(layer) <= room[d]:
                where[layer], used[d], counts[d] = index, used[d] + p.layer(layer), counts[d] + 1
            else:
                pending.append(layer)
        k += share[d]
    for layer in pending:
        for d, (index, _) in enumerate(gpus):
            if used[d] + p.layer(layer) <= room[d]:
                where[layer], used[d], counts[d] = index, used[d] + p.layer(layer), counts[d] + 1
                break
    alloc = tuple(used[d] + p.full if counts[d] else 0 for d in range(len(gpus)))
    vram = sum(alloc)
    cpu = sum(p.layer(i) for i, w in enumerate(where) if w is None)
    graph = p.full if any(counts) else 0
    if not any(counts):
        cpu += p.full  # the compute buffer lives on the CPU then
    return Split(tuple(i for i, _ in gpus), tuple(counts), alloc, tuple(where), vram + cpu, vram, graph, 0, 0)
