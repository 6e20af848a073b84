"""Step 2 of the method: idle, after load, after settling, at conservative settings.

Same as, by hand: ``ollama stop M``; read memory (``nvidia-smi
--query-gpu=memory.used --format=csv``); ``curl HOST/api/generate -d
'{"model": M, "options": {"num_ctx": 2048}}'``; read again; wait; read again;
``ollama ps``. A model that fails to load, spills layers to CPU on a GPU, or
uses more than the limit is a weights problem; usage that creeps up while
idle is memory not being released.
"""
from __future__ import annotations

import time

from probes import ledger, sanity
from probes.base import ProbeEnv, restoring, server_settings, server_value
from probes.evidence import failure_fields, log_facts, log_window
from probes.result import ProbeResult, timed
from probes.step import measure_checked, sampled

DEFAULT_NUM_CTX = 2048
DEFAULT_SETTLE_S = 30.0


def drift_per_min(timeline: list[tuple[float, int]], since: float) -> float | None:
    """Least-squares slope of usage (bytes per minute) over the settle window."""
    points = [(t, u) for t, u in timeline if t >= since]
    if len(points) < 3 or points[-1][0] - points[0][0] < 0.5:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_u = sum(u for _, u in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    slope = sum((t - mean_t) * (u - mean_u) for t, u in points) / var
    return slope * 60.0


@timed
def run(env: ProbeEnv, model: str, num_ctx: int = DEFAULT_NUM_CTX, num_batch: int = 512,
        num_parallel: int = 1, settle_s: float = DEFAULT_SETTLE_S) -> ProbeResult:
    """Load ``model`` without generating and watch its memory settle."""
    deadline = time.monotonic() + env.timeout_s
    options = {"num_ctx": int(num_ctx), "num_batch": int(num_batch)}
    result = ProbeResult("baseline", ok=False)
    with restoring(env), server_settings(env, {"OLLAMA_NUM_PARALLEL": num_parallel}) as applied:
        if not applied:  # a user's server: measure it as it runs, and say so
            value, _ = server_value(env.control, "OLLAMA_NUM_PARALLEL")
            if value is not None:
                num_parallel = int(value)
            result.notes.append("the server runs with its own OLLAMA_NUM_PARALLEL; measured as it is")
        level = env.api.show(model).quantization  # also: a missing model fails here, before any reading
        if env.api.loaded(model):
            env.unload(model)

        def once():
            window = log_window(env)
            with sampled(env, f"baseline {model} num_ctx={num_ctx}") as step:
                step.mark("load")
                gen = env.api.load(model, options)
                env.check(deadline)
                after = step.now()
                loaded = env.api.loaded(model) if gen.ok else None
                settle_from = step.elapsed()
                step.mark("settle")
                if gen.ok:
                    env.sleep(settle_s, deadline)
                settled = step.now()
            # who holds the memory now, with the model loaded: every source side by side
            held = ledger.read(env, model, _buffers(window)) if gen.ok else None
            if gen.ok:
                env.unload(model)
            return step, {"gen": gen, "after": after, "settled": settled, "loaded": loaded,
                          "settle_from": settle_from, "window": window, "ledger": held}

        def problems(step, got):
            # a load without a request may not have touched every weight yet, so
            # only the readings' own order is checked here, not the weights' size
            return sanity.load_problems(got["after"], step.peak) if got["gen"].ok else []

        step, got = measure_checked(once, problems, result.notes)
        gen, loaded = got["gen"], got["loaded"]
        measured = step.measured
        after = got["after"] if gen.ok and measured else None
        settled = got["settled"] if gen.ok and measured else None
        drift = None
        if gen.ok and measured:
            drift = drift_per_min([(t, u - step.idle_bytes) for t, u in step.sampler.timeline], got["settle_from"])
        if step.blind and gen.ok:  # a server elsewhere: what it reports, marked as not measured
            after = settled = step.peak
        failure = failure_fields(gen, got["window"], "load")
        placement = loaded.placement if loaded else None
        # whether this load fits is the rules' reading of the fact; the probe
        # only says whether it ran to the end
        result.ok = gen.ok
        result.error = gen.error
        result.charts.append(step.chart())
        result.facts.append({
            "kind": "load", "model": model, "options": dict(options, num_parallel=num_parallel), "level": level,
            "answered": gen.ok, "error": gen.error, "peak": step.peak,
            "size": loaded.size_bytes if loaded else None,
            "size_vram": loaded.size_vram_bytes if loaded else None,
            "used_idle": step.idle_bytes,
            "used_after": after,
            "used_settled": settled,
            "drift_per_min": drift,
            "placement": placement,
            **failure,
            **step.reading(),
        })
        result.facts.extend(log_facts(got["window"], "baseline", model))
        if got["ledger"] is not None:
            result.facts.append(got["ledger"])
        result.rows.append({
            "model": model, "num_ctx": num_ctx, "loaded": gen.ok, "where": placement,
            "idle": step.idle_bytes, "after load": after, "settled": settled, "peak": step.peak,
            "drift/min": drift, "ollama size": loaded.size_bytes if loaded else None,
            "limit": env.limit_bytes,
        })
        if step.unmeasured:
            result.notes.append(f"not measured: {step.unmeasured}")
        if loaded and placement != "gpu" and env.on_gpu:
            result.notes.append(f"{model} runs {placement}: Ollama put only part of it on the GPU")
    return result


def _buffers(window) -> list[dict]:
    """The buffer lines the load logged (none when the log cannot be read)."""
    from probes.serverlog import parse

    lines = window.lines()
    return parse(lines).buffers if lines else []
