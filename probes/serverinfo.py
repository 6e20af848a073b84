"""Which server oomvet talks to, and what it does with a request: the
``server`` fact.

From what can be read without guessing: ``/api/version``; the server's
``OLLAMA_*``/``LLAMA_ARG_*`` environment when oomvet owns the server (the
rig, the simulator) or the user told it; the server log (the model process's
command line, the VRAM-tier line); the process list; and the total VRAM of
this machine's devices. It answers the engine (legacy ``runner`` or
``llama-server``), the context a request without ``num_ctx`` gets and why,
flash attention, KV cache type, parallel slots, the fit target, whether
``/api/ps`` figures are estimates or measurements, and which knobs exist on
that version (:func:`knobs_for`, data the rules read). A value it cannot tell
is None with the reason in ``unknown``.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Collection, Mapping, Sequence

from common.envbool import env_on
from common.errors import ProbeError
from probes.serverlog import LogDigest, parse_cmdline

MIB = 1 << 20
GIB = 1 << 30
FIT_TARGET_DEFAULT = 1024 * MIB


def version_tuple(version: str | None) -> tuple[int, int, int] | None:
    nums = re.findall(r"\d+", str(version or ""))[:3]
    if len(nums) < 2:
        return None
    return tuple(int(n) for n in (nums + ["0"])[:3])  # type: ignore[return-value]


def engine_of(version: str | None) -> str | None:
    """llama-server from v0.30 on (every GGUF model), the in-process runner before."""
    v = version_tuple(version)
    if v is None or v == (0, 0, 0):  # a dev build reports 0.0.0: the version says nothing
        return None
    return "llama-server" if v[:2] >= (0, 30) else "runner"


def vram_tier(total_vram: int) -> int:
    """v0.30+ default context from total VRAM (minus OLLAMA_GPU_OVERHEAD): 256k / 32k / 4k."""
    if total_vram >= 47 * GIB:
        return 262144
    if total_vram >= 23 * GIB:
        return 32768
    return 4096


def knobs_for(engine: str | None) -> dict:
    """What each server knob does on this engine: ``{knob: {"effect": ..., "note": ...}}``.
    ``effect``: ``yes`` / ``none`` (exists, changes nothing for GGUF) / ``diagnostic``
    (never a recommended setting) / ``needs_fa``."""
    common = {
        "OLLAMA_NUM_PARALLEL": {"effect": "yes", "note": "multiplies the KV cache (num_ctx x parallel)"},
        "OLLAMA_CONTEXT_LENGTH": {"effect": "yes", "note": "the context of a request without num_ctx"},
        "OLLAMA_MAX_LOADED_MODELS": {"effect": "yes", "note": "how many models stay loaded together"},
        "num_ctx": {"effect": "yes", "note": "per request or Modelfile PARAMETER"},
        "num_gpu": {"effect": "yes", "note": "layers on the GPU"},
        "num_batch": {"effect": "yes", "note": "compute buffer size"},
    }
    if engine == "llama-server":
        return {**common,
                "OLLAMA_KV_CACHE_TYPE": {"effect": "needs_fa", "note": "passed to llama-server as is; a quantized "
                                         "cache fails the load when OLLAMA_FLASH_ATTENTION=0"},
                "OLLAMA_FLASH_ATTENTION": {"effect": "yes", "note": "unset = auto; 0 forces off"},
                "LLAMA_ARG_FIT_TARGET": {"effect": "yes", "note": "MiB fit leaves free per device (default 1024)"},
                "OLLAMA_GPU_OVERHEAD": {"effect": "none", "note": "not passed to llama-server; only lowers the VRAM "
                                        "used to pick the default context"},
                "OLLAMA_NEW_ESTIMATES": {"effect": "none", "note": "removed in v0.12"},
                "LLAMA_ARG_KV_OFFLOAD": {"effect": "diagnostic", "note": "false keeps the KV cache in host memory "
                                         "(llama.cpp --no-kv-offload): shows the weights alone; slow"},
                "num_gpu": {"effect": "yes", "note": "forces -ngl and turns fit off"}}
    if engine == "runner":
        return {**common,
                "OLLAMA_KV_CACHE_TYPE": {"effect": "needs_fa", "note": "ignored (f16 kept, a WARN logged) without "
                                         "flash attention; no flash attention on CPU at v0.11.4"},
                "OLLAMA_FLASH_ATTENTION": {"effect": "yes", "note": "default off"},
                "OLLAMA_GPU_OVERHEAD": {"effect": "yes", "note": "bytes reserved per GPU in the estimate"},
                "LLAMA_ARG_FIT_TARGET": {"effect": "none", "note": "no llama.cpp fit in the in-process runner"}}
    return dict(common)


def server_fact(version: str | None, *, env: Mapping[str, str] | None = None, log: LogDigest | None = None,
                vram_total: int | None = None, local: bool | None = None, modelfile_num_ctx: int | None = None,
                process_cmdlines: Sequence[str] = (), unknown_version_why: str = "",
                settings_from: str | None = None, known: Collection[str] | None = None,
                sources: Mapping[str, str] | None = None) -> dict:
    """The ``server`` fact (rules/facts.py). ``env``: the server's environment
    when known (None: a server oomvet did not start and was not told about);
    ``log``: a digest of its log (the VRAM-tier line, a model start);
    ``vram_total``: bytes of all GPUs of the machine serving (0 on CPU-only;
    None when unknown, e.g. a remote server); ``process_cmdlines``: command
    lines of this machine's model processes, when that server is local;
    ``known``: the keys ``env`` covers when it is not the whole environment
    (read from a model process's command line); ``sources``: where each
    setting was read (``environ``, ``cmdline``, ``log``, ``version default``),
    kept in the fact."""
    unknown: dict[str, str] = {}
    engine = engine_of(version)
    engine_why = f"version {version}" if engine else None
    seen = [parse_cmdline(c).get("engine") for c in process_cmdlines]
    seen = [e for e in seen if e] + ([log.engine] if log is not None and log.engine else [])
    if seen:
        if engine and seen[-1] != engine:
            engine_why = f"version {version} says {engine}, but its model process is {seen[-1]}"
        else:
            engine_why = (engine_why + " and its model process" if engine_why else "its model process")
        engine = seen[-1]
    if engine is None:
        unknown["engine"] = unknown_version_why or f"version {version!r} does not tell, and no model process seen"
    if version is None:
        unknown["version"] = unknown_version_why or "/api/version did not answer"

    env = dict(env) if env is not None else None
    cmd = (log.cmdline if log is not None else None) or {}

    def knows(key: str) -> bool:
        return env is not None and (known is None or key in known)

    def from_env(key: str) -> str | None:
        if not knows(key):
            return None
        value = env.get(key)
        return None if value is None or str(value).strip() == "" else str(value).strip()

    # the context a request without num_ctx gets
    default_ctx, why = None, None
    ctx_env = from_env("OLLAMA_CONTEXT_LENGTH")
    if modelfile_num_ctx:
        default_ctx, why = int(modelfile_num_ctx), "modelfile"
    elif ctx_env and ctx_env.isdigit() and int(ctx_env) > 0:
        default_ctx, why = int(ctx_env), "env"
    elif engine == "llama-server":
        logged = (log.default_ctx or {}).get("default_num_ctx") if log is not None else None
        if logged:
            default_ctx, why = int(logged), "vram_tier"
        elif knows("OLLAMA_CONTEXT_LENGTH") and knows("OLLAMA_GPU_OVERHEAD") and vram_total is not None:
            overhead = _int_env(from_env("OLLAMA_GPU_OVERHEAD")) or 0
            default_ctx, why = vram_tier(max(vram_total - overhead, 0)), "vram_tier"
        else:
            unknown["default_ctx"] = ("the server's OLLAMA_CONTEXT_LENGTH is not known"
                                      if not knows("OLLAMA_CONTEXT_LENGTH")
                                      else "the total VRAM of the serving machine is not known")
    elif engine == "runner":
        v = version_tuple(version)
        if not knows("OLLAMA_CONTEXT_LENGTH"):
            unknown["default_ctx"] = "the server's OLLAMA_CONTEXT_LENGTH is not known"
        elif v is not None and v[:2] >= (0, 11):
            default_ctx, why = 4096, "legacy_default"
        else:
            unknown["default_ctx"] = f"the default context of version {version} is not recorded here"
    else:
        unknown["default_ctx"] = "the engine is not known"

    # flash attention
    fa = {"on": "on", "off": "off", "auto": "auto"}.get(str(cmd.get("flash_attn") or ""))
    fa_env = from_env("OLLAMA_FLASH_ATTENTION")
    if fa is None and knows("OLLAMA_FLASH_ATTENTION"):
        if fa_env is not None:
            fa = "on" if env_on(fa_env) else "off"
        elif engine is not None:
            fa = "auto" if engine == "llama-server" else "off"
    if fa is None:
        unknown["flash_attention"] = "neither the server's environment nor a model start in its log is known"

    kv = cmd.get("cache_type_k") or from_env("OLLAMA_KV_CACHE_TYPE")
    if kv is None and (knows("OLLAMA_KV_CACHE_TYPE") or cmd):
        kv = "f16"
    if kv is None:
        unknown["kv_cache_type"] = "the server's OLLAMA_KV_CACHE_TYPE is not known"
    kv_asked = None
    if engine == "runner" and fa == "off" and kv and str(kv).lower() != "f16":
        # the legacy runner keeps an f16 cache without flash attention (a WARN in its log)
        kv_asked, kv = str(kv).lower(), "f16"
    parallel = cmd.get("num_parallel") or _int_env(from_env("OLLAMA_NUM_PARALLEL"))
    if parallel is None and knows("OLLAMA_NUM_PARALLEL"):
        parallel = 1
    if parallel is None:
        unknown["num_parallel"] = "the server's OLLAMA_NUM_PARALLEL is not known"

    fit_target = None
    if engine == "llama-server":
        mib = _int_env(from_env("LLAMA_ARG_FIT_TARGET"))
        if mib is not None:
            fit_target = mib * MIB
        elif knows("LLAMA_ARG_FIT_TARGET"):
            fit_target = FIT_TARGET_DEFAULT
        else:
            unknown["fit_target"] = "the server's LLAMA_ARG_FIT_TARGET is not known (llama.cpp's default is 1024 MiB)"
    else:
        unknown["fit_target"] = "no llama.cpp fit on this engine" if engine == "runner" else "the engine is not known"
    if local is None:
        unknown["local"] = "not checked"

    return {"kind": "server", "version": version, "engine": engine, "engine_why": engine_why,
            "default_ctx": default_ctx, "default_ctx_why": why, "vram_total": vram_total,
            "flash_attention": fa, "kv_cache_type": str(kv).lower() if kv else None, "kv_cache_asked": kv_asked,
            "num_parallel": parallel,
            "fit_target": fit_target, "gpu_overhead": _int_env(from_env("OLLAMA_GPU_OVERHEAD")),
            "local": local, "sizes": {"llama-server": "measured", "runner": "estimate"}.get(engine or ""),
            "knobs": knobs_for(engine), "unknown": unknown,
            "settings_from": settings_from if env is not None else None,
            "settings_sources": dict(sources) if sources else None}


def read_server(version_of: Callable[[], str], **kw: Any) -> dict:
    """:func:`server_fact` with the version read now (``Ollama.version``); a
    server that does not answer gives version None and says so."""
    try:
        version = version_of()
    except ProbeError as exc:  # unreachable or refused: "unknown", with its text
        return server_fact(None, unknown_version_why=f"/api/version failed: {exc}", **kw)
    return server_fact(version, **kw)


def _int_env(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None
