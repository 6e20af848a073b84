"""The recommended config, ``oomvet.yaml``: built from a session, written, read and checked.

The session loop hands over a plain "session result"; :func:`build_config`
turns it into the document a user keeps: the values in the vocabulary of the
method (``model``, ``max_context_len``, ...), an ``ollama:`` section naming
the real knob behind each value, the diagnosis, the steps and the evidence.
:func:`dump_config` writes it with a comment header, :func:`load_config` reads
one back and refuses anything malformed with one clear line, and
:func:`check_config` lists every problem (``oomvet check``). The ``ollama:``
section is derived from the values, so a hand-written config without it can
still be applied; when present, it must agree with them.
"""
from __future__ import annotations

import datetime as _dt
import difflib
import math
import numbers
import os
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from assistant import __version__
from assistant.errors import UsageError
from assistant.i18n import catalog, t
from rules.facts import CAUSES

VOCAB = ("model", "max_context_len", "max_batch_size", "max_concurrency",
         "quant_type", "kv_cache", "gpu_memory_utilization")
TOP_KEYS = VOCAB + ("verified", "unverified", "fits", "unmet", "ollama", "diagnosis", "steps", "evidence", "generated")
REQUIRED = ("model", "max_context_len", "max_batch_size", "max_concurrency", "quant_type", "kv_cache", "verified")
OLLAMA_KEYS = ("from", "parameters", "options", "env", "optional_env", "knobs")
GENERATED_KEYS = ("by", "at", "host")
DIAGNOSIS_KEYS = ("cause", "summary", "advice", "advice_key")
EVIDENCE_SIZES = ("limit",)

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
_FALSE = ("", "0", "f", "F", "false", "FALSE", "False")

MSG = catalog("config")


class ConfigError(UsageError):
    """An oomvet.yaml that cannot be read or does not hold a valid config; one line, exit 2."""


# ---------------------------------------------------------------- building

def build_config(result: Mapping[str, Any]) -> dict:
    """The ``oomvet.yaml`` document for a session result (see the module doc).

    The values are what the session decided; the ``ollama:`` section is derived
    from them (the session's ``server_env`` supplies any other server setting).
    Raises ValueError when the result itself breaks the contract, so the session
    never writes a file that ``oomvet check`` would refuse.
    """
    config = result.get("config")
    values = {key: _plain((config or {}).get(key)) for key in VOCAB}
    fits = bool(result.get("fits", config is not None))
    evidence = _plain(result.get("evidence") or {})
    device = (evidence.get("device") or {}) if isinstance(evidence, dict) else {}
    # OLLAMA_GPU_OVERHEAD reserves GPU memory; on a CPU-only machine there is none to reserve
    total = device.get("total") if isinstance(device, dict) and device.get("vendor") != "cpu" else None
    doc: dict[str, Any] = dict(values)
    doc["verified"] = bool(result.get("verified"))
    doc["unverified"] = None if doc["verified"] else (result.get("unverified") or "no stability retest passed")
    doc["fits"] = fits
    doc["unmet"] = list(result.get("unmet") or [])
    doc["ollama"] = (ollama_section(values, result.get("server_env") or {}, total)
                     if config and values.get("model") else None)
    diagnosis = _plain(result.get("diagnosis") or {})
    doc["diagnosis"] = {key: diagnosis.get(key) for key in DIAGNOSIS_KEYS}
    doc["steps"] = _plain(list(result.get("steps") or []))
    doc["evidence"] = evidence
    doc["generated"] = {
        "by": str(result.get("tool") or f"oomvet {__version__}"),
        "at": str(result.get("created") or _now()),
        "host": result.get("host"),
    }
    problems = check_config(doc, lang="en")
    if problems:
        raise ValueError("session result gives an invalid config: " + "; ".join(problems))
    return doc


def ollama_section(values: Mapping[str, Any], server_env: Mapping[str, Any] | None = None,
                   total_bytes: int | None = None) -> dict:
    """Map the values to Ollama's real knobs.

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
    if parallel is not None:
        env["OLLAMA_NUM_PARALLEL"] = str(parallel)
    if kv != "f16":
        env["OLLAMA_KV_CACHE_TYPE"] = kv
        env["OLLAMA_FLASH_ATTENTION"] = "1"
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
    knobs = {
        "model": f"FROM {model} in the Modelfile; the model name in every request",
        "max_context_len": (f"Modelfile PARAMETER num_ctx {ctx}; request option num_ctx={ctx}; "
                            f"server default for requests without num_ctx: OLLAMA_CONTEXT_LENGTH={ctx} (optional)"),
        "max_batch_size": f"Modelfile PARAMETER num_batch {batch}; request option num_batch={batch}",
        "max_concurrency": (f"server env OLLAMA_NUM_PARALLEL={parallel} (restart the server); "
                            f"the KV cache is allocated for num_ctx x OLLAMA_NUM_PARALLEL"),
        "quant_type": f"the tag in FROM ({model}, quantization {values.get('quant_type')})",
        "kv_cache": (f"server env OLLAMA_KV_CACHE_TYPE={kv} (restart the server); types other than f16 "
                     f"need OLLAMA_FLASH_ATTENTION=1 and a GPU with flash attention"),
        "gpu_memory_utilization": (
            "no direct Ollama knob; " + (
                f"OLLAMA_GPU_OVERHEAD={overhead} reserves (1 - {util}) x total bytes per GPU "
                f"(optional, restart the server); " if overhead is not None else
                "OLLAMA_GPU_OVERHEAD=(1 - u) x total bytes per GPU is the nearest; ")
            + (f"vLLM: --gpu-memory-utilization {util}" if util is not None
               else "not measured here (no GPU total)")),
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
    """How Ollama reads a boolean variable: set and not a Go "false" spelling."""
    return env_text(value) not in _FALSE


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


# ---------------------------------------------------------------- text

def dump_config(doc: Mapping[str, Any], lang: str | None = None) -> str:
    """YAML text of ``doc`` with a comment header saying what produced it and when."""
    gen = doc.get("generated") or {}
    lines = []
    if doc.get("model"):
        lines.append(t("config.header_title", lang, model=doc["model"]))
    else:
        lines.append(t("config.header_title_none", lang))
    lines.append(t("config.header_produced", lang, by=gen.get("by") or f"oomvet {__version__}",
                   at=gen.get("at") or "?", host=gen.get("host") or "?"))
    lines.append(t("config.header_verified" if doc.get("verified") else "config.header_unverified", lang))
    lines.append(t("config.header_use", lang))
    out = [_comment(lines), ""]
    sections = (
        ("config.section_values", [k for k in VOCAB + ("verified", "unverified", "fits", "unmet") if k in doc]),
        ("config.section_ollama", ["ollama"]),
        ("config.section_diagnosis", ["diagnosis"]),
        ("config.section_steps", ["steps"]),
        ("config.section_evidence", ["evidence"]),
        (None, ["generated"]),
    )
    done = set()
    for title, keys in sections:
        part = {k: doc[k] for k in keys if k in doc}
        done.update(part)
        if not part:
            continue
        if title:
            out.append(_comment([t(title, lang)]))
        out.append(_yaml(part))
    rest = {k: v for k, v in doc.items() if k not in done}
    if rest:
        out.append(_yaml(rest))
    return "\n".join(out)


def parse_config(text: str, lang: str | None = None) -> dict:
    """Parse YAML text into a doc and check it; ConfigError with one line if it fails."""
    problems = _parse_and_check(text, lang)
    if isinstance(problems, dict):
        return problems
    raise ConfigError(problems[0], hint=None)


def load_config(path: os.PathLike | str, lang: str | None = None) -> dict:
    """Read and validate an oomvet.yaml; raise :class:`ConfigError` with one clear line."""
    text = read_text(path, lang)
    result = _parse_and_check(text, lang)
    if isinstance(result, dict):
        return result
    hint = t("config.more_problems", lang, n=len(result) - 1, path=path) if len(result) > 1 else None
    raise ConfigError(f"{path}: {result[0]}", hint=hint)


def read_text(path: os.PathLike | str, lang: str | None = None) -> str:
    """The file as text, or ConfigError naming exactly why it cannot be read."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(t("config.file_missing", lang, path=p)) from None
    except OSError as exc:
        raise ConfigError(t("config.file_unreadable", lang, path=p, reason=exc.strerror or exc)) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(t("config.not_utf8", lang, path=p, pos=exc.start)) from None


def check_text(text: str, lang: str | None = None) -> list[str]:
    """Every problem in the YAML text, one line each (empty = valid)."""
    return inspect_text(text, lang)[1]


def inspect_text(text: str, lang: str | None = None) -> tuple[dict | None, list[str]]:
    """(the doc, []) when the YAML text is a valid config, else (None, its problems)."""
    result = _parse_and_check(text, lang)
    return (result, []) if isinstance(result, dict) else (None, result)


def _parse_and_check(text: str, lang: str | None) -> dict | list[str]:
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        return [t("config.at_line", lang, line=dup.line,
                  problem=t("config.duplicate_key", lang, field=dup.key, line=dup.first_line))]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return [t("config.yaml_syntax", lang, line=(mark.line + 1) if mark else "?",
                  col=(mark.column + 1) if mark else "?", problem=problem)]
    if doc is None:
        return [t("config.empty", lang)]
    problems = _problems(doc, lang)
    if not problems:
        return doc
    lines = _key_lines(text)
    out = []
    for path, message in problems:
        line = lines.get(path)
        while line is None and "." in path:
            path = path.rsplit(".", 1)[0]
            line = lines.get(path)
        out.append(t("config.at_line", lang, line=line, problem=message) if line else message)
    return out


# ---------------------------------------------------------------- checking

def check_config(doc: Any, lang: str | None = None) -> list[str]:
    """Every problem in a parsed doc, one line each (empty = valid)."""
    return [message for _, message in _problems(doc, lang)]


def _problems(doc: Any, lang: str | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    def bad(path: str, message_key: str, /, **values) -> None:
        out.append((path, t(message_key, lang, **values)))

    if not isinstance(doc, Mapping):
        bad("", "config.not_mapping", found=_kind(doc))
        return out
    for key in doc:
        if key not in TOP_KEYS:
            bad(str(key), "config.unknown_key", field=key, suggest=_suggest(key, TOP_KEYS, lang))
    for key in REQUIRED:
        if key not in doc:
            bad("", "config.missing_key", field=key)

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
            _check_int(doc[key], key, key, bad)
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

    if doc.get("ollama") is not None:
        # compare the ollama section only with values that are themselves fine:
        # one bad value should give one line, not one per knob that follows it
        flagged = {path for path, _ in out}
        _check_ollama(doc, {k: (None if k in flagged else doc.get(k)) for k in VOCAB}, bad, lang)
    _check_diagnosis(doc.get("diagnosis"), bad)
    _check_steps(doc.get("steps"), bad)
    _check_evidence(doc.get("evidence"), bad)
    gen = doc.get("generated")
    if gen is not None:
        if not isinstance(gen, Mapping):
            bad("generated", "config.section_type", field="generated", found=_kind(gen))
        else:
            for key in gen:
                if key not in GENERATED_KEYS:
                    bad(f"generated.{key}", "config.unknown_key", field=f"generated.{key}",
                        suggest=_suggest(key, GENERATED_KEYS, lang))
    return out


def _check_int(value: Any, path: str, key: str, bad) -> bool:
    if isinstance(value, bool) or not isinstance(value, int):
        bad(path, "config.int_type", field=key, value=value)
        return False
    lo, hi = LIMITS[key]
    if not lo <= value <= hi:
        bad(path, "config.int_range", field=key, lo=lo, hi=hi, value=value)
        return False
    return True


def _check_ollama(doc: Mapping, values: Mapping, bad, lang) -> None:
    section = doc["ollama"]
    if not isinstance(section, Mapping):
        bad("ollama", "config.section_type", field="ollama", found=_kind(section))
        return
    for key in section:
        if key not in OLLAMA_KEYS:
            bad(f"ollama.{key}", "config.unknown_key", field=f"ollama.{key}",
                suggest=_suggest(key, OLLAMA_KEYS, lang))
    model = values.get("model")
    if "from" in section and isinstance(model, str) and section["from"] != model:
        bad("ollama.from", "config.from_mismatch", got=section["from"], want=model)
    for part in ("parameters", "options"):
        params = section.get(part)
        if params is None:
            continue
        where = f"ollama.{part}"
        if not isinstance(params, Mapping):
            bad(where, "config.section_type", field=where, found=_kind(params))
            continue
        for name, value in params.items():
            if name not in OLLAMA_OPTIONS:
                bad(f"{where}.{name}", "config.param_unknown", field=where, name=name,
                    suggest=_suggest(name, OLLAMA_OPTIONS, lang))
        for name, vocab in (("num_ctx", "max_context_len"), ("num_batch", "max_batch_size")):
            want = values.get(vocab)
            if name in params and want is not None and params[name] != want:
                bad(f"{where}.{name}", "config.param_mismatch", field=where, name=name,
                    got=params[name], vocab=vocab, want=want)
    envs = {}
    for part in ("env", "optional_env"):
        env = section.get(part)
        if env is None:
            continue
        where = f"ollama.{part}"
        if not isinstance(env, Mapping):
            bad(where, "config.section_type", field=where, found=_kind(env))
            continue
        for name, value in env.items():
            if name not in OLLAMA_ENV_VARS:
                bad(f"{where}.{name}", "config.env_unknown", field=where, name=name,
                    suggest=_suggest(name, OLLAMA_ENV_VARS, lang))
            elif value is not None and not isinstance(value, (str, int, float, bool)):
                bad(f"{where}.{name}", "config.env_value", field=where, name=name, found=_kind(value))
        if part == "env":
            envs = env
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
    knobs = section.get("knobs")
    if knobs is not None:
        if not isinstance(knobs, Mapping):
            bad("ollama.knobs", "config.section_type", field="ollama.knobs", found=_kind(knobs))
        else:
            for name, text in knobs.items():
                if name not in VOCAB:
                    bad(f"ollama.knobs.{name}", "config.unknown_key", field=f"ollama.knobs.{name}",
                        suggest=_suggest(name, VOCAB, lang))
                elif not isinstance(text, str):
                    bad(f"ollama.knobs.{name}", "config.knob_text", name=name, found=_kind(text))


def _check_diagnosis(diagnosis: Any, bad) -> None:
    if diagnosis is None:
        return
    if not isinstance(diagnosis, Mapping):
        bad("diagnosis", "config.section_type", field="diagnosis", found=_kind(diagnosis))
        return
    for key in diagnosis:
        if key not in DIAGNOSIS_KEYS:
            bad(f"diagnosis.{key}", "config.unknown_key", field=f"diagnosis.{key}",
                suggest=_suggest(key, DIAGNOSIS_KEYS, None))
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
    if evidence is None:
        return
    if not isinstance(evidence, Mapping):
        bad("evidence", "config.section_type", field="evidence", found=_kind(evidence))
        return
    for key in EVIDENCE_SIZES:
        value = evidence.get(key)
        if value is not None and not _is_size(value):
            bad(f"evidence.{key}", "config.size_bad", field=f"evidence.{key}", value=value)
    readings = evidence.get("readings")
    if readings is not None:
        if not isinstance(readings, Mapping):
            bad("evidence.readings", "config.section_type", field="evidence.readings", found=_kind(readings))
        else:
            for name, value in readings.items():
                if value is not None and not _is_size(value):
                    bad(f"evidence.readings.{name}", "config.size_bad",
                        field=f"evidence.readings.{name}", value=value)
    device = evidence.get("device")
    if device is not None and not isinstance(device, Mapping):
        bad("evidence.device", "config.section_type", field="evidence.device", found=_kind(device))
    elif device is not None and device.get("total") is not None and not _is_size(device["total"]):
        bad("evidence.device.total", "config.size_bad", field="evidence.device.total", value=device["total"])


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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


# ---------------------------------------------------------------- YAML helpers

class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key, first_line, line):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first_line, self.line = key, first_line, line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:
            continue  # unhashable key: construct_mapping reports it properly
        if first is not None:
            raise _DuplicateKey(key, first, key_node.start_mark.line + 1)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _key_lines(text: str) -> dict[str, int]:
    """Dotted key path -> line number, for pointing problems at the right line."""
    lines: dict[str, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines

    def walk(node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                lines.setdefault(path, key_node.start_mark.line + 1)
                walk(value_node, path)

    walk(root, "")
    return lines


class _Dumper(yaml.SafeDumper):
    """Indents lists under their key, the way people write YAML by hand."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def _yaml(data: Mapping) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=100)


def _comment(lines: list[str]) -> str:
    return "\n".join(f"# {line}" for line in lines)


def _plain(value: Any) -> Any:
    """Plain YAML-safe data: tuples -> lists, numpy scalars -> int/float, NaN -> None."""
    if isinstance(value, Mapping):
        return {(k if isinstance(k, (str, int)) else str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)  # a probe's keyed Note is a str subclass YAML cannot represent
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    return str(value)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
