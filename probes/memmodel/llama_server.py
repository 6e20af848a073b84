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


def pad_cells(n: int, to: int) -> int:
    """``n`` rounded up to a multiple of ``to`` (llama.cpp pads KV streams to 256 cells)."""
    return -(-int(n) // to) * to


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
    cells = pad_cells(clamp_ctx(arch, num_ctx), KV_PAD_CELLS)
    swa_cells = min(cells, pad_cells((arch.sliding_window or 0) + num_batch, KV_PAD_CELLS))
    per_cell = (arch.head_dim_k + arch.head_dim_v) * arch.head_count_kv * per_value
    total = 0.0
    for i in range(arch.block_count):
        total += (swa_cells if arch.swa_layer(i) else cells) * per_cell
    return int(total * parallel)


def llama_server_kv_per_token(arch: Arch, kv_type: str = "f16") -> float:
    """KV bytes one more token of context costs on the current engine: the
    global layers only, once the context is past the sliding window."""
    per_value = LLAMA_SERVER_KV_BYTES[(kv_type or "f16").lower()]
    layers = sum(1 for i in range(arch.block_count) if not arch.swa_layer(i))
    return layers * (arch.head_dim_k + arch.head_dim_v) * arch.head_count_kv * per_value


#: per architecture, what the compute buffer holds beside the feed-forward
#: tensors and the masks, in embeddings per token: with an f16 KV cache, with a
#: quantized one, and in the attention step without flash attention (None:
#: 5 x Q + 2 x K/V, as llama and its kin build it). Measured on llama.cpp
#: b11076 (bench/llama_buffers.py); Gemma 3's sandwich norms and 256-wide
#: heads keep more alive, and its sliding-window layers add an f16 mask of
#: ub x ub. An architecture not listed here was not measured: see
#: :func:`compute_checked`.
COMPUTE_TERMS = {
    "llama": (4, 3, None), "qwen2": (4, 3, None), "olmoe": (4, 3, None), "qwen3": (4, 3, None),
    "gemma3": (4, 5, 7),
}


def compute_checked(arch: Arch) -> bool:
    """Whether the compute buffer formula was checked on this architecture."""
    return arch.arch in COMPUTE_TERMS


def llama_server_compute_bytes(arch: Arch, num_ctx: int, num_batch: int, num_parallel: int = 1,
                               flash_attention: bool = True, kv_type: str = "f16") -> int:
    """The compute buffer llama.cpp reserves for the worst micro-batch: ``ub``
    = min(``num_batch``, the whole context) tokens (Ollama passes ``-ub`` =
    ``-b``), one output per slot. ggml's allocator reuses a tensor's memory
    once its last reader has run, so the buffer is the largest set of
    tensors alive at once, in f32 (4 bytes) per token:

    * the feed-forward step: gate, up and their product (3 x the FFN width;
      for a MoE, the width of the experts each token uses), beside 4 x the
      embedding (3 with a quantized KV cache), and the f16 attention mask of
      ``cells x ub``;
    * without flash attention, the attention step: the scores of every head
      against every cell (``cells x ub x heads``), the f32 mask, and the
      residual, the norm, Q and two K/V-sized tensors.

    Derived from llama.cpp b11076's graph (src/llama-graph.cpp) and checked
    against the buffer lines its llama-server printed for five real shapes
    (bench/llama_buffers.py; the table is in bench/README.md). The number of
    slots changes nothing: the batch is split between them, not repeated.
    """
    cells = pad_cells(clamp_ctx(arch, num_ctx), KV_PAD_CELLS)
    ub = min(int(num_batch), cells * max(int(num_parallel), 1))
    return graph_bytes_for(arch, cells, ub, flash_attention, kv_type)


def graph_bytes_for(arch: Arch, cells: int, ub: int, flash_attention: bool = True, kv_type: str = "f16") -> int:
    """:func:`llama_server_compute_bytes` for an attention span of ``cells``
    (already padded) and a micro-batch of ``ub`` tokens."""
    E = arch.embedding_length
    e_f16, e_quant, attn_e = COMPUTE_TERMS.get(arch.arch, COMPUTE_TERMS["llama"])
    quantized = (kv_type or "f16").lower() not in ("f16", "f32", "bf16")
    ffn = 4 * ub * (3 * ffn_width(arch) + (e_quant if quantized else e_f16) * E) + 2 * cells * ub
    if arch.swa_layers and not quantized:
        ffn += 2 * ub * ub
    if flash_attention:
        return int(ffn)
    q_dim = arch.head_count * arch.head_dim_k
    kv_dim = arch.head_count_kv * arch.head_dim_k
    rest = attn_e * E if attn_e else 5 * q_dim + 2 * kv_dim
    attention = 4 * ub * (cells * arch.head_count + cells + rest)
    return int(max(ffn, attention))


def ffn_width(arch: Arch) -> int:
    """The feed-forward width a token passes through: the GGUF's
    feed_forward_length (times the experts used, for a MoE); 8/3 of the
    embedding (a SwiGLU block's usual ratio) when the GGUF does not say."""
    width = arch.feed_forward_length or (8 * arch.embedding_length) // 3
    if arch.expert_count and arch.expert_used_count:
        width = (arch.expert_feed_forward_length or width) * arch.expert_used_count
    return int(width)
