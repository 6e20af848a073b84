"""The memory model: how much GPU memory Ollama will want for a model, before it loads.

One pure module (no I/O) that both the probes and the scenario simulator use,
so a probe's prediction ("this tier needs 6.6 GiB") and the simulator's
behaviour come from the same arithmetic. It follows Ollama v0.11.4's
estimate (``llm/memory.go`` EstimateGPULayers, ``fs/ggml/ggml.go`` GraphSize) as
written down in ``shared/ollama-notes.md``: weights split into repeating
blocks plus an output layer, a KV cache of ``num_ctx x num_parallel`` cells, a
compute graph, a per-GPU minimum, and layers placed from the last one down
while they fit. The one deliberate difference: quantized KV caches use the
real ggml block sizes (q8_0 34 bytes per 32 values, q4_0 18 per 32) where
Ollama's estimate rounds them to 1 and 0.5 bytes; the difference is about 6%
of the KV cache. ``/api/ps`` shows Ollama's estimate, so what this module
returns is what ``size`` and ``size_vram`` should read, not a measurement.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from probes.errors import ProbeError

MIB = 1 << 20
GIB = 1 << 30

MIN_GPU_BYTES_CUDA = 457 * MIB   # CUDA and ROCm (per GPU)
MIN_GPU_BYTES_METAL = 512 * MIB  # Apple unified memory
ESTIMATE_MIN_CTX = 2048          # EstimateGPULayers sizes KV and graph for at least this many cells

# bytes per cached K or V element; q8_0 / q4_0 are ggml's real block sizes
# (34 and 18 bytes per block of 32), not Ollama's rounded 1 and 0.5
KV_ELEMENT_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}

# average bits per weight of a whole file at each Ollama quantization level.
# Block types are exact (Q8_0 = 34 bytes / 32 weights = 8.5); the K-quant
# mixes (_S/_M/_L) keep some tensors at a higher type, so their figures are
# llama.cpp's measured averages on Llama-class models.
_BITS = {
    "F32": 32.0, "F16": 16.0, "BF16": 16.0,
    "Q8_0": 8.5, "Q6_K": 6.5625,
    "Q5_1": 6.0, "Q5_K_M": 5.69, "Q5_K_S": 5.54, "Q5_0": 5.5,
    "Q4_1": 5.0, "Q4_K_M": 4.85, "Q4_K_S": 4.58, "Q4_0": 4.5, "IQ4_NL": 4.5,
    "MXFP4": 4.25, "IQ4_XS": 4.25,
    "Q3_K_L": 4.27, "Q3_K_M": 3.91, "IQ3_M": 3.66, "Q3_K_S": 3.5, "IQ3_S": 3.44,
    "IQ3_XS": 3.3, "IQ3_XXS": 3.06,
    "Q2_K": 2.63, "Q2_K_S": 2.5, "IQ2_M": 2.7, "IQ2_S": 2.5, "IQ2_XS": 2.31,
    "IQ2_XXS": 2.06, "TQ2_0": 2.06,
    "IQ1_M": 1.75, "TQ1_0": 1.69, "IQ1_S": 1.56,
}


class ModelInfoError(ProbeError, ValueError):
    """``/api/show`` model_info lacks a key the memory model needs."""


@dataclass(frozen=True)
class Arch:
    """The GGUF shape of a model, as far as memory goes (``ollama show --verbose``)."""

    arch: str
    block_count: int
    head_count: int
    head_count_kv: int
    embedding_length: int
    context_length: int
    vocab_size: int | None = None
    key_length: int | None = None
    value_length: int | None = None
    sliding_window: int | None = None

    @property
    def head_dim_k(self) -> int:
        return self.key_length or self.embedding_length // max(self.head_count, 1)

    @property
    def head_dim_v(self) -> int:
        return self.value_length or self.embedding_length // max(self.head_count, 1)

    @property
    def supports_flash_attention(self) -> bool:
        # Ollama turns flash attention off for a model whose K and V heads differ
        return self.head_dim_k == self.head_dim_v

    @classmethod
    def from_model_info(cls, model_info: Mapping[str, Any]) -> "Arch":
        """Build from ``/api/show``'s ``model_info`` (every GGUF key of the model).

        Per-layer arrays (``head_count_kv`` on some models) count by their
        largest value, as Ollama's estimate does. The vocabulary comes from
        ``<arch>.vocab_size`` or the length of ``tokenizer.ggml.tokens`` when
        the server sent the list (it sends null for long arrays unless asked
        with ``"verbose": true``).
        """
        info = dict(model_info or {})
        arch = info.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise ModelInfoError("model_info has no general.architecture",
                                 hint="is this an Ollama /api/show response for a GGUF model?")

        def get(key: str, required: bool = True) -> int | None:
            value = info.get(f"{arch}.{key}")
            if isinstance(value, (list, tuple)):
                numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
                value = max(numbers) if numbers else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                value = None
            if value is None and required:
                raise ModelInfoError(f"model_info has no usable {arch}.{key}")
            return None if value is None else int(value)

        vocab = get("vocab_size", required=False)
        tokens = info.get("tokenizer.ggml.tokens")
        if vocab is None and isinstance(tokens, (list, tuple)) and tokens:
            vocab = len(tokens)
        head_count = get("attention.head_count")
        return cls(
            arch=arch,
            block_count=get("block_count"),
            head_count=head_count,
            # a model without GQA may leave head_count_kv out: it equals head_count
            head_count_kv=get("attention.head_count_kv", required=False) or head_count,
            embedding_length=get("embedding_length"),
            context_length=get("context_length", required=False) or 0,
            vocab_size=vocab,
            key_length=get("attention.key_length", required=False),
            value_length=get("attention.value_length", required=False),
            sliding_window=get("attention.sliding_window", required=False),
        )


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


def clamp_ctx(arch: Arch, num_ctx: int) -> int:
    """num_ctx after Ollama's clamp to the training context (and its minimum of 4)."""
    ctx = max(int(num_ctx), 4)
    if arch.context_length and ctx > arch.context_length:
        ctx = arch.context_length
    return ctx


def _cells(arch: Arch, num_ctx: int, num_parallel: int, min_cells: int = 0) -> int:
    return max(clamp_ctx(arch, num_ctx) * max(int(num_parallel), 1), int(min_cells))


def _kv_layers(arch: Arch, num_ctx: int, num_parallel: int, kv_type: str, num_batch: int,
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
    return sum(_kv_layers(arch, num_ctx, num_parallel, kv_type, num_batch))


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
        kv_total = sum(_kv_layers(arch, num_ctx, num_parallel, kv_type, num_batch, min_cells))
        partial = (H // Hkv) * kv_total // 6
        full = partial
    return int(full), int(partial)


def bits_per_weight(level: str) -> float:
    """Average bits per weight of an Ollama quantization level
    (``details.quantization_level``), for ordering levels and sizing tags.
    Case does not matter; an unknown level raises ValueError."""
    key = str(level).strip().upper()
    if key in _BITS:
        return _BITS[key]
    raise ValueError(f"unknown quantization level {level!r} (known: {', '.join(_BITS)})")


def known_levels() -> tuple[str, ...]:
    """Every level :func:`bits_per_weight` knows, most bits first."""
    return tuple(sorted(_BITS, key=lambda k: -_BITS[k]))


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
          estimate_min_ctx: int = ESTIMATE_MIN_CTX) -> Placement:
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
    what the runner really holds.
    """
    weights_bytes = int(weights_bytes)
    kv_type = kv_type or "f16"
    kv = _kv_layers(arch, num_ctx, num_parallel, kv_type, num_batch, estimate_min_ctx)
    kv_total = sum(kv)
    full, partial = graph_bytes(arch, num_ctx, num_parallel, num_batch, kv_type, estimate_min_ctx)
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


def weights_for_level(params: int, level: str) -> int:
    """Bytes of a model with ``params`` weights at ``level`` (for sizing a tag
    that does not exist yet)."""
    return int(math.ceil(params * bits_per_weight(level) / 8))


_LEVEL_IN_TAG = re.compile(r"(?i)(?:^|[-_:.])((?:i?q\d(?:_[0-9a-z]+)*)|f16|f32|bf16|fp16|mxfp4)(?:$|[-_.])")


def level_from_tag(tag: str) -> str | None:
    """A quantization level guessed from a tag name (``llama3:8b-q4_K_M`` ->
    ``Q4_K_M``); only a hint: tag names are free text, ``/api/show`` decides."""
    name = tag.split(":", 1)[-1]
    for m in _LEVEL_IN_TAG.finditer(name):
        parts = m.group(1).upper().replace("FP16", "F16").split("_")
        for n in range(len(parts), 0, -1):  # q4_0_instruct -> Q4_0
            if "_".join(parts[:n]) in _BITS:
                return "_".join(parts[:n])
    return None


# -- the current engine: llama-server (Ollama v0.30 and later) ---------------
#
# From v0.30 Ollama starts upstream llama-server with ``-c num_ctx*parallel
# -np parallel`` and lets llama.cpp's allocator decide. What it allocates is
# logged per device ("model / KV / compute / output buffer size = X MiB") and
# that sum is what /api/ps reports. The formulas below reproduce those
# buffers; they are checked in tests against the figures a real v0.34.4
# printed for the rig's F16 model (shared/ollama-current.md section 7).

ENGINE_RUNNER = "runner"            # the in-process runner of v0.11.x and before
ENGINE_LLAMA_SERVER = "llama-server"
LLAMA_SERVER_SINCE = (0, 30)
KV_PAD_CELLS = 256                  # llama.cpp pads every KV stream to 256 cells

# bytes per block and values per block of each ggml tensor type (ggml.c type traits)
GGML_TYPE_SIZE = {
    "F32": (4, 1), "F16": (2, 1), "BF16": (2, 1), "F64": (8, 1), "I8": (1, 1), "I16": (2, 1), "I32": (4, 1),
    "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32), "Q8_1": (36, 32),
    "Q2_K": (84, 256), "Q3_K": (110, 256), "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256),
    "Q8_K": (292, 256), "IQ2_XXS": (66, 256), "IQ2_XS": (74, 256), "IQ2_S": (82, 256), "IQ3_XXS": (98, 256),
    "IQ3_S": (110, 256), "IQ1_S": (50, 256), "IQ1_M": (56, 256), "IQ4_NL": (18, 32), "IQ4_XS": (136, 256),
    "TQ1_0": (54, 256), "TQ2_0": (66, 256), "MXFP4": (17, 32),
}
# llama-server's KV types (``--cache-type-k/v``), bytes per value
LLAMA_SERVER_KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32,
                         "q4_1": 20 / 32, "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}


def parse_version(version: str | None) -> tuple[int, ...]:
    """``"0.34.4"`` -> (0, 34, 4); anything unreadable -> ()."""
    parts = []
    for piece in str(version or "").lstrip("v").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def engine_for_version(version: str | None) -> str:
    """Which engine a server of this version runs GGUF models with."""
    v = parse_version(version)
    return ENGINE_LLAMA_SERVER if v and v[:2] >= LLAMA_SERVER_SINCE else ENGINE_RUNNER


def tensor_bytes(tensors) -> int | None:
    """Bytes of the weights as the file stores them: the sum over ``/api/show``
    ``tensors`` (verbose) of elements x the type's bytes per block / values per
    block. None when the list is missing or holds a type we do not know, so a
    caller falls back to the file size instead of trusting a partial sum."""
    if not tensors:
        return None
    total = 0
    for t in tensors:
        kind = str(t.get("type", "")).upper()
        if kind not in GGML_TYPE_SIZE:
            return None
        size, block = GGML_TYPE_SIZE[kind]
        n = 1
        for dim in t.get("shape") or []:
            n *= int(dim)
        total += -(-n // block) * size
    return total


def automatic_batch(engine: str, num_ctx: int) -> int:
    """The batch a request gets when it does not set ``num_batch``: 512 on the
    legacy runner; the current engine raises it with the per-slot context
    (1024 above 4096, 2048 above 32768; ``automaticGenerationBatch``)."""
    if engine != ENGINE_LLAMA_SERVER:
        return 512
    if num_ctx > 32768:
        return 2048
    if num_ctx > 4096:
        return 1024
    return 512


def server_default_ctx(engine: str, total_vram_bytes: int | None, context_length_env: int | None = None,
                       trained_ctx: int | None = None) -> int:
    """The context a request without ``num_ctx`` gets. ``OLLAMA_CONTEXT_LENGTH``
    wins when set; otherwise the legacy runner uses 4096 and the current
    engine picks by total VRAM (>= 47 GiB: 262144, >= 23 GiB: 32768, else
    4096; CPU only counts as 0). Clamped to the trained context."""
    if context_length_env:
        ctx = int(context_length_env)
    elif engine == ENGINE_LLAMA_SERVER:
        vram = int(total_vram_bytes or 0)
        ctx = 262144 if vram >= 47 * GIB else 32768 if vram >= 23 * GIB else 4096
    else:
        ctx = 4096
    if trained_ctx and ctx > trained_ctx:
        ctx = int(trained_ctx)
    return max(ctx, 4)


@dataclass(frozen=True)
class Footprint:
    """What one load allocates, in bytes, split as the server logs it."""

    engine: str
    num_ctx: int          # per slot, after the clamp to the trained context
    num_parallel: int
    num_batch: int
    kv_type: str
    weights: int
    kv: int
    compute: int
    output: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.output

    def to_dict(self) -> dict:
        return {"engine": self.engine, "num_ctx": self.num_ctx, "num_parallel": self.num_parallel,
                "num_batch": self.num_batch, "kv_type": self.kv_type, "weights": self.weights, "kv": self.kv,
                "compute": self.compute, "output": self.output, "total": self.total}


def _pad(n: int, to: int) -> int:
    return -(-int(n) // to) * to


def _swa_layer(arch: Arch, i: int) -> bool:
    if arch.arch in ("gemma3", "gemma3n") and arch.sliding_window:
        return (i + 1) % 6 != 0      # 5 of 6 layers slide; every 6th is global
    if arch.arch in ("gptoss", "gpt-oss") and arch.sliding_window:
        return i % 2 == 0
    return False


def llama_server_kv_bytes(arch: Arch, num_ctx: int, num_parallel: int = 1, kv_type: str = "f16",
                          num_batch: int = 512) -> int:
    """llama-server's KV buffer: one stream of ``num_ctx`` cells (padded to
    256) per slot for global layers; a sliding-window layer's stream holds
    only ``window + batch`` cells (padded), never more than the global one."""
    try:
        per_value = LLAMA_SERVER_KV_BYTES[(kv_type or "f16").lower()]
    except KeyError:
        raise ValueError(f"unknown KV cache type {kv_type!r} (known: {', '.join(LLAMA_SERVER_KV_BYTES)})") from None
    parallel = max(int(num_parallel), 1)
    cells = _pad(clamp_ctx(arch, num_ctx), KV_PAD_CELLS)
    swa_cells = min(cells, _pad((arch.sliding_window or 0) + num_batch, KV_PAD_CELLS))
    per_cell = (arch.head_dim_k + arch.head_dim_v) * arch.head_count_kv * per_value
    total = 0.0
    for i in range(arch.block_count):
        total += (swa_cells if _swa_layer(arch, i) else cells) * per_cell
    return int(total * parallel)


def llama_server_kv_per_token(arch: Arch, kv_type: str = "f16") -> float:
    """KV bytes one more token of context costs on the current engine: the
    global layers only, once the context is past the sliding window."""
    per_value = LLAMA_SERVER_KV_BYTES[(kv_type or "f16").lower()]
    layers = sum(1 for i in range(arch.block_count) if not _swa_layer(arch, i))
    return layers * (arch.head_dim_k + arch.head_dim_v) * arch.head_count_kv * per_value


def llama_server_compute_bytes(arch: Arch, num_ctx: int, num_batch: int) -> int:
    """The compute buffer llama.cpp reserves for one micro-batch of
    ``num_batch`` tokens (Ollama passes ``-ub`` = ``-b``): activations of
    12 x embedding floats per token, plus the f16 attention mask of
    batch x per-slot context. Fitted to v0.34.4's own log lines for the rig's
    model (15.51 MiB at 2048/512, 17.51 at 4096/512, 43.02 at 8192/1024) and
    independent of the number of slots, as those lines show."""
    ub = min(int(num_batch), _pad(clamp_ctx(arch, num_ctx), KV_PAD_CELLS))
    cells = _pad(clamp_ctx(arch, num_ctx), KV_PAD_CELLS)
    return int(ub * 4 * 12 * arch.embedding_length + ub * cells * 2)


def footprint(engine: str, arch: Arch, weights_bytes: int, num_ctx: int, num_parallel: int = 1,
              kv_type: str = "f16", num_batch: int | None = None) -> Footprint:
    """Predict what a load allocates on ``engine``. ``weights_bytes`` is the
    tensors' size (:func:`tensor_bytes`) or, lacking it, the file size.
    ``num_batch`` None is the server's automatic batch. The legacy runner's
    figures are Ollama's v0.11.4 estimate as it reports it in /api/ps (2048-cell
    floor, its graph formula); the current engine's are llama-server's buffers."""
    ctx = clamp_ctx(arch, num_ctx)
    parallel = max(int(num_parallel), 1)
    batch = int(num_batch) if num_batch else automatic_batch(engine, ctx)
    kv_type = (kv_type or "f16").lower()
    if engine == ENGINE_LLAMA_SERVER:
        kv = llama_server_kv_bytes(arch, ctx, parallel, kv_type, batch)
        compute = llama_server_compute_bytes(arch, ctx, batch)
        output = 4 * (arch.vocab_size or 0) * parallel   # one row of logits per slot
        return Footprint(engine, ctx, parallel, batch, kv_type, int(weights_bytes), kv, compute, output)
    placement = place(arch, weights_bytes, ctx, parallel, batch, kv_type, 0, cpu_only=True)
    return Footprint(engine, ctx, parallel, batch, kv_type, int(weights_bytes), placement.kv_bytes,
                     placement.size_bytes - placement.kv_bytes - int(weights_bytes))


def kv_per_token(engine: str, arch: Arch, kv_type: str = "f16") -> float:
    """KV bytes per token of context for one slot on ``engine``."""
    if engine == ENGINE_LLAMA_SERVER:
        return llama_server_kv_per_token(arch, kv_type)
    return kv_bytes_per_token(arch, kv_type)


def largest_fitting_ctx(predict, limit_bytes: int, lo: int, hi: int, step: int = 256) -> int | None:
    """The largest multiple of ``step`` in ``[lo, hi]`` whose ``predict(ctx)``
    stays at or under ``limit_bytes``, for any prediction that grows with the
    context (a bisection, so batch steps and sliding windows are handled);
    None when not even ``lo`` fits."""
    lo_k, hi_k = max(1, -(-int(lo) // step)), int(hi) // step
    if hi_k < lo_k or predict(lo_k * step) > limit_bytes:
        return None
    while lo_k < hi_k:
        mid = (lo_k + hi_k + 1) // 2
        if predict(mid * step) <= limit_bytes:
            lo_k = mid
        else:
            hi_k = mid - 1
    return lo_k * step
