"""Step 4 of the method: lower-bit sibling tags, each loaded and checked for coherence.

Levels come from ``/api/show`` (``details.quantization_level``), never from
the tag text, and are ordered by bits per weight. For each level below the
current one: load at the same ``num_ctx``, read the memory right after the load
(the fact's ``weights``: the weights with the KV cache and compute buffers at
that ``num_ctx``, so it is shown as "after load"), and ask
the fixed coherence task twice (new, then cached: coherence.PATHS says why),
comparing the answers with the current tag's two. The
KV cache does not shrink with weight quantization, and nothing here expects
it to. A tag the memory model predicts not to fit is not loaded (a note says
so); the order stays highest bits first, so the first tried is the best one
predicted to fit. Never pulls a model unless ``allow_pull``. By hand: ``ollama list``,
``ollama show M``, ``ollama run M:q4_K_M "..."``.
"""
from __future__ import annotations

import time

from probes import coherence, predict
from probes.base import ProbeEnv, restoring
from probes.evidence import spill_error
from probes.result import ProbeResult, timed
from probes.step import sampled
from common.errors import ModelNotFoundError, ProbeError
from probes.memmodel import bits_per_weight
from probes.notes import Note
from probes.texts import coherence_task
from probes.units import fmt_size

NUM_PREDICT = 96
GEN_OPTIONS = {"temperature": 0, "seed": 11, "num_predict": NUM_PREDICT}


def _predictions(env: ProbeEnv, tags: list[str], num_ctx: int) -> dict[str, int]:
    """Uncalibrated peak of each tag at ``num_ctx`` (no entry when the server's
    metadata cannot feed the memory model, or its architecture was never
    measured on this engine: that tag is then simply tried)."""
    out = {}
    try:
        _, engine = predict.server_engine(env.api)
    except ProbeError:
        return out
    for tag in tags:
        try:
            shape = predict.read_shape(env.api, tag, on_gpu=env.on_gpu)
        except (ProbeError, ValueError):
            continue
        if predict.no_prediction(shape, engine):  # an architecture never measured: tried, not guessed
            continue
        out[tag] = predict.predictor(shape, engine)(num_ctx, 1).peak
    return out


def _bits(level: str | None) -> float | None:
    try:
        return bits_per_weight(level) if level else None
    except ValueError:
        return None


def _answers(env: ProbeEnv, model: str, task: str, options: dict) -> list:
    """``model``'s answers to ``task`` on each of coherence.PATHS: the prompt
    new, then the same prompt again (cached); the first failed reply ends it."""
    answers = []
    for _ in coherence.PATHS:
        gen = env.api.generate(model, task, options)
        answers.append(gen)
        if not gen.ok:
            break
    return answers


def lower_levels(api, model: str, candidates: list[str] | None = None) -> list[tuple[float, str, str]]:
    """``(bits, tag, level)`` of every sibling tag on the server (or of
    ``candidates``) with fewer bits per weight than ``model``, highest bits
    first (levels from ``/api/show``, never from the tag's text)."""
    current_bits = _bits(api.show(model).quantization)
    levels = []
    for tag in (candidates if candidates is not None else api.siblings(model)):
        level = api.show(tag).quantization
        bits = _bits(level)
        if bits is not None and current_bits is not None and bits < current_bits:
            levels.append((bits, tag, level))
    return sorted(levels, reverse=True)


@timed
def run(env: ProbeEnv, model: str, num_ctx: int = 2048, allow_pull: bool = False,
        candidates: list[str] | None = None, fit_limit_bytes: int | None = None,
        task_name: str = "first", prediction_slack: float = 0.0) -> ProbeResult:
    """Try the lower-bit siblings of ``model``, highest bits first, skipping
    (with a note and an unmeasured fact) those the memory model predicts not
    to fit under ``fit_limit_bytes`` (the caller's limit with the margin; no
    skipping when None) even were the prediction ``prediction_slack`` too
    high. Where the server returns token log-probabilities the trial carries
    ``agreement`` and ``kl`` against the current tag.
    ``candidates`` limits the trial to those tags and ``task_name`` picks the
    coherence task (probes/texts.py COHERENCE_TASKS): the rules' re-check of
    one level is ``candidates=[tag], task_name="recheck"``."""
    deadline = time.monotonic() + env.timeout_s
    result = ProbeResult("quant", ok=True)
    task = coherence_task(task_name)
    with restoring(env):
        try:
            current = env.api.show(model)
        except ModelNotFoundError:
            if not allow_pull:
                raise
            env.api.pull(model)
            current = env.api.show(model)
        levels = lower_levels(env.api, model, candidates)
        env.say("plan", current=current.quantization, candidates=[t for _, t, _ in levels])
        if not levels:
            result.notes.append(Note("quant.no_sibling", model=model))
        options = dict(GEN_OPTIONS, num_ctx=num_ctx)
        reference = _answers(env, model, task, options)
        ref_texts = [g.text for g in reference] if reference[0].ok else None
        ref_steps = coherence.logprob_steps(env.api, model, task, options) if reference[0].ok else None
        if ref_steps is None:
            result.notes.append(Note("quant.no_logprobs"))
        env.unload(model)
        predicted = _predictions(env, [tag for _, tag, _ in levels], num_ctx)
        for bits, tag, level in levels:
            env.check(deadline)
            guess = predicted.get(tag)
            if fit_limit_bytes is not None and guess is not None and guess * (1 - prediction_slack) > fit_limit_bytes:
                figures = {"peak": fmt_size(guess), "limit": fmt_size(fit_limit_bytes),
                           "slack": f"{prediction_slack:.0%}"}
                why = Note("quant.not_loaded_predicted", **figures)  # the table's cell, in the session's language
                result.notes.append(Note("quant.predicted_over", tag=tag, **figures))
                result.facts.append({"kind": "quant_trial", "tag": tag, "level": level, "answered": False,
                                     "weights": None, "error": why, "bits": bits, "peak": None,
                                     "num_ctx": num_ctx, "predicted_peak": guess, "skipped": True,
                                     "unmeasured": why})
                result.rows.append({"tag": tag, "level": level, "bits": bits, "predicted": guess, "error": why})
                continue
            with sampled(env, f"quant {tag} ({level})") as step:
                step.mark("load")
                load = env.api.load(tag, {"num_ctx": num_ctx})
                weights = step.now() if load.ok else None
                loaded = env.api.loaded(tag) if load.ok else None
                spilled = spill_error(env, tag) if load.ok else None
                gen = None
                signal = None
                if load.ok and not spilled and not step.over_limit():  # over at load: the load is the OOM
                    step.mark("request")
                    answers = _answers(env, tag, task, options)
                    gen = answers[0]
                    steps = coherence.logprob_steps(env.api, tag, task, options) if ref_steps else None
                    signal = coherence.compare_logprobs(ref_steps, steps) if steps else None
            # every call made got a reply; a request not sent because the load
            # already spilled or passed the limit is not a failure of the server
            answered = load.ok and (gen is None or gen.ok)
            figures = (coherence.measure([g.text for g in answers], task, ref_texts, gen.done_reason)
                       if gen is not None and gen.ok else {})
            error = load.error or spilled or (gen.error if gen is not None else None)
            result.charts.append(step.chart())
            result.facts.append({
                "kind": "quant_trial", "tag": tag, "level": level, "answered": answered, "weights": weights,
                "error": error, **figures,
                "bits": bits, "peak": step.peak, "num_ctx": num_ctx, "predicted_peak": guess, "task": task_name,
                # where Ollama put it (ollama ps): a spill is read as one, not as a peak over the limit
                "placement": loaded.placement if loaded else None,
                "agreement": signal["agreement"] if signal else None, "kl": signal["kl"] if signal else None, **step.reading(),
            })
            result.rows.append({"tag": tag, "level": level, "bits": bits, "after load": weights, "peak": step.peak,
                                "predicted": guess,
                                "agreement": None if not signal else round(signal["agreement"], 3),
                                "kl": None if not signal or signal["kl"] is None else round(signal["kl"], 4),
                                "repeats": figures.get("repeat_share"), "error": error})
            if load.ok:
                env.unload(tag)
    return result
