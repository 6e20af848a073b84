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

The jobs live apart: :mod:`~assistant.config.knobs` maps the values to Ollama,
:mod:`~assistant.config.schema` checks a doc, :mod:`~assistant.config.yaml_io`
reads and writes the text. This module builds the doc and re-exports the rest.
"""
from __future__ import annotations

import datetime as _dt
import math
import numbers
from typing import Any, Mapping

from assistant import __version__
from assistant.report.alternatives import alternatives_doc
from assistant.config.knobs import (
    KV_CACHE_TYPES, OLLAMA_ENV_VARS, OLLAMA_OPTIONS, VOCAB, env_is_on, env_text, gpu_overhead_bytes,
    ollama_of, ollama_section,
)
from assistant.config.schema import DIAGNOSIS_KEYS, LIMITS, QUANT_TYPES, REQUIRED, TOP_KEYS, check_config
from assistant.config.yaml_io import (
    ConfigError, check_text, dump_config, inspect_text, load_config, parse_config, read_text,
)

__all__ = [
    "VOCAB", "TOP_KEYS", "REQUIRED", "LIMITS", "QUANT_TYPES", "KV_CACHE_TYPES", "OLLAMA_ENV_VARS", "OLLAMA_OPTIONS",
    "ConfigError", "build_config", "ollama_section", "gpu_overhead_bytes", "env_text", "env_is_on", "ollama_of",
    "dump_config", "parse_config", "load_config", "read_text", "check_text", "inspect_text", "check_config",
]


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
    if result.get("alternatives"):
        doc["alternatives"] = _plain(alternatives_doc(result["alternatives"], result.get("want_ctx")))
    doc["ollama"] = (ollama_section(values, result.get("server_env"), total, lang=result.get("lang"))
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
