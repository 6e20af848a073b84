"""Step 3 of the method: the same prompt at growing context, one request per tier.

Ollama allocates the KV cache at load for ``num_ctx x OLLAMA_NUM_PARALLEL``,
so each tier is a reload at that ``num_ctx`` plus one request whose prompt
fills most of it. Per tier: the idle reading, the peak (sampler), whether
memory is released between requests (on the first tier a second request of
the same size must not add any), and whether Ollama cut the prompt
(``prompt_eval_count`` below the tokens sent). Stepping up stops at the first
out-of-memory outcome. Every tier sets ``num_ctx``: what a request without it
gets is the server's default, a finding about the server (the ``server``
fact), never a tier of its own. By hand: ``ollama run M`` with ``/set parameter
num_ctx N`` and a long paste, watching ``nvidia-smi -lms 50``.
"""
from __future__ import annotations

import time
import uuid

from probes.base import ProbeEnv, ProbeResult, restoring, sampled, server_settings, spill_error, timed
from probes import sanity
from probes.errors import ProbeError
from probes.texts import TokenCost, fill_prompt

TIER_NAMES = ("short", "medium", "long", "longer", "longest")
FILL = 0.85          # share of num_ctx the tier prompt fills
TRUNCATION_SLACK = 0.02
NUM_PREDICT = 16


def plan_tiers(context_length: int | None, want_ctx: int | None = None, start: int = 2048) -> list[int]:
    """Three or more num_ctx values from ``start`` up to the wanted context (or
    32768), stepping by 4x, capped by the model's trained context. A wanted
    context above the trained one stays as the last tier: Ollama clamps it
    silently, and the cut prompt is exactly what the user needs to see."""
    cap = context_length or 131072
    top = min(cap, want_ctx or 32768)
    start = min(start, top)
    tiers = [start]
    while tiers[-1] * 4 <= top:
        tiers.append(tiers[-1] * 4)
    if tiers[-1] != top:
        tiers.append(top)
    while len(tiers) < 3:
        ratio, i = max(((b / a, i) for i, (a, b) in enumerate(zip(tiers, tiers[1:]))), default=(1.0, 0))
        if ratio >= 4:  # split the widest gap geometrically, on a 256 boundary
            tiers.insert(i + 1, int((tiers[i] * tiers[i + 1]) ** 0.5) // 256 * 256)
        elif tiers[0] // 2 >= 256:
            tiers.insert(0, tiers[0] // 2)
        else:
            break
    if want_ctx and want_ctx > cap:
        tiers = tiers[: len(TIER_NAMES) - 1] + [want_ctx]
    return tiers[: len(TIER_NAMES)]


def calibrate(env: ProbeEnv, model: str, num_ctx: int) -> TokenCost:
    """Measure the fill prompt's token cost on the server (two short requests)."""
    counts = []
    for units in (1, 3):
        gen = env.api.generate(model, fill_prompt(units, uuid.uuid4().hex[:8]),
                               {"num_ctx": num_ctx, "num_predict": 1, "temperature": 0})
        if not gen.ok or not gen.prompt_eval_count:
            raise ProbeError(f"could not measure prompt tokens on {model}: "
                             f"{gen.error or 'no prompt_eval_count in the answer'}")
        counts.append(gen.prompt_eval_count)
    per_unit = max(1, (counts[1] - counts[0]) // 2)
    return TokenCost(fixed=counts[0] - per_unit, per_unit=per_unit)


@timed
def run(env: ProbeEnv, model: str, tiers: list[int] | None = None, want_ctx: int | None = None,
        num_parallel: int = 1, num_batch: int = 512, fill: float = FILL) -> ProbeResult:
    """Step up the context tiers of ``model`` until one runs out of memory;
    then, if the user's input is longer than what a request without
    ``num_ctx`` gets, send it at the server's default to show the cut."""
    deadline = time.monotonic() + env.timeout_s
    result = ProbeResult("context", ok=True)
    with restoring(env), server_settings(env, {"OLLAMA_NUM_PARALLEL": num_parallel}):
        context_length = env.api.show(model).context_length
        tiers = tiers or plan_tiers(context_length, want_ctx)
        env.say("plan", tiers=tiers)
        cost = calibrate(env, model, min(tiers))
        env.unload(model)
        check_release = True
        for name, num_ctx in zip(TIER_NAMES, tiers):
            env.check(deadline)
            fact = _tier(env, result, model, name, num_ctx, num_batch, cost, fill, check_release, deadline)
            check_release = check_release and fact["after_first_bytes"] is None
            if fact["oom"]:
                result.notes.append(f"stopped at tier {name} (num_ctx {num_ctx}): out of memory")
                break
            if not fact["ok"]:
                result.ok, result.error = False, fact["error"]
                break
        _check_monotone(result)
    return result


def _check_monotone(result: ProbeResult) -> None:
    """Tier peaks must grow with num_ctx; a tier whose peak falls below a
    smaller one's was not measured right (an old runner in its idle reading)."""
    tiers = [f for f in result.facts if f["kind"] == "tier"]
    for num_ctx, why in sanity.monotone_problems((f["num_ctx"], f["peak"]) for f in tiers):
        fact = next(f for f in tiers if f["num_ctx"] == num_ctx)
        fact.update(peak=None, measured=False, unmeasured=why)
        result.notes.append(f"tier {fact['name']}: not counted: {why}")


def _tier(env: ProbeEnv, result: ProbeResult, model: str, name: str, num_ctx: int, num_batch: int,
          cost: TokenCost, fill: float, check_release: bool, deadline: float) -> dict:
    """Load at ``num_ctx``, send one prompt filling ``fill`` of it, and record
    the tier (raw readings: the rules judge fit, release and truncation)."""
    units = cost.units_for(int(num_ctx * fill))
    sent = cost.tokens(units)
    load_options = {"num_batch": num_batch, "num_ctx": num_ctx}
    options = dict(load_options, num_predict=NUM_PREDICT, temperature=0, seed=7)
    with sampled(env, f"context {name} num_ctx={num_ctx}") as step:
        step.mark("load")
        load = env.api.load(model, load_options)
        loaded_level = step.now()
        loaded = env.api.loaded(model) if load.ok else None
        placement = loaded.placement if loaded else None
        spilled = spill_error(env, model) if load.ok else None
        gen = None
        after_first = None
        if load.ok and not spilled and not step.over_limit():  # over at load: the load is the OOM
            step.mark("request")
            gen = env.api.generate(model, fill_prompt(units, uuid.uuid4().hex[:8]), options)
            step.mark("done")
            env.sleep(0.5, deadline)  # let usage fall back before the reading
            if gen.ok and check_release:
                # memory not released between requests shows as growth from one request
                # to the next of the same size; the first request may touch buffers that
                # then stay mapped (host RSS), which is not a leak
                after_first = step.now()
                step.mark("request 2")
                env.api.generate(model, fill_prompt(units, uuid.uuid4().hex[:8]), options)
                env.sleep(0.5, deadline)
        after = step.now()
    if load.ok:
        env.unload(model)
    error = load.error if not load.ok else (spilled or (gen.error if gen is not None and not gen.ok else None))
    oom = (not load.ok and load.oom) or bool(spilled) or (gen is not None and gen.oom) or step.over_limit()
    if step.over_limit() and not error:
        error = step.over_limit_text()
    ok = load.ok and gen is not None and gen.ok and not step.over_limit()
    evaluated = gen.prompt_eval_count if gen is not None and gen.ok else None
    truncated = evaluated is not None and evaluated < sent * (1 - TRUNCATION_SLACK)
    measured = step.measured
    fact = {"kind": "tier", "name": name, "num_ctx": num_ctx, "model": model, "prompt_tokens": evaluated,
            "sent_tokens": sent, "peak": step.peak, "back_to_baseline": None, "ok": ok, "error": error,
            "truncated": truncated, "oom": oom, "placement": placement,
            # after the first and the second request of the same size: the rules
            # judge from these whether memory was released between requests
            "loaded_bytes": loaded_level if load.ok and measured else None,
            "after_first_bytes": after_first if measured else None,
            "after_second_bytes": after if after_first is not None and measured else None,
            **step.reading()}
    result.charts.append(step.chart())
    result.facts.append(fact)
    result.rows.append({"tier": name, "num_ctx": num_ctx, "sent tokens": sent, "evaluated": evaluated,
                        "after load": fact["loaded_bytes"], "peak": step.peak,
                        "truncated": truncated, "ok": ok, "error": (error or "")[:60] or None})
    return fact
