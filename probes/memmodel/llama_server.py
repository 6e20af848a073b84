"""The current engine's buffers: llama-server (Ollama v0.30 and later).

From v0.30 Ollama starts upstream llama-server with ``-c num_ctx*parallel
-np parallel`` and lets llama.cpp's allocator decide. What it allocates is
logged per device ("model / KV / compute / output buffer size = X MiB") and
that sum is what /api/ps reports. The formulas below reproduce those
buffers; they are checked in tests against the figures a real v0.34.4
printed for the rig's F16 model (shared/ollama-current.md section 7).
"""
from __future__ import annotations

from probes.memmodel.arch import Arch, clamp_ctx

KV_PAD_CELLS = 256                  # llama.cpp pads every KV stream to 256 cells
# llama-server's KV types (``--cache-type-k/v``), bytes per value
LLAMA_SERVER_KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32,
                         "q4_1": 20 / 32, "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}


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

