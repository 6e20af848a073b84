"""What one load allocates on either engine (:func:`footprint`), and the
choices a server makes for a request that does not set them: which engine
its version runs, the automatic batch, the default context."""
from __future__ import annotations

from dataclasses import dataclass

from common.versions import parse_version
from probes.memmodel.arch import GIB, Arch, clamp_ctx
from probes.memmodel.llama_server import (llama_server_compute_bytes, llama_server_kv_bytes,
                                          llama_server_kv_per_token)
from probes.memmodel.runner import kv_bytes_per_token, place

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


def footprint(engine: str, arch: Arch, weights_bytes: int, num_ctx: int, num_parallel: int = 1,
              kv_type: str = "f16", num_batch: int | None = None,
              flash_attention: bool | None = None) -> Footprint:
    """Predict what a load allocates on ``engine``. ``weights_bytes`` is the
    tensors' size (:func:`~probes.memmodel.levels.tensor_bytes`) or, lacking it, the file size.
    ``num_batch`` None is the server's automatic batch. The legacy runner's
    figures are Ollama's v0.11.4 estimate as it reports it in /api/ps (2048-cell
    floor, its graph formula); the current engine's are llama-server's buffers."""
    ctx = clamp_ctx(arch, num_ctx)
    parallel = max(int(num_parallel), 1)
    batch = int(num_batch) if num_batch else automatic_batch(engine, ctx, parallel)
    kv_type = (kv_type or "f16").lower()
    if flash_attention is None:   # each engine's own default: auto (on) on llama-server, off on the runner
        flash_attention = engine == ENGINE_LLAMA_SERVER
    if engine == ENGINE_LLAMA_SERVER:
        kv = llama_server_kv_bytes(arch, ctx, parallel, kv_type, batch)
        compute = llama_server_compute_bytes(arch, ctx, batch, parallel, flash_attention, kv_type)
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
