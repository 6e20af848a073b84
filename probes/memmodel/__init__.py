"""The memory model: how much memory Ollama will want for a model, before it loads.

Pure arithmetic (no I/O) that both the probes and the scenario simulator use,
so a probe's prediction ("this tier needs 6.6 GiB") and the simulator's
behaviour come from the same figures. :func:`footprint` gives the buffers an
engine's llama.cpp logs (``total``) and the peak of the model's process once
a request fills the context (``peak``: what the context step measures);
:func:`place` gives the legacy scheduler's estimate, what its ``/api/ps``
shows and how it places layers on a GPU. None of it is a measurement. One
job per module: :mod:`.arch` (a model's shape), :mod:`.levels`
(quantization levels and tensor types), :mod:`.runner` (the legacy runner,
v0.11.4: its estimate, layer placement and buffers), :mod:`.llama_server`
(the current engine's buffers, v0.30+), :mod:`.engines` (what a load
allocates on either engine, and a server's defaults), :mod:`.placement`
(which GPU holds which layers when there are several). Callers import
everything from here (``from probes import memmodel``).
"""
from __future__ import annotations

from probes.memmodel.arch import GIB, MIB, Arch, ModelInfoError, clamp_ctx
from probes.memmodel.engines import (ENGINE_LLAMA_SERVER, ENGINE_RUNNER, LLAMA_SERVER_SINCE, PROCESS_BYTES,
                                     Footprint, automatic_batch, engine_for_version, footprint, kv_per_token,
                                     largest_fitting_ctx, parse_version, server_default_ctx)
from probes.memmodel.levels import (GGML_TYPE_SIZE, bits_per_weight, known_levels, level_from_tag, tensor_bytes,
                                    weights_for_level)
from probes.memmodel.llama_server import (COMPUTE_TERMS, KV_PAD_CELLS, LLAMA_SERVER_KV_BYTES, compute_checked,
                                          llama_server_compute_bytes,
                                          llama_server_kv_bytes, llama_server_kv_per_token)
from probes.memmodel.placement import (FIT_TARGET_BYTES, CardShare, Layers, Split, current_split, legacy_split,
                                       model_layers, server_vram_prediction)
from probes.memmodel.runner import (ESTIMATE_MIN_CTX, KV_ELEMENT_BYTES, MIN_GPU_BYTES_CUDA, MIN_GPU_BYTES_METAL,
                                    OLLAMA_ENGINE_ARCHS, Placement, effective_kv_type, graph_bytes,
                                    kv_bytes_per_token, kv_cache_bytes, output_layer_bytes, place,
                                    runner_compute_bytes)

__all__ = [
    "MIB", "GIB", "Arch", "ModelInfoError", "clamp_ctx",
    "ENGINE_LLAMA_SERVER", "ENGINE_RUNNER", "LLAMA_SERVER_SINCE", "PROCESS_BYTES", "Footprint", "automatic_batch",
    "engine_for_version", "footprint", "kv_per_token", "largest_fitting_ctx", "parse_version", "server_default_ctx",
    "GGML_TYPE_SIZE", "bits_per_weight", "known_levels", "level_from_tag", "tensor_bytes", "weights_for_level",
    "COMPUTE_TERMS", "compute_checked", "KV_PAD_CELLS", "LLAMA_SERVER_KV_BYTES", "llama_server_compute_bytes", "llama_server_kv_bytes",
    "llama_server_kv_per_token",
    "ESTIMATE_MIN_CTX", "KV_ELEMENT_BYTES", "MIN_GPU_BYTES_CUDA", "MIN_GPU_BYTES_METAL", "OLLAMA_ENGINE_ARCHS",
    "Placement", "runner_compute_bytes",
    "effective_kv_type", "graph_bytes", "kv_bytes_per_token", "kv_cache_bytes", "output_layer_bytes", "place",
    "FIT_TARGET_BYTES", "CardShare", "Layers", "Split", "current_split", "legacy_split", "model_layers",
    "server_vram_prediction",
]
