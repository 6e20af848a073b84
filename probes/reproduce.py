"""Step 1 of the method: the user's own failure, reproduced before anything changes.

The server runs as the user runs it (nothing is restarted or set): the
model loads at the context the user asked for, with the batch the server
picks, and the load the symptom names follows — N requests at once for a
concurrency complaint, the load alone for a failure at load, otherwise one
request; each fills 60% of the context (:data:`FILL`). By hand: ``ollama stop M``;
``curl HOST/api/generate -d '{"model": M, "options": {"num_ctx": N}}'``;
then N long prompts from N shells; ``ollama ps``; read memory.

What it records is a measurement, never a verdict: whether every call was
answered, the failure each error was (probes/oomtext.py), the peak, where
Ollama put the model, the tokens sent and evaluated, and the server's slot
count as read (or None, with ``parallel_from`` "unknown"). Whether that is
the user's failure is the rules' reading.
"""
from __future__ import annotations

import time

from probes.base import ProbeEnv, generate_at_once, restoring, server_value
from probes.context import calibrate
from probes.evidence import failure_fields, log_facts, log_window, spill_error
from probes.result import ProbeResult, timed
from probes.step import sampled

#: how much of the context each request fills. Both engines allocate the KV
#: cache for the whole num_ctx at load, so a long input needs to run its prompt
#: batches through, not reach the end: 60% does (as the backend trials do),
#: at half the prompt time of 85% on a CPU (6.6 s against 12.1 s at 4096 on the rig)
FILL = 0.6
#: tokens each request generates: enough to run the decode, not to wait on it
NUM_PREDICT = 8


def server_slots(env: ProbeEnv) -> tuple[int | None, str]:
    """The server's ``OLLAMA_NUM_PARALLEL`` as read, and where it was read
    (``environ``, ``cmdline``, ``log``, ``version default``, ``oomvet``...);
    ``(None, "unknown")`` when it was not read."""
    value, source = server_value(env.control, "OLLAMA_NUM_PARALLEL")
    return (None, "unknown") if value is None else (int(value), source)


@timed
def run(env: ProbeEnv, model: str, num_ctx: int | None, requests: int = 1, phase: str = "unknown") -> ProbeResult:
    """Load ``model`` at ``num_ctx`` on the server as it runs, then send the
    symptom's load: ``requests`` requests at once (none for a failure at load).
    ``num_ctx`` None sends none, as an app that sets none does: the server's
    default applies (its value is read back from ``ollama ps`` where shown)."""
    deadline = time.monotonic() + env.timeout_s
    result = ProbeResult("reproduce", ok=False)
    slots, slots_from = server_slots(env)
    requests = 0 if phase == "load" else max(int(requests), 1)
    with restoring(env):
        level = env.api.show(model).quantization  # a missing model fails here, before any reading
        cost = calibrate(env, model, min(int(num_ctx or 2048), 2048)) if requests else None
        units = None
        if env.api.loaded(model):
            env.unload(model)
        env.check(deadline)
        window = log_window(env)
        gens: list = []
        asked = {} if num_ctx is None else {"num_ctx": int(num_ctx)}
        with sampled(env, f"reproduce {model} num_ctx={num_ctx or 'default'} x{requests}") as step:
            step.mark("load")
            load = env.api.load(model, asked)
            loaded = env.api.loaded(model) if load.ok else None
            spilled = spill_error(env, model) if load.ok else None
            if num_ctx is None and loaded is not None and loaded.context_length:
                num_ctx = loaded.context_length   # what the server gave: /api/ps says so on v0.30+
            # spilled or over the limit at load: the load is the failure, and requests
            # on a model half on the CPU would only wait on it
            if load.ok and requests and not spilled and not step.over_limit():
                step.mark("request")
                # unknown default context: fill what any context holds (2048) rather than guess
                units = cost.units_for(int((num_ctx or 2048) * FILL))
                options = {**asked, "num_predict": NUM_PREDICT, "temperature": 0, "seed": 3}
                gens = generate_at_once(env, model, units, options, requests)
        if load.ok:
            env.unload(model)
    failed = next((g for g in gens if g is not None and not g.ok), None) or (load if not load.ok else None)
    answered = load.ok and all(g is not None and g.ok for g in gens)
    error = failed.error if failed is not None else spilled
    done = [g for g in gens if g is not None and g.ok]
    result.ok = answered
    result.error = error
    result.charts.append(step.chart())
    fact = {
        "kind": "reproduction", "model": model, "level": level, "num_ctx": num_ctx,
        "num_parallel": slots, "parallel_from": slots_from, "requests": requests, "phase": phase,
        "answered": answered, "error": error, "peak": step.peak, "used_idle": step.idle_bytes,
        "size": loaded.size_bytes if loaded else None,
        "size_vram": loaded.size_vram_bytes if loaded else None,
        "placement": loaded.placement if loaded else None,
        "prompt_tokens": min((g.prompt_eval_count or 0) for g in done) if done else None,
        "sent_tokens": cost.tokens(units) if units else None,
        **failure_fields(failed, window, "load" if failed is load else "request"),
        **step.reading(),
    }
    result.facts.append(fact)
    result.facts.extend(log_facts(window, "reproduce", model))
    result.rows.append({"model": model, "num_ctx": num_ctx, "slots": slots if slots is not None else "?",
                        "requests": requests, "where": fact["placement"], "peak": step.peak,
                        "limit": env.limit_bytes, "error": error if error is None or len(error) <= 80 else error[:80]})
    return result
