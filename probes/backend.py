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

import threading
import time
import uuid

from probes.base import ProbeEnv, ProbeResult, restoring, sampled, spill_error, timed
from probes.context import calibrate
from probes.texts import fill_prompt

KNOBS = ("num_batch", "num_parallel", "kv_cache_type", "kv_cache_off")
SERVER_ENV = {"num_parallel": "OLLAMA_NUM_PARALLEL", "kv_cache_type": "OLLAMA_KV_CACHE_TYPE"}
MIN_CTX = 256
FILL = 0.6


def restart_command(env_changes: dict[str, str]) -> str:
    """What a user types to apply server settings by hand."""
    assigns = " ".join(f"{k}={v}" for k, v in env_changes.items())
    return f"{assigns} ollama serve   (systemd: `systemctl edit ollama` -> [Service] Environment=...; then restart)"


def _server_env(knob: str, value) -> dict[str, str]:
    if knob == "num_parallel":
        return {"OLLAMA_NUM_PARALLEL": str(int(value))}
    if knob == "kv_cache_type":
        # a quantized KV cache is only used with flash attention on
        return {"OLLAMA_KV_CACHE_TYPE": str(value), "OLLAMA_FLASH_ATTENTION": "1" if value != "f16" else "0"}
    return {}


@timed
def run(env: ProbeEnv, model: str, knob: str, value, num_ctx: int = 2048, old=None,
        num_batch: int = 512, num_parallel: int = 1) -> ProbeResult:
    """Measure ``knob`` at its current value and at ``value``."""
    if knob not in KNOBS:
        from probes.errors import ProbeError
        raise ProbeError(f"unknown backend knob {knob!r} (one of {', '.join(KNOBS)})")
    deadline = time.monotonic() + env.timeout_s
    result = ProbeResult("backend", ok=True)
    server_env_before = env.control.env()
    if old is None:
        old = {"num_batch": num_batch, "num_parallel": int(server_env_before.get("OLLAMA_NUM_PARALLEL", num_parallel)),
               "kv_cache_type": server_env_before.get("OLLAMA_KV_CACHE_TYPE", "f16"),
               "kv_cache_off": num_ctx}[knob]
    needs_restart = knob in SERVER_ENV
    if needs_restart and not env.control.can_restart():
        command = restart_command(_server_env(knob, value))
        result.ok = False
        result.error = f"{SERVER_ENV[knob]} needs a server restart that oomvet may not do here"
        result.notes.append(command)
        result.facts.append({"kind": "knob_trial", "knob": knob, "old": old, "new": value, "peak": None,
                             "ok": False, "applied": False, "error": result.error})
        return result
    with restoring(env):
        cost = calibrate(env, model, num_ctx)
        env.api.unload(model)
        peaks = {}
        outcome = {}
        try:
            for label, setting in (("old", old), ("new", value)):
                env.check(deadline)
                if needs_restart:
                    env.control.restart(_server_env(knob, setting))
                ctx = MIN_CTX if (knob == "kv_cache_off" and label == "new") else num_ctx
                batch = int(setting) if knob == "num_batch" else num_batch
                requests = int(setting) if knob == "num_parallel" else 1
                peaks[label], outcome[label] = _measure(env, model, ctx, batch, requests, cost, f"{knob}={setting}",
                                                        result)
        finally:
            if needs_restart:
                env.control.restart({k: server_env_before.get(k, _default(k)) for k in _server_env(knob, value)})
        ok, error = outcome["new"]
        result.ok = ok
        result.error = error
        result.facts.append({"kind": "knob_trial", "knob": knob, "old": old, "new": value, "peak": peaks["new"],
                             "ok": ok, "applied": True, "error": error})
        if knob == "kv_cache_off":
            result.notes.append(f"weights alone (num_ctx {MIN_CTX}): {peaks['new']} bytes — a diagnostic, "
                                "not a setting to use")
    return result


def _default(name: str) -> str:
    return {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KV_CACHE_TYPE": "f16", "OLLAMA_FLASH_ATTENTION": "0"}[name]


def _measure(env: ProbeEnv, model: str, num_ctx: int, num_batch: int, requests: int, cost, label: str,
             result: ProbeResult):
    options = {"num_ctx": num_ctx, "num_batch": num_batch, "num_predict": 8, "temperature": 0, "seed": 3}
    units = cost.units_for(int(num_ctx * FILL))
    with sampled(env, f"backend {label}") as step:
        step.mark("load")
        load = env.api.load(model, {"num_ctx": num_ctx, "num_batch": num_batch})
        spilled = spill_error(env, model) if load.ok else None
        gens = []
        if load.ok and not spilled:
            step.mark("request")
            gens = [None] * requests
            threads = [threading.Thread(target=lambda i=i: gens.__setitem__(
                i, env.api.generate(model, fill_prompt(units, uuid.uuid4().hex[:8]), options)))
                for i in range(requests)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
    env.api.unload(model)
    errors = [g.error for g in gens if g is not None and not g.ok] or ([load.error] if not load.ok else [])
    if spilled:
        errors.append(spilled)
    over = step.over_limit()
    if over:
        errors.append(step.over_limit_text())
    ok = load.ok and not errors
    result.charts.append(step.chart())
    result.rows.append({"setting": label, "num_ctx": num_ctx, "requests": requests, "peak": step.peak,
                        "ok": ok, "error": (errors[0][:80] if errors else None)})
    return step.peak, (ok, errors[0] if errors else None)
