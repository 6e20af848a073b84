"""The simulated server's environment: the ``OLLAMA_*`` variables in force
(from the scenario, then ``restart(env)``), read into :class:`Settings` as
Ollama reads them, keep-alive durations, and request options."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from probes.serverinfo import engine_of

MIB = 1 << 20

FIT_TARGET_DEFAULT = 1024 * (1 << 20)   # llama.cpp's --fit-target default: 1024 MiB free per device


def is_current(version: str) -> bool:
    """Does this Ollama version run models in llama-server (v0.30 and later)?"""
    return engine_of(version) == "llama-server"


ENV_DEFAULTS = {
    "OLLAMA_NUM_PARALLEL": "1",
    "OLLAMA_FLASH_ATTENTION": "false",
    "OLLAMA_KV_CACHE_TYPE": "f16",
    "OLLAMA_CONTEXT_LENGTH": "4096",
    "OLLAMA_GPU_OVERHEAD": "0",
    "OLLAMA_KEEP_ALIVE": "5m",
}

_GO_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class SimError(Exception):
    """An answer Ollama gives as ``{"error": text}`` with an HTTP status."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status
        self.text = text


def parse_keep_alive(value: Any, default_s: float | None) -> float | None:
    """Seconds to keep a model loaded; None = forever. Numbers are seconds,
    text is a Go duration (``5m``, ``1h30m``); negative means forever."""
    if value is None or value == "":
        return default_s
    if isinstance(value, bool):
        raise SimError(400, f"Unsupported type: '{type(value).__name__}'")
    if isinstance(value, (int, float)):
        return None if value < 0 else float(int(value))
    text = str(value).strip()
    try:
        number = float(text)
        return None if number < 0 else number
    except ValueError:
        pass
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        raise SimError(400, f'time: invalid duration "{text}"')
    seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    return None if seconds < 0 else seconds


def _truthy(text: str) -> bool:
    return str(text).strip().lower() in ("1", "true", "t", "yes", "on")


@dataclass(frozen=True)
class Settings:
    """The server-wide knobs in force (from the scenario, then ``restart(env)``)."""

    num_parallel: int
    flash_attention: bool
    kv_cache_type: str         # as requested; see effective_kv_type
    context_length: int        # 0: not set (the current engine then picks by VRAM)
    gpu_overhead_bytes: int
    keep_alive_s: float | None
    flash_attention_mode: str = "off"   # auto / on / off
    fit_target_bytes: int = FIT_TARGET_DEFAULT
    sched_spread: bool = False          # OLLAMA_SCHED_SPREAD: always spread a model over every GPU
    max_loaded: int = 0                 # OLLAMA_MAX_LOADED_MODELS; 0: 3 per GPU, as Ollama sets it


def _int_option(options: Mapping[str, Any], key: str, default: int) -> int:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        raise SimError(400, f"option {key!r} must be of type integer")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SimError(400, f"option {key!r} must be of type integer") from None


def _env_line(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(env.items()))


class ServerEnv:
    """The environment part of :class:`oomsim.state.SimState`: reset from
    the scenario, read, and changed by a restart."""

    def reset_env(self) -> None:
        s = self.scenario.server
        self._env = {
            "OLLAMA_NUM_PARALLEL": str(s.num_parallel),
            "OLLAMA_FLASH_ATTENTION": "true" if s.flash_attention else "false",
            "OLLAMA_KV_CACHE_TYPE": s.kv_cache_type,
            "OLLAMA_CONTEXT_LENGTH": str(s.context_length if s.context_length is not None else 4096),
            "OLLAMA_GPU_OVERHEAD": str(s.gpu_overhead_bytes),
            "OLLAMA_KEEP_ALIVE": s.keep_alive,
        }
        if is_current(s.version):
            # unset on the current engine means: flash attention auto, context by VRAM tier
            if s.flash_attention is None:
                del self._env["OLLAMA_FLASH_ATTENTION"]
            if s.context_length is None:
                del self._env["OLLAMA_CONTEXT_LENGTH"]
            if s.fit_target_mib is not None:
                self._env["LLAMA_ARG_FIT_TARGET"] = str(s.fit_target_mib)
        if s.sched_spread:
            self._env["OLLAMA_SCHED_SPREAD"] = "1"
        if s.max_loaded_models:
            self._env["OLLAMA_MAX_LOADED_MODELS"] = str(s.max_loaded_models)

    def env(self) -> dict[str, str]:
        with self.lock:
            return dict(self._env)

    def restart(self, env: Mapping[str, str] | None = None) -> None:
        """Stop every runner and start again with ``env`` on top of the current
        settings (an empty value puts a variable back to Ollama's default)."""
        with self.lock:
            for key in list(self.runners):
                self._drop(key, "server restart")
            for key, value in (env or {}).items():
                key = str(key)
                if value is None or str(value) == "":
                    if key in ENV_DEFAULTS:
                        self._env[key] = ENV_DEFAULTS[key]
                    else:
                        self._env.pop(key, None)
                else:
                    self._env[key] = str(value)
            self.restarts += 1
            self._log(f'msg="server restarted" env="{_env_line(self._env)}"')

    def settings(self) -> Settings:
        env = self.env()

        def uint(key: str, default: int) -> int:
            try:
                value = int(str(env.get(key, default)).strip())
            except ValueError:
                self._log(f'level=WARN msg="invalid environment variable, using default" key={key}')
                return default
            return value if value >= 0 else default

        parallel = uint("OLLAMA_NUM_PARALLEL", 1) or 1
        try:
            keep = parse_keep_alive(env.get("OLLAMA_KEEP_ALIVE", "5m"), 300.0)
        except SimError:
            keep = 300.0
        current = is_current(self.scenario.server.version)
        fa_raw = env.get("OLLAMA_FLASH_ATTENTION")
        if fa_raw is None or str(fa_raw).strip() == "":
            fa_mode = "auto" if current else "off"
        else:
            fa_mode = "on" if _truthy(fa_raw) else "off"
        return Settings(
            num_parallel=parallel,
            flash_attention=fa_mode != "off",
            kv_cache_type=str(env.get("OLLAMA_KV_CACHE_TYPE", "f16")).strip().lower() or "f16",
            context_length=uint("OLLAMA_CONTEXT_LENGTH", 0 if current else 4096) or (0 if current else 4096),
            gpu_overhead_bytes=uint("OLLAMA_GPU_OVERHEAD", 0),
            keep_alive_s=keep,
            flash_attention_mode=fa_mode,
            fit_target_bytes=uint("LLAMA_ARG_FIT_TARGET", FIT_TARGET_DEFAULT // MIB) * MIB,
            sched_spread=_truthy(env.get("OLLAMA_SCHED_SPREAD", "")),
            max_loaded=uint("OLLAMA_MAX_LOADED_MODELS", 0),
        )
