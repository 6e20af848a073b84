"""Step 3 of the method: the largest context that fits, found and proved.

Ollama allocates the KV cache at load for ``num_ctx x OLLAMA_NUM_PARALLEL``,
so each point is a reload at that ``num_ctx`` plus one request whose prompt
fills most of it. The short tier (2048) comes first; the memory model,
calibrated by every point measured so far, picks the next ``num_ctx`` to
prove, and the search (``probes/search.py``) bisects between the best
verified pass and the first verified failure. Per point: the idle reading,
the peak (sampler), whether memory is released between requests (on the
first point a second request of the same size must not add any), and whether
Ollama cut the prompt (``prompt_eval_count`` below the tokens sent). The
points become short / medium / long ``tier`` facts by context, so the rules
still see whether the KV cache is the culprit. The context a request without
``num_ctx`` gets is a finding about the server's defaults
(``server_default_ctx`` on every tier fact, and a note), never a tier of its
own: a prompt oomvet sends past that default would be cut by construction.
By hand: ``ollama run M`` with ``/set parameter num_ctx N`` and a long paste,
watching ``nvidia-smi -lms 50``.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace

from probes.base import ProbeEnv, restoring, server_settings
from probes.evidence import failure_fields, log_window, spill_error
from probes.result import ProbeResult, timed
from probes.oomtext import OOM_KINDS
from probes.step import sampled
from probes import predict, sanity, search, stability
from probes.calibrate import Calibration
from common.errors import ProbeError
from probes.notes import Note
from probes.texts import TokenCost, fill_prompt
from probes.units import fmt_size

TIER_NAMES = ("short", "medium", "long", "longer", "longest")
FILL = 0.85          # share of num_ctx the tier prompt fills (plus RETEST_ANSWER_GAP)
NUM_PREDICT = 16
#: the retest's answer is longer than a point's (probes/stability.py NUM_PREDICT);
#: a point's prompt makes up the difference, so the search proves the KV cache
#: the stability retest of a long input then fills
RETEST_ANSWER_GAP = stability.NUM_PREDICT - NUM_PREDICT


def fill_tokens(num_ctx: int, fill: float) -> int:
    """A point's prompt: ``fill`` of ``num_ctx`` plus :data:`RETEST_ANSWER_GAP`
    as far as there is room before the end, so prompt and answer touch as many
    tokens as the long-input retest's do (its prompt fills ``fill``, then 128
    answer tokens). A fill past the context (a test of truncation) is kept."""
    base = int(num_ctx * fill)
    return base + max(0, min(RETEST_ANSWER_GAP, num_ctx - NUM_PREDICT - 8 - base))


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
        num_parallel: int = 1, num_batch: int = 512, fill: float = FILL, fit_limit_bytes: int | None = None,
        max_loads: int = search.MAX_TRIALS, kv_type: str = "f16", check_release: bool = True) -> ProbeResult:
    """Find the largest ``num_ctx`` (a multiple of 256, up to the wanted or
    trained context) whose measured peak stays at or under ``fit_limit_bytes``.

    ``fit_limit_bytes`` is the caller's limit with the safety margin taken off
    (the rules' thresholds; ``env.limit_bytes`` as it is when None). The short
    tier (2048) is measured first; then the calibrated prediction is verified
    and the gap bisected (``probes/search.py``), each point a load plus a
    filling request, every one posted as a ``tier`` fact. Explicit ``tiers``
    measure those values in order instead, stopping at the first failure
    (the old ladder; ``--tiers`` and the bench use it). ``check_release``
    False leaves out the first point's second request (whether memory comes
    back between requests), for a caller that wants the peaks alone."""
    deadline = time.monotonic() + env.timeout_s
    result = ProbeResult("context", ok=True)
    fit_limit = fit_limit_bytes if fit_limit_bytes is not None else env.limit_bytes
    with restoring(env), server_settings(env, {"OLLAMA_NUM_PARALLEL": num_parallel}) as applied:
        trained = env.api.show(model).context_length
        version, engine = predict.server_engine(env.api)
        calibration = _calibration(env, model, engine, kv_type, num_batch, result)
        default = predict.default_ctx(engine, env.device, env.control.env(), trained)
        extra = {"server_default_ctx": default, "trained_ctx": trained, "fit_limit": fit_limit}
        cap = min(want_ctx or trained or 32768, trained or want_ctx or 32768)
        first = min(tiers) if tiers else min(START_CTX, cap)
        cost = calibrate(env, model, first)
        env.unload(model)
        slots = num_parallel if applied else 1
        facts: list[dict] = []
        steers: list[Steer] = []

        def measure(num_ctx: int) -> search.Trial:
            env.check(deadline)
            predicted = calibration.predict(num_ctx, slots) if calibration else None
            fact, steer = _tier(env, result, model, f"num_ctx {num_ctx}", num_ctx, num_ctx, num_batch, cost, fill,
                                check_release and not facts, deadline)
            fact.update(extra, predicted_peak=predicted)
            facts.append(fact)
            steers.append(steer)
            if calibration is not None and fact["peak"] is not None and (steer.ran or steer.over):
                # a load that ran and measured over the limit is still a point
                calibration.add(num_ctx, fact["peak"], slots)
            return search.Trial(num_ctx, steer.ran, fact["peak"], predicted, fact["error"], steer.ran_out,
                                fact.get("unmeasured"))

        if tiers:
            env.say("plan", tiers=tiers)
            for num_ctx in tiers:
                trial = measure(num_ctx)
                fits = trial.fits(fit_limit) if fit_limit is not None else (trial.ok or None)
                if not fits:
                    break
        else:
            env.say("plan", tiers=[first, cap])
            guess = (search.context_guess(calibration, fit_limit, slots) if calibration and fit_limit is not None
                     else (lambda lo, hi: hi))
            outcome = search.search_largest(measure, guess, fit_limit if fit_limit is not None else 1 << 62,
                                            first, cap, step=STEP, max_trials=max_loads)
            result.notes.append(_search_note(outcome, fit_limit, want_ctx, trained))
        _name_tiers(facts)
        _check_monotone(result, facts)
        crashed = next((f for f, s in zip(facts, steers) if not s.ran and not s.ran_out and f["error"]), None)
        if crashed is not None:
            result.ok, result.error = False, crashed["error"]
        if want_ctx and trained and want_ctx > trained:
            result.notes.append(Note("ctx.clamped", trained=trained, want=want_ctx))
        if want_ctx and default < want_ctx:
            result.notes.append(Note("ctx.default", default=default, engine=engine, version=version))
        if calibration is not None and calibration.points:
            # each point's forecast steered the search (``predicted_peak`` on its fact); the
            # table shows the final calibrated line, one curve that grows with the context,
            # not forecasts made from fewer points than the next one had
            for row in result.rows:
                row["fitted"] = calibration.predict(row["num_ctx"], slots)
            fit = calibration.to_dict()
            key = "ctx.calibrated" if fit["basis"] == "kv" else "ctx.calibrated_model"
            result.notes.append(Note(key, intercept=fmt_size(fit["intercept"]), slope=fit["slope"],
                                     residual="n/a" if fit["residual"] is None else fmt_size(fit["residual"])))
        result.facts.sort(key=lambda f: f["num_ctx"])
        result.rows.sort(key=lambda r: r["num_ctx"])  # the table reads as the curve, as the facts do
    return result


START_CTX = 2048
STEP = 256


def _calibration(env: ProbeEnv, model: str, engine: str, kv_type: str, num_batch: int,
                 result: ProbeResult) -> Calibration | None:
    """The memory model bound to this tag, or None (and a note) when the
    server's metadata cannot feed it: the search then bisects blind."""
    try:
        shape = predict.read_shape(env.api, model, on_gpu=env.on_gpu)
    except (ProbeError, ValueError) as exc:
        result.notes.append(Note("ctx.no_prediction", model=model, error=str(exc)))
        return None
    unknown = predict.no_prediction(shape, engine)
    if unknown:  # never guessed: its compute buffer was not measured on this engine
        result.notes.append(Note("ctx.no_prediction_arch", model=model, arch=unknown))
        return None
    return Calibration(predict.predictor(shape, engine, kv_type, num_batch))


def _check_monotone(result: ProbeResult, facts: list[dict]) -> None:
    """Tier peaks must grow with num_ctx; a tier whose peak falls clearly below
    a smaller one's was not measured right (an old runner in its idle
    reading, a source that lost sight of the process): not counted."""
    ordered = sorted(facts, key=lambda f: f["num_ctx"])
    for num_ctx, why in sanity.monotone_problems((f["num_ctx"], f["peak"]) for f in ordered):
        fact = next(f for f in ordered if f["num_ctx"] == num_ctx)
        fact.update(peak=None, measured=False, unmeasured=why)
        result.notes.append(f"num_ctx {num_ctx}: not counted: {why}")


def _name_tiers(facts: list[dict]) -> None:
    """short / medium / long by context, so the rules read "short ok, long
    fails" whatever order the search measured them in."""
    ordered = sorted(facts, key=lambda f: f["num_ctx"])
    for i, fact in enumerate(ordered):
        if i == 0:
            fact["name"] = "short"
        elif i == len(ordered) - 1:
            fact["name"] = "long"
        else:
            fact["name"] = "medium" if len(ordered) == 3 else f"medium {i}"


def _search_note(outcome: search.SearchResult, fit_limit: int | None, want_ctx: int | None,
                 trained: int | None) -> str:
    limit = fmt_size(fit_limit) if fit_limit is not None else "∞"
    if outcome.best is None:
        return Note("search.none", limit=limit, first=outcome.trials[0].value, stop=outcome.stop)
    if outcome.stop == "cap":
        key = ("search.why.cap_want" if want_ctx and outcome.cap == want_ctx
               else "search.why.cap_trained" if outcome.cap == trained else "search.why.cap_top")
        why = Note(key)
    elif outcome.stop in ("converged", "trials", "unmeasured", "error"):
        why = Note(f"search.why.{outcome.stop}", fail=outcome.first_fail, loads=outcome.loads)
    else:
        why = outcome.stop
    return Note("search.best", limit=limit, best=outcome.best, why=why, loads=outcome.loads)


def _tier(env: ProbeEnv, result: ProbeResult, model: str, name: str, num_ctx: int, num_ctx_option: int | None,
          num_batch: int, cost: TokenCost, fill: float, check_release: bool, deadline: float,
          tokens: int | None = None) -> dict:
    """Load at ``num_ctx_option`` (None: the server's default), send one prompt
    of ``tokens`` (default: ``fill`` of num_ctx), and record the tier."""
    units = cost.units_for(tokens or fill_tokens(num_ctx, fill))
    sent = cost.tokens(units)
    load_options = {"num_batch": num_batch} | ({"num_ctx": num_ctx_option} if num_ctx_option else {})
    options = dict(load_options, num_predict=NUM_PREDICT, temperature=0, seed=7)
    window = log_window(env)
    with sampled(env, f"context {name} num_ctx={num_ctx}") as step:
        step.mark("load")
        load = env.api.load(model, load_options)
        loaded_level = step.now()
        loaded = env.api.loaded(model) if load.ok else None
        placement = loaded.placement if loaded else None
        spilled = spill_error(env, model) if load.ok else None
        gen = None
        after_first = fill_peak = None
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
                # the tier's peak is the fill's: on llama-server a second, different
                # prompt makes the server copy the first one's KV into its host-RAM
                # prompt cache (--cache-ram), which this tier must not be charged for
                fill_peak = step.peak
                step.mark("check")  # the release check's request: drawn, never counted in the peak
                env.api.generate(model, fill_prompt(units, uuid.uuid4().hex[:8]), options)
                env.sleep(0.5, deadline)
        after = step.now()
    if load.ok:
        env.unload(model)
    # None: unmeasured (never 0), with the reason beside it
    window_peak = step.peak
    peak = fill_peak if fill_peak is not None and window_peak is not None else window_peak
    failed = load if not load.ok else (gen if gen is not None and not gen.ok else None)
    failure = failure_fields(failed, window, "load" if not load.ok else "request")
    error = load.error if not load.ok else (spilled or (gen.error if gen is not None and not gen.ok else None))
    # every call made got a reply (a request not sent because the load already
    # spilled or passed the limit is not a failure of the server)
    answered = load.ok and (gen is None or gen.ok)
    evaluated = gen.prompt_eval_count if gen is not None and gen.ok else None
    measured = step.measured
    fact = {"kind": "tier", "name": name, "num_ctx": num_ctx, "model": model, "prompt_tokens": evaluated,
            "sent_tokens": sent, "peak": peak, "answered": answered, "error": error, "placement": placement,
            "ps_size": loaded.size_bytes if loaded else None,  # Ollama's own figure (estimate or measured by version)
            # after load, after the first and after the second request of the same
            # size: the rules judge from these whether memory was released between requests
            "loaded_bytes": loaded_level if load.ok and measured else None,
            "after_first_bytes": after_first if measured else None,
            "after_second_bytes": after if after_first is not None and measured else None,
            # the peak through the second request too, when there was one
            "second_request_peak": window_peak if fill_peak is not None else None,
            **failure, **step.reading()}
    # the chart's peak is the tier's (the table's), not the release check's after it
    result.charts.append(replace(step.chart(), peak_bytes=peak))
    result.facts.append(fact)
    result.rows.append({"num_ctx": num_ctx, "sent tokens": sent, "evaluated": evaluated,
                        "after load": fact["loaded_bytes"], "peak": peak, "error": (error or "")[:60] or None})
    # how the search goes on (not posted: the rules read the fact themselves):
    # the server refused, ran out, spilled, or the peak passed the hard limit
    over = step.limit_bytes is not None and peak is not None and peak > step.limit_bytes
    ran_out = over or bool(spilled) or failure.get("failure") in OOM_KINDS
    return fact, Steer(answered and gen is not None and not over, ran_out, over)


@dataclass(frozen=True)
class Steer:
    """What the search needs from one tier to go on, kept apart from the
    posted fact: ``ran`` the request ran to the end under the hard limit,
    ``ran_out`` memory ran out (refused, spilled, or over the hard limit),
    ``over`` the peak passed the hard limit."""

    ran: bool
    ran_out: bool
    over: bool
