"""The legacy runner's estimate (Ollama v0.11.4): what ``/api/ps`` shows before a load.

It follows Ollama v0.11.4's estimate (``llm/memory.go`` EstimateGPULayers,
``fs/ggml/ggml.go`` GraphSize) as written down in ``shared/ollama-notes.md``:
weights split into repeating blocks plus an output layer, a KV cache of
``num_ctx x num_parallel`` cells, a compute graph, a per-GPU minimum, and
layers placed from the last one down while they fit. The one deliberate
difference: quantized KV caches use the real ggml block sizes (q8_0 34 bytes
per 32 values, q4_0 18 per 32) where Ollama's estimate rounds them to 1 and
0.5 bytes; the difference is about 6% of the KV cache.

What the runner's llama.cpp then really allocates is
:func:`runner_compute_bytes` and :func:`kv_cache_bytes` (no 2048-cell floor),
which :func:`~probes.memmodel.engines.footprint` uses.
"""
from __future__ import annotations

from dataclasses import dataclass

from probes.memmodel.arch import MIB, Arch, clamp_ctx
from probes.memmodel.llama_server import KV_PAD_CELLS, graph_bytes_for, pad_cells

MIN_GPU_BYTES_CUDA = 457 * MIB   # CUDA and ROCm (per GPU)
MIN_GPU_BYTES_METAL = 512 * MIB  # Apple unified memory
ESTIMATE_MIN_CTX = 2048          # EstimateGPULayers sizes KV and graph for at least this many cells

# bytes per cached K or V element; q8_0 / q4_0 are ggml's real block sizes
# (34 and 18 bytes per block of 32), not Ollama's rounded 1 and 0.5
KV_ELEMENT_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


def _element_bytes(kv_type: str) -> float:
    try:
        return KV_ELEMENT_BYTES[kv_type.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown KV cache type {kv_type!r} (known: {', '.join(KV_ELEMENT_BYTES)})") from None


def kv_bytes_per_token(arch: Arch, kv_type: str = "f16") -> float:
    """KV cache bytes one context cell costs over all layers:
    ``block_count x (Dk + Dv) x Hkv x bytes per element``."""
    return arch.block_count * (arch.head_dim_k + arch.head_dim_v) * arch.head_count_kv * _element_bytes(kv_type)


def effective_kv_type(requested: str, flash_attention: bool, fa_supported: bool = True) -> str:
    """The KV cache type Ollama really uses: a quantized one only with flash
    attention on and supported (every GPU and the model); otherwise f16, as the
    server logs "quantized kv cache requested but flash attention disabled"."""
    kv = (requested or "f16").lower()
    if kv in ("q8_0", "q4_0") and not (flash_attention and fa_supported):
        return "f16"
    _element_bytes(kv)  # refuse unknown types here, not later
    return kv


def _cells(arch: Arch, num_ctx: int, num_parallel: int, min_cells: int = 0) -> int:
    return max(clamp_ctx(arch, num_ctx) * max(int(num_parallel), 1), int(min_cells))


def kv_layers(arch: Arch, num_ctx: int, num_parallel: int, kv_type: str, num_batch: int,
               min_cells: int = 0) -> list[int]:
    """KV bytes of each layer. Sliding-window layers (gemma3: 5 of 6; gptoss:
    even layers) hold only ``parallel x window + batch`` cells."""
    parallel = max(int(num_parallel), 1)
    cells = _cells(arch, num_ctx, parallel, min_cells)
    batch = min(cells, num_batch)
    per_cell = (arch.head_dim_k + arch.head_dim_v) * arch.head_count_kv * _element_bytes(kv_type)
    layers = []
    for i in range(arch.block_count):
        n = cells
        if arch.arch == "gemma3" and arch.sliding_window and (i + 1) % 6 != 0:
            n = parallel * arch.sliding_window + batch
        elif arch.arch == "gptoss" and i % 2 == 0:
            n = parallel * 4096 + batch
        layers.append(int(n * per_cell))
    return layers


def kv_cache_bytes(arch: Arch, num_ctx: int, num_parallel: int = 1, kv_type: str = "f16",
                   num_batch: int = 512) -> int:
    """The KV cache Ollama allocates at load: ``num_ctx x num_parallel`` cells,
    num_ctx first clamped to the model's training context."""
    return sum(kv_layers(arch, num_ctx, num_parallel, kv_type, num_batch))


def graph_bytes(arch: Arch, num_ctx: int, num_parallel: int = 1, num_batch: int = 512,
                kv_type: str = "f16", min_cells: int = 0) -> tuple[int, int]:
    """Compute graph estimate ``(full, partial)`` in bytes: full when every
    layer is on the GPU, partial when some spill to CPU.

    C = num_ctx x parallel (clamped), B = min(C, num_batch). llama, qwen2 and
    the gemma family have Ollama's own formulas; any other architecture gets
    its fallback ``(H / Hkv) x kv_total / 6``.
    """
    C = _cells(arch, num_ctx, num_parallel, min_cells)
    B = min(C, int(num_batch))
    E, H, Hkv = arch.embedding_length, max(arch.head_count, 1), max(arch.head_count_kv, 1)
    V = arch.vocab_size or 0
    Dh = arch.embedding_length // H
    Dk = arch.head_dim_k
    if arch.arch in ("llama", "llama4"):
        full = max(4 * B * (1 + 4 * E + C * (1 + H)), 4 * B * (E + V))
        partial = 4 * B * E + max(
            4 * B * (1 + E + max(C, E)) + E * E * 9 // 16 + 4 * C * (B * H + Dh * Hkv),
            4 * B * (E + V) + E * V * 105 // 128,
        )
    elif arch.arch == "qwen2":
        full = max(4 * B * (E + V), 4 * B * (1 + 2 * E + C + C * H))
        partial = max(4 * B * (E + V) + E * V * 105 // 128,
                      4 * (B * (1 + 2 * E + C * (1 + H)) + E * (1 + C)))
    elif arch.arch in ("gemma", "gemma2", "gemma3", "gemma3n"):
        full = max(4 * B * (E + V), 4 * B * (2 + C + C * H + 2 * E + 2 * Dk * H))
        partial = max(4 * E * B + E * V * 105 // 128 + 4 * V * B,
                      4 * B * (2 * E + 1 + 2 * Dk * H + C + C * H) + 4 * Dk * C * 8 + E * Dk * H * 9 // 16)
        if arch.arch == "gemma3n":
            full, partial = full * 4, partial * 4
    else:
        kv_total = sum(kv_layers(arch, num_ctx, num_parallel, kv_type, num_batch, min_cells))
        partial = (H // Hkv) * kv_total // 6
        full = partial
    return int(full), int(partial)


#: the architectures Ollama v0.11.4 runs on its own Go engine instead of
#: llama.cpp (``OllamaEngineRequired`` in fs/ggml/ggml.go): that engine logs
#: no KV line and sizes its graph its own way, so its buffers were not measured
OLLAMA_ENGINE_ARCHS = ("gemma3", "gemma3n", "mistral3", "llama4", "mllama", "qwen25vl", "gptoss")


def runner_compute_bytes(arch: Arch, num_ctx: int, num_parallel: int = 1, num_batch: int = 512,
                         flash_attention: bool = False, kv_type: str = "f16") -> int:
    """The compute buffer the legacy runner's llama.cpp logs ("CPU compute
    buffer size"): the current engine's graph (:func:`llama_server_compute_bytes`)
    over one cache of ``num_ctx x parallel`` cells, or, when larger, the
    logits of a whole micro-batch (this llama.cpp reserves an output row for
    every token). Checked against v0.11.4's lines for llama, qwen2, olmoe and
    nemo shapes (bench/results/arch-0.11.4.jsonl: 8-12 MiB over, never
    under). Not for :data:`OLLAMA_ENGINE_ARCHS`, which v0.11.4 runs on its
    own engine."""
    cells = clamp_ctx(arch, num_ctx) * max(int(num_parallel), 1)
    ub = min(int(num_batch), cells)
    graph = graph_bytes_for(arch, pad_cells(cells, KV_PAD_CELLS), ub, flash_attention, kv_type)
    return max(graph, 4 * ub * (arch.embedding_length + (arch.vocab_size or 0)))


def output_layer_bytes(arch: Arch, weights_bytes: int) -> int:
    """The share of the weights in the output layer (``output.weight``, vocab x
    embedding), which Ollama places last. Parameter counts are approximated as
    12 x E^2 per block (a transformer block), so the share needs no level."""
    if not arch.vocab_size:
        return int(weights_bytes) // (arch.block_count + 1)
    out = arch.vocab_size * arch.embedding_length
    blocks = arch.block_count * 12 * arch.embedding_length ** 2
    return int(weights_bytes * out / (out + blocks))


@dataclass(frozen=True)
class Placement:
    """Where a load puts a model, in bytes: what ``/api/ps`` shows as ``size``
    (everything) and ``size_vram`` (the GPU part), and the parts behind them."""

    layers_total: int      # repeating blocks + the output layer (Ollama's "layers.model")
    layers_gpu: int        # of those, on the GPU ("layers.offload")
    size_bytes: int
    size_vram_bytes: int
    kv_bytes: int
    graph_bytes: int       # full graph when every layer is on the GPU, else the partial one
    weights_bytes: int
    buffer_bytes: int = 0  # one layer + its KV that the estimate reserves as a safety buffer
    min_gpu_bytes: int = 0  # the per-GPU minimum counted in size_vram (0 when on CPU)

    @property
    def full_gpu(self) -> bool:
        return self.layers_gpu >= self.layers_total

    @property
    def cpu_bytes(self) -> int:
        return self.size_bytes - self.size_vram_bytes

    @property
    def where(self) -> str:
        """``gpu`` / ``partial`` / ``cpu``, as ``ollama ps`` reads "100% GPU" etc."""
        if self.layers_gpu <= 0 or self.size_vram_bytes <= 0:
            return "cpu"
        return "gpu" if self.full_gpu else "partial"


def place(arch: Arch, weights_bytes: int, num_ctx: int, num_parallel: int, num_batch: int, kv_type: str,
          gpu_free_bytes: int, num_gpu: int = -1, overhead_bytes: int = 0,
          min_gpu_bytes: int = MIN_GPU_BYTES_CUDA, *, output_bytes: int | None = None,
          unified: bool = False, cpu_only: bool = False,
          estimate_min_ctx: int = ESTIMATE_MIN_CTX, compute_bytes: int | None = None) -> Placement:
    """Ollama's layer placement (EstimateGPULayers) on one GPU with
    ``gpu_free_bytes`` free.

    Layers go from the last block down while ``overhead + placed + graph +
    layer`` stays under the free memory; the output layer last; the estimate
    keeps one extra layer as a buffer and the per-GPU minimum. When not even
    the minimum, the graph and two layers fit, everything stays on CPU.
    ``num_gpu >= 0`` asks for exactly that many layers: they are placed
    whether or not they fit, as Ollama passes the number to the runner (which
    then fails with a CUDA out-of-memory error; the caller compares
    ``size_vram_bytes`` with what is free). ``num_gpu == 0`` is CPU only.
    ``unified`` (Metal) uses the full graph even for a partial offload.
    ``cpu_only`` is a server without a GPU (like ``num_gpu == 0``): Ollama
    then estimates on the CPU, and ``size`` includes the full graph.
    The estimate counts at least ``estimate_min_ctx`` cells (Ollama's 2048
    floor; the runner itself allocates only num_ctx x parallel): pass 0 for
    what the runner really holds. ``compute_bytes`` replaces Ollama's graph
    estimate with a buffer known otherwise (llama-server's compute buffer,
    which does not grow with the number of slots).
    """
    weights_bytes = int(weights_bytes)
    kv_type = kv_type or "f16"
    kv = kv_layers(arch, num_ctx, num_parallel, kv_type, num_batch, estimate_min_ctx)
    kv_total = sum(kv)
    full, partial = graph_bytes(arch, num_ctx, num_parallel, num_batch, kv_type, estimate_min_ctx)
    if compute_bytes is not None:
        full = partial = int(compute_bytes)
    if unified:
        partial = full
    out = output_bytes if output_bytes is not None else output_layer_bytes(arch, weights_bytes)
    base, rest = divmod(weights_bytes - out, max(arch.block_count, 1))
    blocks = [base + (1 if i < rest else 0) for i in range(arch.block_count)]  # sums to weights - out
    layers_total = arch.block_count + 1
    layer0 = (blocks[0] if blocks else 0) + (kv[0] if kv else 0)
    graph_max = max(full, partial)

    def summary(layers_gpu: int, alloc: int, overflow: int, fully: bool, buffer: int, minimum: int) -> Placement:
        graph = full if fully else partial
        if layers_gpu == 0:
            # nothing fits: Ollama keeps the GPU estimate, which counts no graph
            return Placement(layers_total, 0, weights_bytes + kv_total, 0, kv_total, 0, weights_bytes)
        return Placement(layers_total, layers_gpu, int(alloc + graph + overflow), int(alloc + graph), kv_total,
                         int(graph), weights_bytes, buffer, minimum)

    if num_gpu == 0 or cpu_only:
        # the CPU "device" takes every layer: one layer of buffer, the weights,
        # the KV cache and the full graph, all in host memory
        size = layer0 + weights_bytes + kv_total + full
        return Placement(layers_total, 0, int(size), 0, kv_total, int(full), weights_bytes, layer0, 0)

    if num_gpu > 0:
        # forced: exactly min(num_gpu, total) layers, last blocks first, output last
        n = min(num_gpu, layers_total)
        blocks_gpu = min(n, arch.block_count)
        gpu_blocks = range(arch.block_count - blocks_gpu, arch.block_count)
        alloc = min_gpu_bytes + layer0 + sum(blocks[i] + kv[i] for i in gpu_blocks)
        overflow = sum(blocks[i] + kv[i] for i in range(arch.block_count - blocks_gpu))
        if n > arch.block_count:
            alloc += out
        else:
            overflow += out
        return summary(n, alloc, overflow, n >= layers_total, layer0, min_gpu_bytes)

    free = int(gpu_free_bytes)
    if free < overhead_bytes + graph_max + min_gpu_bytes + 2 * layer0:
        return summary(0, 0, 0, False, 0, 0)
    alloc = min_gpu_bytes + layer0
    placed = 0
    overflow = 0
    room = True
    for i in range(arch.block_count - 1, -1, -1):
        size = blocks[i] + kv[i]
        if room and free > overhead_bytes + alloc + graph_max + size:
            alloc += size
            placed += 1
        else:
            room = False  # like Ollama, a GPU that refused one layer gets no more
            overflow += size
    if room and free > overhead_bytes + alloc + graph_max + out:
        alloc += out
        placed += 1
    else:
        overflow += out
    if placed == 0:
        return summary(0, 0, 0, False, 0, 0)
    return summary(placed, alloc, overflow, placed >= layers_total, layer0, min_gpu_bytes)

