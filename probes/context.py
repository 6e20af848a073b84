"""Step 3 of the method: the same prompt at growing context, one request per tier.

Ollama allocates the KV cache at load for ``num_ctx x OLLAMA_NUM_PARALLEL``,
so each tier is a reload at that ``num_ctx`` plus one request whose prompt
fills most of it. Per tier: the idle reading, the peak (sampler), whether
usage falls back after the request, and whether Ollama cut the prompt
(``prompt_eval_count`` below the tokens sent). Stepping up stops at the first
out-of-memory outcome. By hand: ``ollama run M`` with ``/set parameter
num_ctx N`` and a long paste, watching ``nvidia-smi -lms 50``.
"""
from __future__ import annotations

import time
import uuid

from probes.base import (BACK_TO_BASELINE_FRACTION, BACK_TO_BASELINE_MIN_BYTES, ProbeEnv, ProbeResult,
                         restoring, sampled, spill_error, timed)
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
    """Step up the context tiers of ``model`` until one runs out of memory."""
    deadline = time.monotonic() + env.timeout_s
    result = ProbeResult("context", ok=True)
    with restoring(env):
        context_length = env.api.show(model).context_length
        tiers = tiers or plan_tiers(context_length, want_ctx)
        env.say("plan", tiers=tiers)
        cost = calibrate(env, model, min(tiers))
        env.api.unload(model)
        for name, num_ctx in zip(TIER_NAMES, tiers):
            env.check(deadline)
            units = cost.units_for(int(num_ctx * fill))
            sent = cost.tokens(units)
            options = {"num_ctx": num_ctx, "num_batch": num_batch, "num_predict": NUM_PREDICT,
                       "temperature": 0, "seed": 7}
            with sampled(env, f"context {name} num_ctx={num_ctx}") as step:
                step.mark("load")
                load = env.api.load(model, {"num_ctx": num_ctx, "num_batch": num_batch})
                loaded_level = step.now()
                spilled = spill_error(env, model) if load.ok else None
                gen = None
                if load.ok and not spilled:
                    step.mark("request")
                    gen = env.api.generate(model, fill_prompt(units, uuid.uuid4().hex[:8]), options)
                    step.mark("done")
                    env.sleep(0.5, deadline)  # let usage fall back before the last reading
                after = step.now()
            error = load.error if not load.ok else (spilled or (gen.error if not gen.ok else None))
            oom = (not load.ok and load.oom) or bool(spilled) or (gen is not None and gen.oom) or step.over_limit()
            if step.over_limit() and not error:
                error = step.over_limit_text()
            ok = load.ok and gen is not None and gen.ok and not step.over_limit()
            evaluated = gen.prompt_eval_count if gen is not None and gen.ok else None
            truncated = evaluated is not None and evaluated < sent * (1 - TRUNCATION_SLACK)
            tolerance = max(BACK_TO_BASELINE_MIN_BYTES, int(loaded_level * BACK_TO_BASELINE_FRACTION))
            back = (after - loaded_level) <= tolerance if load.ok else None
            result.charts.append(step.chart())
            result.facts.append({
                "kind": "tier", "name": name, "num_ctx": num_ctx, "model": model,
                "prompt_tokens": evaluated, "sent_tokens": sent, "peak": step.peak,
                "back_to_baseline": back, "ok": ok, "error": error, "truncated": truncated, "oom": oom,
            })
            result.rows.append({"tier": name, "num_ctx": num_ctx, "sent tokens": sent, "evaluated": evaluated,
                                "after load": loaded_level if load.ok else None, "peak": step.peak,
                                "back to baseline": back, "truncated": truncated, "ok": ok,
                                "error": (error or "")[:80] or None})
            env.api.unload(model)
            if oom:
                result.notes.append(f"stopped at tier {name} (num_ctx {num_ctx}): out of memory")
                break
            if not ok:
                result.ok = False
                result.error = error
                break
    return result
