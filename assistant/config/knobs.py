"""The method's vocabulary and the Ollama knob behind each value.

A config speaks the method's words (``max_context_len``, ``kv_cache``, ...);
Ollama has Modelfile PARAMETERs, request options and server variables.
:func:`ollama_section` is the one map from the first to the second, and the
lists here (the variables and options Ollama reads) are what every ``ollama:``
section and env file is checked against.
"""
from __future__ import annotations

from typing import Any, Mapping

from common.catalog import t
from common.envbool import env_on

VOCAB = ("model", "max_context_len", "max_batch_size", "max_concurrency",
         "quant_type", "kv_cache", "gpu_memory_utilization")

# Server variables Ollama v0.11.4 reads (envconfig/config.go, AsMap plus the
# Host/Models/... helpers). The one list every env file is checked against.
OLLAMA_ENV_VARS = frozenset({
    "OLLAMA_AUTH", "OLLAMA_CONTEXT_LENGTH", "OLLAMA_DEBUG", "OLLAMA_FLASH_ATTENTION",
    "OLLAMA_GPU_OVERHEAD", "OLLAMA_HOST", "OLLAMA_INTEL_GPU", "OLLAMA_KEEP_ALIVE",
    "OLLAMA_KV_CACHE_TYPE", "OLLAMA_LLM_LIBRARY", "OLLAMA_LOAD_TIMEOUT",
    "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_MAX_QUEUE", "OLLAMA_MODELS", "OLLAMA_MULTIUSER_CACHE",
    "OLLAMA_NEW_ENGINE", "OLLAMA_NOHISTORY", "OLLAMA_NOPRUNE", "OLLAMA_NUM_PARALLEL",
    "OLLAMA_ORIGINS", "OLLAMA_SCHED_SPREAD",
    # v0.34.4's envconfig adds these
    "OLLAMA_NO_CLOUD", "OLLAMA_IGPU_ENABLE", "OLLAMA_MAX_TRANSFER_STREAMS",
})

# Request options / Modelfile PARAMETERs (api/types.go Options + Runner, v0.11.4)
OLLAMA_OPTIONS = frozenset({
    "num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread",
    "num_keep", "seed", "num_predict", "top_k", "top_p", "min_p", "typical_p",
    "repeat_last_n", "temperature", "repeat_penalty", "presence_penalty",
    "frequency_penalty", "stop",
})

KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")


def ollama_section(values: Mapping[str, Any], server_env: Mapping[str, Any] | None = None,
                   total_bytes: int | None = None, lang: str | None = None) -> dict:
    """Map the values to Ollama's real knobs.

    ``server_env``: the server variables the config needs changed, as the
    session read the server (the ones already in effect left out); None when
    what is in effect is not known, and then the concurrency and the cache are written too.

    max_context_len -> PARAMETER num_ctx (and the request option);
    max_batch_size -> PARAMETER num_batch; max_concurrency -> OLLAMA_NUM_PARALLEL;
    quant_type -> the tag in FROM; kv_cache -> OLLAMA_KV_CACHE_TYPE (+ flash
    attention); gpu_memory_utilization has no Ollama knob: OLLAMA_GPU_OVERHEAD
    reserving (1-u) x total is the nearest, offered as optional.
    """
    env: dict[str, str] = {}
    for name, value in (server_env or {}).items():
        if name not in OLLAMA_ENV_VARS:
            raise ValueError(f"server_env names {name!r}, which is not an Ollama server variable")
        env[name] = env_text(value)
    ctx, batch = values.get("max_context_len"), values.get("max_batch_size")
    parallel = values.get("max_concurrency")
    kv = values.get("kv_cache") or "f16"
    util = values.get("gpu_memory_utilization")
    # the values are what was decided; the environment follows them
    if parallel is not None and (server_env is None or "OLLAMA_NUM_PARALLEL" in env):
        env["OLLAMA_NUM_PARALLEL"] = str(parallel)
    if server_env is None:  # nothing known in effect: the cache, and what a quantized one needs
        env["OLLAMA_KV_CACHE_TYPE"] = kv
        if kv != "f16":
            env["OLLAMA_FLASH_ATTENTION"] = "1"
    elif kv != "f16" and "OLLAMA_KV_CACHE_TYPE" in env:
        env["OLLAMA_KV_CACHE_TYPE"] = kv  # flash attention: in server_env where it is not already on or auto
    elif "OLLAMA_KV_CACHE_TYPE" in env:
        env["OLLAMA_KV_CACHE_TYPE"] = "f16"
    params = {k: v for k, v in (("num_ctx", ctx), ("num_batch", batch)) if v is not None}
    optional: dict[str, str] = {}
    if ctx is not None and "OLLAMA_CONTEXT_LENGTH" not in env:
        optional["OLLAMA_CONTEXT_LENGTH"] = str(ctx)
    overhead = gpu_overhead_bytes(util, total_bytes)
    if overhead is not None and "OLLAMA_GPU_OVERHEAD" not in env:
        optional["OLLAMA_GPU_OVERHEAD"] = str(overhead)
    model = values.get("model")
    # where each value goes, in the session's language (the catalog's knobs.*)
    knobs = {
        "model": t("knobs.model", lang, model=model),
        "max_context_len": t("knobs.max_context_len", lang, ctx=ctx),
        "max_batch_size": t("knobs.max_batch_size", lang, batch=batch),
        "max_concurrency": t("knobs.max_concurrency", lang, parallel=parallel),
        "quant_type": t("knobs.quant_type", lang, model=model, quant=values.get("quant_type")),
        "kv_cache": t("knobs.kv_cache", lang, kv=kv),
        "gpu_memory_utilization": (t("knobs.util_overhead", lang, overhead=overhead, util=util) if overhead is not None
                                   else t("knobs.util_none", lang, util=util) if util is not None
                                   else t("knobs.util_unmeasured", lang)),
    }
    return {
        "from": model,
        "parameters": dict(params),
        "options": dict(params),
        "env": env,
        "optional_env": optional,
        "knobs": knobs,
    }


def gpu_overhead_bytes(util: float | None, total_bytes: int | None) -> int | None:
    """Bytes ``OLLAMA_GPU_OVERHEAD`` must reserve so Ollama plans with ``util`` x total."""
    if util is None or not total_bytes or isinstance(util, bool) or not 0 < util <= 1:
        return None
    return int(round((1 - float(util)) * int(total_bytes)))


def env_text(value: Any) -> str:
    """An environment value as the server will read it (YAML true -> "1")."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def env_is_on(value: Any) -> bool:
    """How Ollama reads a boolean variable (a YAML true/false as the file writes it)."""
    return env_on(env_text(value))


def ollama_of(doc: Mapping[str, Any]) -> dict | None:
    """The ``ollama:`` section of a valid doc, derived from the values when absent."""
    if not doc.get("model"):
        return None
    section = doc.get("ollama")
    if isinstance(section, Mapping):
        return dict(section)
    device = (doc.get("evidence") or {}).get("device") or {}
    total = device.get("total") if device.get("vendor") != "cpu" else None
    return ollama_section({k: doc.get(k) for k in VOCAB}, {}, total)
