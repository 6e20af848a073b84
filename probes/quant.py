"""Step 4 of the method: lower-bit sibling tags, each loaded and checked for coherence.

Levels come from ``/api/show`` (``details.quantization_level``), never from
the tag text, and are ordered by bits per weight. For each level below the
current one: load at the same ``num_ctx``, read the weights' memory, and ask
the fixed coherence task, comparing the answer with the current tag's. The
KV cache does not shrink with weight quantization, and nothing here expects
it to. Never pulls a model unless ``allow_pull``. By hand: ``ollama list``,
``ollama show M``, ``ollama run M:q4_K_M "..."``.
"""
from __future__ import annotations

import time

from probes import coherence
from probes.base import ProbeEnv, ProbeResult, restoring, sampled, spill_error, timed
from probes.errors import ModelNotFoundError
from probes.memmodel import bits_per_weight
from probes.texts import coherence_task

NUM_PREDICT = 96
GEN_OPTIONS = {"temperature": 0, "seed": 11, "num_predict": NUM_PREDICT}


def _bits(level: str | None) -> float | None:
    try:
        return bits_per_weight(level) if level else None
    except ValueError:
        return None


@timed
def run(env: ProbeEnv, model: str, num_ctx: int = 2048, allow_pull: bool = False,
        candidates: list[str] | None = None) -> ProbeResult:
    """Try every lower-bit sibling of ``model``, highest bits first."""
    deadline = time.monotonic() + env.timeout_s
    result = ProbeResult("quant", ok=True)
    task = coherence_task()
    with restoring(env):
        try:
            current = env.api.show(model)
        except ModelNotFoundError:
            if not allow_pull:
                raise
            env.api.client.pull(model)
            current = env.api.show(model)
        current_bits = _bits(current.quantization)
        tags = candidates if candidates is not None else env.api.siblings(model)
        levels = []
        for tag in tags:
            level = env.api.show(tag).quantization
            bits = _bits(level)
            if bits is not None and current_bits is not None and bits < current_bits:
                levels.append((bits, tag, level))
        levels.sort(reverse=True)
        env.say("plan", current=current.quantization, candidates=[t for _, t, _ in levels])
        if not levels:
            result.notes.append(f"no lower-bit sibling of {model} on the server "
                                f"(levels are read from `ollama show`, not from tag names)")
        options = dict(GEN_OPTIONS, num_ctx=num_ctx)
        reference = env.api.generate(model, task, options)
        ref_text = reference.text if reference.ok else None
        env.unload(model)
        for bits, tag, level in levels:
            env.check(deadline)
            with sampled(env, f"quant {tag} ({level})") as step:
                step.mark("load")
                load = env.api.load(tag, {"num_ctx": num_ctx})
                weights = step.now() if load.ok else None
                spilled = spill_error(env, tag) if load.ok else None
                gen = None
                if load.ok and not spilled and not step.over_limit():  # over at load: the load is the OOM
                    step.mark("request")
                    gen = env.api.generate(tag, task, options)
            ok = load.ok and gen is not None and gen.ok and not step.over_limit()
            verdict = coherence.check(gen.text, task, ref_text, gen.done_reason) if gen is not None and gen.ok else None
            error = load.error or spilled or (gen.error if gen is not None else None)
            if step.over_limit():
                error = error or step.over_limit_text()
            result.charts.append(step.chart())
            result.facts.append({
                "kind": "quant_trial", "tag": tag, "level": level, "ok": ok, "weights": weights,
                "coherent": verdict.coherent if verdict else None,
                "issues": list(verdict.issues) if verdict else ([error] if error else []),
                "bits": bits, "peak": step.peak, "num_ctx": num_ctx, **step.reading(),
            })
            result.rows.append({"tag": tag, "level": level, "bits": bits, "weights": weights, "peak": step.peak,
                                "ok": ok, "coherent": verdict.coherent if verdict else None,
                                "issues": "; ".join(verdict.issues) if verdict and verdict.issues else error})
            if load.ok:
                env.unload(tag)
    return result
