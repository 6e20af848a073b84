"""What a valid ``oomvet.yaml`` holds, checked by hand, one message per problem.

:func:`problems_of` walks a parsed doc and says every problem with the dotted
path of its key, so the loader can put the line number in front; the messages
(``assistant/messages/config.yaml``) name the key, what was found and what is
expected. The checks are hand-written rather than a schema library's: the
values must agree with each other and with the ``ollama:`` section, and one
bad value gives one line, not one per check that follows from it.
"""
from __future__ import annotations

import difflib
import math
import re
from typing import Any, Mapping

from assistant.config.knobs import KV_CACHE_TYPES, OLLAMA_ENV_VARS, OLLAMA_OPTIONS, VOCAB, env_is_on, env_text
from common.catalog import t
from rules.facts import CAUSES

TOP_KEYS = VOCAB + ("verified", "unverified", "fits", "unmet", "ollama", "diagnosis", "steps", "evidence", "generated")
REQUIRED = ("model", "max_context_len", "max_batch_size", "max_concurrency", "quant_type", "kv_cache", "verified")
OLLAMA_KEYS = ("from", "parameters", "options", "env", "optional_env", "knobs")
GENERATED_KEYS = ("by", "at", "host")
DIAGNOSIS_KEYS = ("cause", "summary", "advice", "advice_key")
EVIDENCE_SIZES = ("limit",)

# GGUF file types as Ollama reports them in details.quantization_level, plus the
# names other backends' tags use for the same idea (the method speaks of both).
QUANT_TYPES = frozenset({
    "F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1",
    "Q4_K_M", "Q4_K_S", "Q4_0", "Q4_1", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K", "Q2_K_S",
    "IQ4_NL", "IQ4_XS", "IQ3_M", "IQ3_S", "IQ3_XS", "IQ3_XXS", "IQ2_M", "IQ2_S",
    "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
    "INT8", "INT4", "FP8", "FP4", "8BIT", "4BIT",
})

# plausible upper bounds: beyond these a value is a typo, not a setting
LIMITS = {
    "max_context_len": (1, 1 << 24),
    "max_batch_size": (1, 1 << 20),
    "max_concurrency": (1, 4096),
}

_MODEL_NAME = re.compile(
    r"^(?:\w[\w.:-]*/)?(?:\w[\w-]*/)?\w[\w.-]{0,79}(?::\w[\w.-]{0,79})?$", re.ASCII)


# ---------------------------------------------------------------- checking

def check_config(doc: Any, lang: str | None = None) -> list[str]:
    """Every problem in a parsed doc, one line each (empty = valid)."""
    return [message for _, message in problems_of(doc, lang)]


def problems_of(doc: Any, lang: str | None) -> list[tuple[str, str]]:
    """``(dotted key path, message)`` for every problem, in the order a reader
    meets them: the shape of the top level, the values, then each section.
    The path lets the loader point a message at its line."""
    out: list[tuple[str, str]] = []

    def bad(path: str, message_key: str, /, **values) -> None:
        out.append((path, t(message_key, lang, **values)))

    if not isinstance(doc, Mapping):
        bad("", "config.not_mapping", found=_kind(doc))
        return out
    _unknown_keys(doc, "", TOP_KEYS, bad, lang)
    for key in REQUIRED:
        if key not in doc:
            bad("", "config.missing_key", field=key)
    fits = _check_verdict(doc, bad)
    _check_values(doc, fits, bad)
    if doc.get("ollama") is not None:
        # compare the ollama section only with values that are themselves fine:
        # one bad value should give one line, not one per knob that follows it
        flagged = {path for path, _ in out}
        _check_ollama(doc, {k: (None if k in flagged else doc.get(k)) for k in VOCAB}, bad, lang)
    _check_diagnosis(doc.get("diagnosis"), bad, lang)
    _check_steps(doc.get("steps"), bad)
    _check_evidence(doc.get("evidence"), bad)
    gen = _section(doc.get("generated"), "generated", bad)
    if gen is not None:
        _unknown_keys(gen, "generated", GENERATED_KEYS, bad, lang)
    return out


def _check_verdict(doc: Mapping, bad) -> Any:
    """``fits``, ``verified``, ``unverified`` and ``unmet``, which must agree;
    returns ``fits`` as the value checks read it (True when not a bool)."""
    fits = doc.get("fits", True)
    if "fits" in doc and not isinstance(fits, bool):
        bad("fits", "config.bool_type", field="fits", value=fits)
        fits = True
    verified = doc.get("verified")
    if "verified" in doc and not isinstance(verified, bool):
        bad("verified", "config.bool_type", field="verified", value=verified)
    elif verified is True and fits is False:
        bad("verified", "config.verified_not_fits")
    reason = doc.get("unverified")
    if reason is not None and not isinstance(reason, str):
        bad("unverified", "config.str_type", field="unverified", value=reason)
    elif verified is True and reason:
        bad("unverified", "config.verified_with_reason")
    unmet = doc.get("unmet")
    if unmet is not None and (not isinstance(unmet, list) or any(k not in VOCAB for k in unmet)):
        bad("unmet", "config.unmet_type", value=unmet)
    return fits


def _check_values(doc: Mapping, fits: Any, bad) -> None:
    """The values in the method's vocabulary."""

    def need(key: str) -> bool:
        """True when there is a value to check; flags an empty one a fitting config needs."""
        if key not in doc:
            return False
        if doc[key] is None:
            if fits and key != "gpu_memory_utilization":
                bad(key, "config.value_missing", field=key)
            return False
        return True

    if need("model"):
        model = doc["model"]
        if not isinstance(model, str) or not _MODEL_NAME.match(model):
            bad("model", "config.model_bad", value=model)
    for key in ("max_context_len", "max_batch_size", "max_concurrency"):
        if need(key):
            _check_int(doc[key], key, bad)
    if need("quant_type"):
        quant = doc["quant_type"]
        if not isinstance(quant, str) or quant.upper() not in QUANT_TYPES:
            bad("quant_type", "config.quant_unknown", value=quant)
    if need("kv_cache") and doc["kv_cache"] not in KV_CACHE_TYPES:
        bad("kv_cache", "config.kv_unknown", value=doc["kv_cache"])
    if need("gpu_memory_utilization"):
        util = doc["gpu_memory_utilization"]
        if isinstance(util, bool) or not isinstance(util, (int, float)) or math.isnan(util):
            bad("gpu_memory_utilization", "config.util_type", value=util)
        elif not 0 < util <= 1:
            bad("gpu_memory_utilization", "config.util_range", value=util)


def _check_int(value: Any, key: str, bad) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        bad(key, "config.int_type", field=key, value=value)
        return
    lo, hi = LIMITS[key]
    if not lo <= value <= hi:
        bad(key, "config.int_range", field=key, lo=lo, hi=hi, value=value)


def _check_ollama(doc: Mapping, values: Mapping, bad, lang) -> None:
    section = _section(doc["ollama"], "ollama", bad)
    if section is None:
        return
    _unknown_keys(section, "ollama", OLLAMA_KEYS, bad, lang)
    model = values.get("model")
    if "from" in section and isinstance(model, str) and section["from"] != model:
        bad("ollama.from", "config.from_mismatch", got=section["from"], want=model)
    for part in ("parameters", "options"):
        where = f"ollama.{part}"
        params = _section(section.get(part), where, bad)
        if params is None:
            continue
        for name in params:
            if name not in OLLAMA_OPTIONS:
                bad(f"{where}.{name}", "config.param_unknown", field=where, name=name,
                    suggest=_suggest(name, OLLAMA_OPTIONS, lang))
        for name, vocab in (("num_ctx", "max_context_len"), ("num_batch", "max_batch_size")):
            want = values.get(vocab)
            if name in params and want is not None and params[name] != want:
                bad(f"{where}.{name}", "config.param_mismatch", field=where, name=name,
                    got=params[name], vocab=vocab, want=want)
    envs: Mapping = {}
    for part in ("env", "optional_env"):
        where = f"ollama.{part}"
        env = _section(section.get(part), where, bad)
        if env is None:
            continue
        for name, value in env.items():
            if name not in OLLAMA_ENV_VARS:
                bad(f"{where}.{name}", "config.env_unknown", field=where, name=name,
                    suggest=_suggest(name, OLLAMA_ENV_VARS, lang))
            elif value is not None and not isinstance(value, (str, int, float, bool)):
                bad(f"{where}.{name}", "config.env_value", field=where, name=name, found=_kind(value))
        if part == "env":
            envs = env
    _check_env_agrees(envs, values, bad)
    knobs = _section(section.get("knobs"), "ollama.knobs", bad)
    for name, text in (knobs or {}).items():
        if name not in VOCAB:
            bad(f"ollama.knobs.{name}", "config.unknown_key", field=f"ollama.knobs.{name}",
                suggest=_suggest(name, VOCAB, lang))
        elif not isinstance(text, str):
            bad(f"ollama.knobs.{name}", "config.knob_text", name=name, found=_kind(text))


def _check_env_agrees(envs: Mapping, values: Mapping, bad) -> None:
    """The server variables that carry a value must say what the value says."""
    parallel = values.get("max_concurrency")
    if "OLLAMA_NUM_PARALLEL" in envs and isinstance(parallel, int) \
            and env_text(envs["OLLAMA_NUM_PARALLEL"]) != str(parallel):
        bad("ollama.env.OLLAMA_NUM_PARALLEL", "config.env_mismatch", name="OLLAMA_NUM_PARALLEL",
            got=env_text(envs["OLLAMA_NUM_PARALLEL"]), vocab="max_concurrency", want=str(parallel))
    kv = values.get("kv_cache")
    if kv in KV_CACHE_TYPES:
        have = envs.get("OLLAMA_KV_CACHE_TYPE")
        if have is not None and env_text(have) != kv:
            bad("ollama.env.OLLAMA_KV_CACHE_TYPE", "config.env_mismatch", name="OLLAMA_KV_CACHE_TYPE",
                got=env_text(have), vocab="kv_cache", want=kv)
        elif kv != "f16" and have is None:
            bad("ollama.env", "config.kv_env_missing", value=kv)
        elif kv != "f16" and not env_is_on(envs.get("OLLAMA_FLASH_ATTENTION", "")):
            bad("ollama.env", "config.kv_needs_fa", value=kv)


def _check_diagnosis(diagnosis: Any, bad, lang) -> None:
    diagnosis = _section(diagnosis, "diagnosis", bad)
    if diagnosis is None:
        return
    _unknown_keys(diagnosis, "diagnosis", DIAGNOSIS_KEYS, bad, lang)
    cause = diagnosis.get("cause")
    if cause is not None and cause not in CAUSES:
        bad("diagnosis.cause", "config.cause_unknown", choices=", ".join(CAUSES), value=cause)
    for key in ("summary", "advice"):
        value = diagnosis.get(key)
        if value is not None and not isinstance(value, str):
            bad(f"diagnosis.{key}", "config.text_type", field=f"diagnosis.{key}", found=_kind(value))


def _check_steps(steps: Any, bad) -> None:
    if steps is None:
        return
    if not isinstance(steps, list):
        bad("steps", "config.list_type", field="steps", found=_kind(steps))
        return
    for i, step in enumerate(steps):
        if not (isinstance(step, Mapping) and isinstance(step.get("n"), int)
                and not isinstance(step.get("n"), bool)
                and isinstance(step.get("action"), str) and step.get("action")):
            bad("steps", "config.step_bad", i=i, found=_kind(step) if not isinstance(step, Mapping)
                else "{" + ", ".join(map(str, step)) + "}")


def _check_evidence(evidence: Any, bad) -> None:
    evidence = _section(evidence, "evidence", bad)
    if evidence is None:
        return
    for key in EVIDENCE_SIZES:
        _check_size(evidence.get(key), f"evidence.{key}", bad)
    readings = _section(evidence.get("readings"), "evidence.readings", bad)
    for name, value in (readings or {}).items():
        _check_size(value, f"evidence.readings.{name}", bad)
    device = _section(evidence.get("device"), "evidence.device", bad)
    if device is not None:
        _check_size(device.get("total"), "evidence.device.total", bad)


# ---------------------------------------------------------------- shared by the checks

def _section(value: Any, path: str, bad) -> Mapping | None:
    """``value`` when it is a mapping; None when absent, or (flagged) when it is anything else."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        bad(path, "config.section_type", field=path, found=_kind(value))
        return None
    return value


def _unknown_keys(mapping: Mapping, prefix: str, choices, bad, lang) -> None:
    """Flag each key of ``mapping`` (the section at ``prefix``) not in ``choices``, with the nearest one."""
    for key in mapping:
        if key not in choices:
            path = f"{prefix}.{key}" if prefix else str(key)
            bad(path, "config.unknown_key", field=path if prefix else key, suggest=_suggest(key, choices, lang))


def _check_size(value: Any, path: str, bad) -> None:
    if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        bad(path, "config.size_bad", field=path, value=value)


def _suggest(name: Any, choices, lang) -> str:
    close = difflib.get_close_matches(str(name), sorted(choices), n=1, cutoff=0.6)
    return t("config.did_you_mean", lang, name=close[0]) if close else ""


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, str):
        return f"the text {value!r}"
    return f"{type(value).__name__} {value!r}"
