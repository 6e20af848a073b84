"""What one load allocates on either engine (:func:`footprint`), and the
choices a server makes for a request that does not set them: which engine
its version runs, the automatic batch, the default context."""
from __future__ import annotations

from dataclasses import dataclass

from common.versions import parse_version
from probes.memmodel.arch import GIB, MIB, Arch, clamp_ctx
from probes.memmodel.llama_server import (KV_PAD_CELLS, graph_bytes_for, llama_server_compute_bytes,
                                          llama_server_kv_bytes, llama_server_kv_per_token, pad_cells)
from probes.memmodel.runner import effective_kv_type, kv_bytes_per_token, kv_cache_bytes, runner_compute_bytes

ENGINE_RUNNER = "runner"            # the in-process runner of v0.11.x and before
ENGINE_LLAMA_SERVER = "llama-server"
LLAMA_SERVER_SINCE = (0, 30)


def engine_for_version(version: str | None) -> str:
    """Which engine a server of this version runs GGUF models with."""
    v = parse_version(version)
    return ENGINE_LLAMA_SERVER if v and v[:2] >= LLAMA_SERVER_SINCE else ENGINE_RUNNER


def automatic_batch(engine: str, num_ctx: int, num_parallel: int = 1) -> int:
    """The batch a request gets when it does not set ``num_batch``: 512 on the
    legacy runner; the current engine raises it with the context of all its
    slots, ``num_ctx x parallel`` (1024 above 4096, 2048 above 32768;
    ``automaticGenerationBatch`` in server/sched.go, v0.34.4). Not modelled:
    Ollama lowers it again when the prediction leaves too little headroom on
    the device, and keeps 512 (256 on a CUDA card of 8 GiB or less) when flash
    attention is off on CUDA."""
    if engine != ENGINE_LLAMA_SERVER:
        return 512
    total = int(num_ctx) * max(int(num_parallel), 1)
    if total > 32768:
        return 2048
    if total > 4096:
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


#: what the model's process holds beside the buffers it logs (its code, the
#: runtime, thread stacks, the tokenizer), measured as host RSS on the rig's
#: CPU with every buffer accounted for: bench/bench_predict.py (bench/README.md)
PROCESS_BYTES = {ENGINE_LLAMA_SERVER: 38 * MIB, ENGINE_RUNNER: 62 * MIB}


@dataclass(frozen=True)
class Footprint:
    """What one load allocates, in bytes: the buffers as the server logs
    them (``total``), and what the model's process holds at its peak beyond
    them (``transient``, ``overhead``; ``peak`` is the sum of all)."""

    engine: str
    num_ctx: int          # per slot, after the clamp to the trained context
    num_parallel: int
    num_batch: int
    kv_type: str
    weights: int
    kv: int
    compute: int
    output: int = 0
    transient: int = 0    # the CPU's f16 copy of the attention scores, without flash attention
    overhead: int = 0     # the process itself (PROCESS_BYTES)
    touched: int | None = None   # of ``compute``, what a request uses on the CPU (None: all of it)

    @property
    def total(self) -> int:
        """The buffers the server logs (and the current engine's /api/ps size)."""
        return self.weights + self.kv + self.compute + self.output

    @property
    def peak(self) -> int:
        """What the model's process should peak at once a request fills the
        context, on the CPU backend (the one measured): the buffers, but of
        the compute buffer only the pages a request touches, plus the copy
        of the scores and the process."""
        compute = self.compute if self.touched is None else self.touched
        return self.weights + self.kv + compute + self.output + self.transient + self.overhead

    def to_dict(self) -> dict:
        return {"engine": self.engine, "num_ctx": self.num_ctx, "num_parallel": self.num_parallel,
                "num_batch": self.num_batch, "kv_type": self.kv_type, "weights": self.weights, "kv": self.kv,
                "compute": self.compute, "output": self.output, "total": self.total, "transient": self.transient,
                "overhead": self.overhead, "touched": self.touched, "peak": self.peak}


def attention_copy_bytes(arch: Arch, cells: int, ubatch: int) -> int:
    """Without flash attention, the CPU backend multiplies the softmaxed
    scores (f32) by the f16 V cache after converting them to f16 in its
    work buffer, which no buffer line counts: 2 bytes x heads x cells x the
    micro-batch (ggml-cpu's mul_mat; the work buffer keeps its largest size)."""
    return 2 * arch.head_count * int(cells) * int(ubatch)


def footprint(engine: str, arch: Arch, weights_bytes: int, num_ctx: int, num_parallel: int = 1,
              kv_type: str = "f16", num_batch: int | None = None,
              flash_attention: bool | None = None) -> Footprint:
    """Predict what a load allocates on ``engine``. ``weights_bytes`` is the
    tensors' size (:func:`~probes.memmodel.levels.tensor_bytes`) or, lacking it, the file size.
    ``num_batch`` None is the server's automatic batch. The buffers are
    those the engine's llama.cpp logs (the legacy runner's KV cache for
    ``num_ctx x parallel`` cells, not Ollama's estimate with its 2048-cell
    floor, which is :func:`~probes.memmodel.runner.place`); ``peak`` adds the
    CPU's copy of the attention scores and the process itself."""
    ctx = clamp_ctx(arch, num_ctx)
    parallel = max(int(num_parallel), 1)
    batch = int(num_batch) if num_batch else automatic_batch(engine, ctx, parallel)
    kv_type = (kv_type or "f16").lower()
    if flash_attention is None:   # each engine's own default: auto (on) on llama-server, off on the runner
        flash_attention = engine == ENGINE_LLAMA_SERVER
    output = 4 * (arch.vocab_size or 0) * parallel   # one row of logits per slot
    if engine == ENGINE_LLAMA_SERVER:
        kv = llama_server_kv_bytes(arch, ctx, parallel, kv_type, batch)
        compute = llama_server_compute_bytes(arch, ctx, batch, parallel, flash_attention, kv_type)
        cells = pad_cells(ctx, KV_PAD_CELLS)   # one slot's stream: what its attention spans
        touched = None
    else:
        kv_type = effective_kv_type(kv_type, flash_attention, arch.supports_flash_attention)
        kv = kv_cache_bytes(arch, ctx, parallel, kv_type, batch)
        cells = pad_cells(ctx * parallel, KV_PAD_CELLS)   # one cache for all slots
        compute = runner_compute_bytes(arch, ctx, parallel, batch, flash_attention, kv_type)
        # its reserve counts the logits of every token of a micro-batch; a request asks for one
        touched = graph_bytes_for(arch, cells, min(batch, cells), flash_attention, kv_type)
    copy = 0 if flash_attention else attention_copy_bytes(arch, cells, min(batch, cells))
    return Footprint(engine, ctx, parallel, batch, kv_type, int(weights_bytes), kv, compute, output, copy,
                     PROCESS_BYTES.get(engine, 0), touched)


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
