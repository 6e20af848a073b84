"""Step 5 of the method: backend knobs, one change at a time.

Each trial measures the old and the new value of one knob with its own idle
reading and peak, on the same workload: ``num_batch`` (a request option),
then concurrency (``OLLAMA_NUM_PARALLEL``, N requests from N threads), then
the KV cache type (``OLLAMA_KV_CACHE_TYPE``, which needs flash attention).
Server-wide knobs need a restart: a server oomvet started is restarted and
put back afterwards; for a user's server the probe reports the exact command
instead of touching it. ``kv_cache_off`` loads at a minimal context to show
the weights alone — a diagnostic, never a recommendation.
"""
from __future__ import annotations

import time

from probes.base import (ProbeEnv, generate_at_once, measured_server_env, restoring, server_settings,
                         server_value)
from probes.evidence import spill_error
from probes.result import ProbeResult, timed
from probes.step import sampled
from probes.context import calibrate
from common.errors import ProbeError
from probes.notes import Note
from probes.units import fmt_size

KNOBS = ("num_batch", "num_parallel", "kv_cache_type", "kv_cache_off")
SERVER_ENV = {"num_parallel": "OLLAMA_NUM_PARALLEL", "kv_cache_type": "OLLAMA_KV_CACHE_TYPE"}
MIN_CTX = 256
FILL = 0.6


def restart_command(env_changes: dict[str, str]) -> str:
    """What a user types to apply server settings by hand."""
    return Note("backend.restart", assigns=" ".join(f"{k}={v}" for k, v in env_changes.items()))


def _server_env(settings: dict) -> dict[str, str]:
    return measured_server_env(settings["num_parallel"], settings["kv_cache_type"])


@timed
def run(env: ProbeEnv, model: str, knob: str, value, num_ctx: int = 2048, old=None,
        num_batch: int = 512, num_parallel: int = 1, kv_cache_type: str = "f16") -> ProbeResult:
    """Measure the base settings, then the same with ``knob`` set to ``value``.
    The workload is ``num_parallel`` requests at once, each filling most of
    ``num_ctx``."""
    if knob not in KNOBS:
        raise ProbeError(f"unknown backend knob {knob!r} (one of {', '.join(KNOBS)})")
    deadline = time.monotonic() + env.timeout_s
    result = ProbeResult("backend", ok=True)
    base = {"num_batch": int(num_batch), "num_parallel": int(num_parallel), "kv_cache_type": kv_cache_type,
            "num_ctx": int(num_ctx)}
    if old is None:
        old = base["num_ctx"] if knob == "kv_cache_off" else base[knob]
    trial = dict(base)
    if knob == "kv_cache_off":
        trial["num_ctx"] = MIN_CTX
    else:
        trial[knob] = value
    if not env.control.can_restart():
        needs = {k for k in ("num_parallel", "kv_cache_type") if trial[k] != _server_value(env, k)}
        if needs:
            command = restart_command(_server_env(trial))
            result.ok = False
            result.error = f"{', '.join(SERVER_ENV[k] for k in sorted(needs))} needs a server restart that " \
                           "oomvet may not do here"
            result.notes.append(command)
            result.facts.append({"kind": "knob_trial", "knob": knob, "old": old, "new": value, "peak": None,
                                 "answered": False, "applied": False, "error": result.error})
            return result
    with restoring(env):
        cost = calibrate(env, model, min(base["num_ctx"], 2048))
        env.unload(model)
        outcome = {}
        for label, settings in (("old", base), ("new", trial)):
            env.check(deadline)
            with server_settings(env, _server_env(settings)):
                outcome[label] = _measure(env, model, settings, cost, f"{knob}={old if label == 'old' else value}",
                                          result)
        peak, (answered, error), reading = outcome["new"]
        result.ok = answered
        result.error = error
        result.facts.append({"kind": "knob_trial", "knob": knob, "old": old, "new": value, "peak": peak,
                             "answered": answered, "applied": True, "error": error, **reading})
        if knob == "kv_cache_off":
            result.notes.append(Note("backend.weights_alone", ctx=MIN_CTX, peak=fmt_size(peak)))
    return result


def _server_value(env: ProbeEnv, knob: str):
    """The server's value of ``knob`` as read; None when it was not read."""
    if knob == "num_parallel":
        value, _ = server_value(env.control, "OLLAMA_NUM_PARALLEL")
        return None if value is None else int(value)
    return server_value(env.control, "OLLAMA_KV_CACHE_TYPE")[0]


def _measure(env: ProbeEnv, model: str, settings: dict, cost, label: str, result: ProbeResult):
    num_ctx, num_batch, requests = settings["num_ctx"], settings["num_batch"], settings["num_parallel"]
    options = {"num_ctx": num_ctx, "num_batch": num_batch, "num_predict": 8, "temperature": 0, "seed": 3}
    units = cost.units_for(int(num_ctx * FILL))
    with sampled(env, f"backend {label}") as step:
        step.mark("load")
        load = env.api.load(model, {"num_ctx": num_ctx, "num_batch": num_batch})
        loaded = env.api.loaded(model) if load.ok else None
        spilled = spill_error(env, model) if load.ok else None
        gens = []
        if load.ok and not spilled and not step.over_limit():  # over at load: the load is the OOM
            step.mark("request")
            gens = generate_at_once(env, model, units, options, requests)
    if load.ok:
        env.unload(model)
    errors = [g.error for g in gens if g is not None and not g.ok] or ([load.error] if not load.ok else [])
    if spilled:
        errors.append(spilled)
    # every call made got a reply (requests not sent after a spilled or over-limit
    # load are not a failure of the server: the rules read the placement and the peak)
    answered = load.ok and all(g is not None and g.ok for g in gens)
    result.charts.append(step.chart())
    result.rows.append({"setting": label, "num_ctx": num_ctx, "requests": requests, "peak": step.peak,
                        # a Note stays one (the chat says it in the session's language); text is cut short
                        "error": (errors[0] if getattr(errors[0], "key", None) else errors[0][:80]) if errors
                        else None})
    placement = {"placement": loaded.placement} if loaded is not None else {}
    return step.peak, (answered, errors[0] if errors else None), {**step.reading(), **placement}
