"""Configs: the knobs the method moves, and the configs the session measures.

A config is a plain dict of :data:`CONFIG_KEYS`. The functions here build the
configs a session holds (the baseline's, the largest tier that fit) and compare
them the way the method counts changes (one knob at a time). They read the
session state and never write it.
"""
from __future__ import annotations

from rules import thresholds

#: the knobs of a config, in the method's vocabulary
KNOB_KEYS = ("model", "max_context_len", "max_batch_size", "max_concurrency", "quant_type", "kv_cache")
CONFIG_KEYS = KNOB_KEYS + ("gpu_memory_utilization",)
#: how the method counts knobs: a tag and its quantization level move together,
#: and the utilization is a reading, not a knob
KNOB_OF_KEY = {
    "model": "quant_type",
    "quant_type": "quant_type",
    "max_context_len": "max_context_len",
    "max_batch_size": "max_batch_size",
    "max_concurrency": "max_concurrency",
    "kv_cache": "kv_cache",
}
#: config key -> the Ollama-side knob a backend probe changes
PROBE_KNOB = {"max_batch_size": "num_batch", "max_concurrency": "num_parallel", "kv_cache": "kv_cache_type"}
#: config key -> the remedy that changes it
REMEDY_OF_KEY = {"max_context_len": "context", "quant_type": "quant", "model": "quant",
                 "max_batch_size": "backend", "max_concurrency": "backend", "kv_cache": "backend"}


def full_config(cfg: dict | None) -> dict | None:
    if not cfg:
        return None
    return {k: cfg.get(k) for k in CONFIG_KEYS}


def config_key(cfg: dict) -> str:
    return "|".join(str(cfg.get(k)) for k in KNOB_KEYS)


def knobs_changed(old: dict, new: dict) -> set[str]:
    return {KNOB_OF_KEY[k] for k in KNOB_KEYS if old.get(k) != new.get(k)}


def base_config(st: dict) -> dict:
    """The config the next change is measured against: the current config, or
    the measured setup that failed while a problem is open against it (the
    baseline that did not fit, the wanted context, the wanted concurrency)."""
    return st["reference"] if st["against_reference"] or not st["has_config"] else st["config"]


def current_ctx(st: dict) -> int:
    return int(base_config(st).get("max_context_len") or thresholds.CONSERVATIVE_NUM_CTX)


def baseline_ctx(st: dict) -> int:
    want = st["want_ctx"]
    return min(thresholds.CONSERVATIVE_NUM_CTX, want) if want else thresholds.CONSERVATIVE_NUM_CTX


def utilization(st: dict, peak: int | None) -> float | None:
    """The share of the GPU a measured peak takes (``None`` unmeasured, or
    no GPU: a share of host memory is no ``gpu_memory_utilization``)."""
    return thresholds.utilization(peak, st["total"] or None) if st["gpu"] else None


def baseline_config(st: dict) -> dict:
    """The config the baseline load ran at, with the readings it produced."""
    reading = st["load_reading"]
    return {
        "model": reading.get("model") or st["model"],
        "max_context_len": reading.get("num_ctx") or baseline_ctx(st),
        "max_batch_size": reading.get("num_batch") or thresholds.CONSERVATIVE_NUM_BATCH,
        "max_concurrency": reading.get("num_parallel") or thresholds.CONSERVATIVE_NUM_PARALLEL,
        "quant_type": reading.get("level"),
        # the cache type the user's server runs with, as read; f16 where it was not read
        "kv_cache": st.get("srv_kv") or thresholds.DEFAULT_KV_CACHE,
        "gpu_memory_utilization": utilization(st, reading.get("peak")),
    }


def best_tier_config(st: dict) -> dict | None:
    """The largest context measured within the limit, as a config (a finding,
    not a recommendation: it was measured, never retested)."""
    if not st["tier_best_ctx"] or not st["has_config"]:
        return None
    cfg = dict(st["config"])
    cfg["max_context_len"] = st["tier_best_ctx"]
    cfg["gpu_memory_utilization"] = utilization(st, st["tier_best_peak"])
    return cfg


def unmet_wishes(st: dict, cfg: dict | None) -> list[str]:
    """What the user asked for that the config does not give."""
    if not cfg:
        return []
    unmet = []
    if st["want_ctx"] and (cfg.get("max_context_len") or 0) < st["want_ctx"]:
        unmet.append("max_context_len")
    if st["want_parallel"] > 1 and (cfg.get("max_concurrency") or 1) < st["want_parallel"]:
        unmet.append("max_concurrency")
    return unmet
