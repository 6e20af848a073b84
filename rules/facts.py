"""The fact contract between intake, probes and the rules, in one place.

Facts are plain dicts with a ``kind``. Intake and the probes build them, the
rules read them, and everything posted to the knowledge base passes through
:func:`validate` first, so a probe that forgets a field fails loudly at the
boundary instead of silently matching no rule. Sizes are bytes (int), times
seconds (float). Extend a kind by adding an optional field here; never fork it.

Facts are measurements, never verdicts: a probe posts what it read (a peak,
token counts, the kind of a failure, the figures of an answer) and whether the
server answered; whether that fits, was truncated, ran out of memory or is
coherent is a reading rule's decision (rules/readings.py), recorded per fact
(:meth:`rules.engine.Advisor.readings`). ``answered`` is the server's own
reply: every call the measurement made got one (a request the probe did not
send, because the load already told enough, is not a failure).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

PHASES = ("load", "long_input", "concurrent", "slow", "creeping", "crash", "unknown")
CAUSES = ("weights", "kv_cache", "not_released", "concurrency", "not_memory")
ACTIONS = ("ask", "probe", "change", "done")
PROBES = ("baseline", "context", "quant", "backend", "stability")
TIERS = ("short", "medium", "long", "longer", "longest")
REMEDIES = ("context", "quant", "backend")
#: the kinds a probe measures: each is read by a reading rule, which gives its verdict
MEASUREMENTS = ("load", "tier", "quant_trial", "knob_trial", "stability")
# where Ollama put the model (/api/ps size_vram vs size); "partial"/"cpu" on a
# GPU is a memory shortage even without an error
PLACEMENTS = ("gpu", "partial", "cpu", None)

#: what a failed load or request was (probes/oomtext.py classifies; see there)
FAILURES = ("startup_oom", "runtime_oom", "killed", "crash", "config", "not_found", "engine_missing",
            "timeout", "busy", "error")
#: the failures that mean memory ran out
OOM_FAILURES = ("startup_oom", "runtime_oom", "killed")
ENGINES = ("runner", "llama-server")
#: why a request without num_ctx gets the context it gets
DEFAULT_CTX_WHY = ("vram_tier", "env", "modelfile", "legacy_default")
FLASH_ATTENTION = ("auto", "on", "off")

_NUM = (int, float)
_OPT = object()  # marker: optional field


class FactError(ValueError):
    """A fact that does not fit the contract; seen by developers, and by users
    only through a bug report (probes and intake build facts, not people)."""


@dataclass(frozen=True)
class Field:
    types: tuple
    required: bool = True
    choices: tuple | None = None


def _f(*types, required=True, choices=None) -> Field:
    return Field(tuple(types), required, choices)


_NONE = type(None)

# every measurement says whether its figures are measurements: False for a
# failed reading, a source that cannot see the model, or a refused sanity
# check, with the reason in `unmeasured`
_HEALTH = {
    "measured": _f(bool, required=False),
    "unmeasured": _f(str, _NONE, required=False),
}

# kind -> field -> spec. ``None`` is allowed wherever _NONE is listed: a probe
# that could not read a value says so with None rather than inventing one.
SCHEMA: dict[str, dict[str, Field]] = {
    "symptom": {
        "phase": _f(str, choices=PHASES),
        "text": _f(str),
        "error": _f(str, _NONE, required=False),
    },
    "target": {
        "model": _f(str, _NONE),
        "want_ctx": _f(int, _NONE),
        "want_parallel": _f(int, _NONE),
        "budget": _f(int, _NONE),
        "keep_context": _f(bool, _NONE, required=False),
        "keep_concurrency": _f(bool, _NONE, required=False),
    },
    "device": {
        "name": _f(str),
        "vendor": _f(str),  # nvidia / amd / apple / cpu / simulated
        "total": _f(int),
        "used_idle": _f(int, _NONE),   # None: the idle reading failed
        "unified": _f(bool),
        "limit": _f(int, required=False),  # min(budget, what the device can give)
        "source": _f(str, required=False),
    },
    "load": {
        **_HEALTH,
        "model": _f(str),
        "options": _f(dict),
        "answered": _f(bool),
        "error": _f(str, _NONE),
        "peak": _f(int, _NONE, required=False),  # the highest usage above idle through the load
        "size": _f(int, _NONE),
        "size_vram": _f(int, _NONE),
        "used_after": _f(int, _NONE),
        "used_settled": _f(int, _NONE),
        "drift_per_min": _f(*_NUM, _NONE),
        "used_idle": _f(int, _NONE, required=False),
        "placement": _f(str, _NONE, required=False, choices=("gpu", "partial", "cpu", None)),
        # quantization level of the loaded tag (/api/ps details.quantization_level,
        # e.g. "Q8_0"); the config's quant_type comes from here, never a guess
        "level": _f(str, _NONE, required=False),
        "failure": _f(str, _NONE, required=False, choices=FAILURES + (None,)),
        "oom_marker": _f(str, _NONE, required=False),
    },
    "tier": {
        **_HEALTH,
        "name": _f(str),
        "num_ctx": _f(int),
        "prompt_tokens": _f(int, _NONE),                    # what the server evaluated
        "peak": _f(int, _NONE),
        "answered": _f(bool),
        "error": _f(str, _NONE),
        "model": _f(str, required=False),
        "sent_tokens": _f(int, _NONE, required=False),      # what the fill sent
        "placement": _f(str, _NONE, required=False, choices=PLACEMENTS),
        # model usage after load, after the first and after the second request
        # of the same size (the rules judge "released" from these)
        "loaded_bytes": _f(int, _NONE, required=False),
        "after_first_bytes": _f(int, _NONE, required=False),
        "after_second_bytes": _f(int, _NONE, required=False),
        # the peak through that second request; the tier's own peak is the fill's
        # (on llama-server the second prompt adds the first to its host-RAM prompt cache)
        "second_request_peak": _f(int, _NONE, required=False),
        "failure": _f(str, _NONE, required=False, choices=FAILURES + (None,)),
        "oom_marker": _f(str, _NONE, required=False),
    },
    "quant_trial": {
        **_HEALTH,
        "tag": _f(str),
        "level": _f(str),
        "answered": _f(bool),
        # the memory read right after the load at num_ctx: the weights with the
        # KV cache and compute buffers (named as in DESIGN.md; shown as "after load")
        "weights": _f(int, _NONE),
        "error": _f(str, _NONE, required=False),
        # the figures of the answer to the fixed task (probes/coherence.py
        # measure; rules/coherence.py judges them)
        "answer_chars": _f(int, required=False),
        "repeat_share": _f(*_NUM, required=False),
        "garbled_share": _f(*_NUM, required=False),
        "done_reason": _f(str, _NONE, required=False),
        "last_char": _f(str, required=False),
        "numbers_checked": _f(int, required=False),
        "numbers_lost": _f(int, required=False),
        "numbers_in_task": _f(int, required=False),
        "numbers_invented": _f(int, required=False),
        "code_spans": _f(int, required=False),
        "code_spans_kept": _f(int, required=False),
        "bits": _f(*_NUM, _NONE, required=False),
        "peak": _f(int, _NONE, required=False),
        "num_ctx": _f(int, _NONE, required=False),
        "placement": _f(str, _NONE, required=False, choices=PLACEMENTS),
        "failure": _f(str, _NONE, required=False, choices=FAILURES + (None,)),
        "oom_marker": _f(str, _NONE, required=False),
    },
    "knob_trial": {
        **_HEALTH,
        "knob": _f(str, choices=("num_batch", "num_parallel", "kv_cache_type", "kv_cache_off")),
        "old": _f(int, str, _NONE),
        "new": _f(int, str, _NONE),
        "peak": _f(int, _NONE),
        "answered": _f(bool),
        "error": _f(str, _NONE, required=False),
        "applied": _f(bool, required=False),  # False: a server knob we could not change
        "placement": _f(str, _NONE, required=False, choices=PLACEMENTS),
        "failure": _f(str, _NONE, required=False, choices=FAILURES + (None,)),
        "oom_marker": _f(str, _NONE, required=False),
    },
    "stability": {
        **_HEALTH,
        "config": _f(dict),
        "eval_count": _f(int, _NONE),
        "done_reason": _f(str, _NONE),
        "answered": _f(bool),
        "prompt_tokens": _f(int, _NONE, required=False),      # what the server evaluated of the task
        "task_tokens": _f(int, _NONE, required=False),        # the task's own count, measured with room
        "repeat_share": _f(*_NUM, _NONE, required=False),  # share of the output's word 4-grams that repeat
        "errors": _f(list),
        "peak": _f(int, _NONE, required=False),
        "failure": _f(str, _NONE, required=False, choices=FAILURES + (None,)),
        "oom_marker": _f(str, _NONE, required=False),
    },
    # the server oomvet talks to (probes/serverinfo.py). Every value it could
    # not tell is None, with the reason in `unknown` (field -> why), never a guess
    "server": {
        "version": _f(str, _NONE),
        "engine": _f(str, _NONE, choices=ENGINES + (None,)),
        "engine_why": _f(str, _NONE, required=False),
        # the context a request without num_ctx gets, and why
        "default_ctx": _f(int, _NONE),
        "default_ctx_why": _f(str, _NONE, choices=DEFAULT_CTX_WHY + (None,)),
        "vram_total": _f(int, _NONE, required=False),     # what the VRAM tier was chosen from
        "flash_attention": _f(str, _NONE, choices=FLASH_ATTENTION + (None,)),
        "kv_cache_type": _f(str, _NONE),
        "num_parallel": _f(int, _NONE),
        "fit_target": _f(int, _NONE),                       # bytes llama.cpp's fit leaves free per device
        "gpu_overhead": _f(int, _NONE, required=False),     # OLLAMA_GPU_OVERHEAD as set (bytes)
        "local": _f(bool, _NONE),                           # a process of this machine serves it
        "sizes": _f(str, _NONE, required=False, choices=("estimate", "measured", None)),  # /api/ps figures
        "knobs": _f(dict, required=False),                  # knob -> what it does on this version
        "unknown": _f(dict, required=False),                # field -> why it is None
    },
    # what the server log said about one load or request (probes/serverlog.py)
    "log": {
        "source": _f(str),                                  # a path, "journalctl -u ollama", "simulator"
        "model": _f(str, _NONE, required=False),
        "engine": _f(str, _NONE, required=False, choices=ENGINES + (None,)),
        "cmdline": _f(dict, _NONE, required=False),        # num_ctx, num_parallel, n_gpu_layers, cache types, ...
        "buffers": _f(list, required=False),                # [{device, kind: model/KV/compute/output/RS, bytes}]
        "fit": _f(dict, _NONE, required=False),            # llama.cpp fit projection
        "auto_backoff": _f(dict, _NONE, required=False),   # {old_num_ctx, new_num_ctx}: Ollama shrank the context
        "runtime_oom": _f(bool, required=False),            # Ollama expired every loaded model after an OOM
        "ctx_clamped": _f(dict, _NONE, required=False),    # {num_ctx, n_ctx_train}
        "default_ctx": _f(dict, _NONE, required=False),    # {total_vram, default_num_ctx}
        "kv_needs_fa": _f(bool, required=False),            # quantized V cache refused without flash attention
        "errors": _f(list, required=False),                 # error lines, as logged
        "oom_lines": _f(list, required=False),              # lines with an out-of-memory marker
    },
    "answer": {  # a user's reply to an `ask`
        "question": _f(str),
        "value": _f(str, int, float, bool, _NONE),
    },
    # posted by the session after a probe has posted all its facts, so the rules
    # know the probe finished (a context probe may post 1..n tiers, a quant
    # probe 0..n trials); `ok: false` + `error` when the probe itself broke
    "probe_done": {
        "probe": _f(str, choices=PROBES),
        "ok": _f(bool),
        "error": _f(str, _NONE, required=False),
    },
    # the user will not take a recommended remedy; the rules move to the next
    # one (an `answer` to `keep_context` with True refuses "context" the same way)
    "refusal": {
        "remedy": _f(str, choices=REMEDIES),
        "text": _f(str, _NONE, required=False),
    },
    # the session cannot go on (the server went away, a probe broke in a way
    # that leaves nothing to measure): the rules end with what was measured
    "stop": {
        "reason": _f(str),
    },
    "diagnosis": {
        "cause": _f(str, choices=CAUSES),
    },
    "next": {
        "action": _f(str, choices=ACTIONS),
    },
}


def validate(fact: Mapping[str, Any]) -> dict:
    """Return a plain-dict copy of ``fact`` if it fits the contract, else raise
    :class:`FactError` naming the kind and the field at fault."""
    if not isinstance(fact, Mapping):
        raise FactError(f"a fact must be a mapping, got {type(fact).__name__}")
    kind = fact.get("kind")
    if kind not in SCHEMA:
        raise FactError(f"unknown fact kind {kind!r} (known: {', '.join(SCHEMA)})")
    spec = SCHEMA[kind]
    for name, field in spec.items():
        if name not in fact:
            if field.required:
                raise FactError(f"{kind} fact is missing field {name!r}")
            continue
        value = fact[name]
        # bool is an int in Python; refuse True where a size is expected
        if isinstance(value, bool) and bool not in field.types:
            raise FactError(f"{kind}.{name} must be {_names(field.types)}, got bool")
        if not isinstance(value, field.types):
            raise FactError(f"{kind}.{name} must be {_names(field.types)}, got {type(value).__name__}")
        if field.choices is not None and value not in field.choices:
            raise FactError(f"{kind}.{name} must be one of {field.choices}, got {value!r}")
    return dict(fact)


def _names(types: tuple) -> str:
    return " or ".join("None" if t is _NONE else t.__name__ for t in types)
