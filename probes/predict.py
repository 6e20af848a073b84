"""From a model on a server to a memory prediction, before anything loads.

The bridge between the pure memory model (``probes/memmodel/``) and a real
server: read the model's shape from ``/api/show`` (verbose, for the tensor
list), the engine from ``/api/version``, and bind the engine's formulas to
them, so the context search, the quant step and ``oomvet plan`` all predict
with the same function. By hand: ``curl HOST/api/show -d '{"model": M,
"verbose": true}'`` and ``curl HOST/api/version``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from probes import memmodel
from common.errors import ProbeError
from probes.memmodel import Arch, Footprint


@dataclass(frozen=True)
class ModelShape:
    """What the memory model needs about one tag: its GGUF shape and the bytes
    of its weights on the device (``weights_source`` says where that came from:
    ``tensors`` from the verbose show, ``file`` the blob size from /api/tags)."""

    name: str
    arch: Arch
    weights_bytes: int
    weights_source: str
    level: str | None


def device_weights(tensors: list[dict], on_gpu: bool) -> int | None:
    """Weight bytes on the device that runs the model. On a GPU llama.cpp
    keeps the token embedding in host memory; a model without its own
    ``output.weight`` (tied embeddings) gets a copy of it on the GPU for the
    output layer, so the device holds the same bytes either way except when
    the output layer is separate."""
    total = memmodel.tensor_bytes(tensors)
    if total is None or not on_gpu:
        return total
    names = {t.get("name") for t in tensors}
    if "output.weight" in names:
        embd = [t for t in tensors if t.get("name") == "token_embd.weight"]
        return total - (memmodel.tensor_bytes(embd) or 0)
    return total


def read_shape(api, model: str, on_gpu: bool = False) -> ModelShape:
    """The shape of ``model`` from the server (raises ModelNotFoundError)."""
    shown = api.show(model, verbose=True)  # the tensor list and the tokenizer's arrays
    arch = Arch.from_model_info(shown.model_info)
    if not arch.vocab_size:
        tokens = shown.model_info.get("tokenizer.ggml.tokens")
        if isinstance(tokens, list) and tokens:
            arch = Arch(**{**arch.__dict__, "vocab_size": len(tokens)})
    weights = device_weights(shown.tensors, on_gpu)
    source = "tensors"
    if weights is None:
        size = api.file_size(model)
        if not size:
            raise ProbeError(f"no tensor list and no file size for {model} on {api.host}")
        weights, source = int(size), "file"
    return ModelShape(model, arch, int(weights), source, shown.quantization)


def server_engine(api) -> tuple[str, str]:
    """``(version, engine)`` of the server."""
    version = api.version()
    return version, memmodel.engine_for_version(version)


def predictor(shape: ModelShape, engine: str, kv_type: str = "f16",
              num_batch: int | None = None, flash_attention: bool | None = None) -> Callable[[int, int], Footprint]:
    """``(num_ctx, num_parallel) -> Footprint`` for this tag on this engine."""
    def footprint(num_ctx: int, num_parallel: int = 1) -> Footprint:
        return memmodel.footprint(engine, shape.arch, shape.weights_bytes, num_ctx, num_parallel, kv_type, num_batch,
                                  flash_attention=flash_attention)
    return footprint


_OFF = ("0", "false", "off", "no")


def flash_attention(engine: str, server_env: dict | None, on_gpu: bool = True) -> bool | None:
    """Whether the server runs with flash attention, from the settings read
    from it: the current engine passes ``--flash-attn auto`` unless
    ``OLLAMA_FLASH_ATTENTION`` turns it off (auto is on wherever llama.cpp
    supports it: the CPU and the GPUs Ollama builds for); the legacy runner
    only when ``OLLAMA_FLASH_ATTENTION`` turns it on, and only on a GPU (on
    the CPU v0.11.4 logs "flash attention enabled but not supported by gpu"
    and runs without it). None when the settings were not read: unknown,
    not assumed."""
    if server_env is None:
        return None
    raw = str(server_env.get("OLLAMA_FLASH_ATTENTION") or "").strip().lower()
    if engine == memmodel.ENGINE_LLAMA_SERVER:
        return raw not in _OFF
    return raw in ("1", "true", "on", "yes") and on_gpu


#: the largest error measured per engine (bench/README.md has the rows): ``buffers``,
#: the predicted buffers against what the engine logged loading real-size shapes of
#: four or five architectures (bench_arch.py, llama_buffers.py); ``peak``, the
#: predicted peak against the host memory of the model process with the context
#: filled, on the rig's three tags at 2048-8192 (bench_predict.py --fill 0.97)
EXPECTED_ERROR = {memmodel.ENGINE_LLAMA_SERVER: {"buffers": 0.01, "peak": 0.016},
                  memmodel.ENGINE_RUNNER: {"buffers": 0.005, "peak": 0.025}}


def no_prediction(shape: ModelShape, engine: str) -> str | None:
    """Why there is no prediction for this model on this engine (its
    architecture's compute buffer was never measured on it), or None."""
    if engine == memmodel.ENGINE_RUNNER and shape.arch.arch in memmodel.OLLAMA_ENGINE_ARCHS:
        return shape.arch.arch   # v0.11.4 runs it on its own engine, whose buffers were not measured
    if not memmodel.compute_checked(shape.arch):
        return shape.arch.arch
    return None


def vram_total(device) -> int:
    """Total GPU memory as Ollama sums it for its default context (0 on CPU)."""
    if device is None or getattr(device, "vendor", None) not in ("nvidia", "amd", "apple", "simulated"):
        return 0
    return int(getattr(device, "total_bytes", 0) or 0)


def default_ctx(engine: str, device, server_env: dict | None, trained_ctx: int | None) -> int:
    """The context a request without ``num_ctx`` gets on this server and card."""
    raw = (server_env or {}).get("OLLAMA_CONTEXT_LENGTH")
    try:
        env_ctx = int(raw) if raw else None
    except ValueError:
        env_ctx = None
    return memmodel.server_default_ctx(engine, vram_total(device), env_ctx, trained_ctx)
