"""Facts in any order, with any optional field missing or None, never break the
engine: durable_rules fails the whole process on a null or missing field in
the wrong comparison, so the rules are fed seeded random sessions of valid
facts and must answer each post with a step, never an error, and never loop.
"""
from __future__ import annotations

import random

import pytest

from rules.engine import Advisor
from rules.facts import PHASES, PROBES
from tests.test_rules_script import GiB, MODEL, SOUND, device, knob, load, symptom, target, tier, trial

SIZES = [None, 0, 1 * GiB, 12 * GiB, 23 * GiB, 30 * GiB]


def _maybe(rng, value):
    return rng.choice([value, None])


def _random_fact(rng: random.Random) -> dict:
    kind = rng.choice(["symptom", "target", "device", "load", "tier", "quant_trial", "knob_trial",
                       "stability", "answer", "probe_done", "refusal"])
    if kind == "symptom":
        return symptom(rng.choice(PHASES))
    if kind == "target":
        return target(model=_maybe(rng, MODEL), want_ctx=_maybe(rng, rng.choice([1024, 4096, 32768])),
                      want_parallel=_maybe(rng, rng.choice([1, 4])), budget=_maybe(rng, 16 * GiB))
    if kind == "device":
        return device(vendor=rng.choice(["nvidia", "cpu", "apple"]), limit=rng.choice([None, 8 * GiB]))
    if kind == "load":
        fact = load(ok=rng.random() < 0.7, used=rng.choice([GiB, 12 * GiB, 23 * GiB]),
                    placement=rng.choice(["gpu", "partial", "cpu"]), drift=rng.choice([0.0, 1e9]),
                    level=_maybe(rng, "Q8_0"))
        for field in ("used_after", "used_settled", "drift_per_min", "size", "size_vram"):
            if rng.random() < 0.3:
                fact[field] = None
        if rng.random() < 0.3:
            fact.pop("placement")
        return fact
    if kind == "tier":
        fact = tier(rng.choice(["short", "medium", "long"]), rng.choice([2048, 4096, 8192]),
                    peak=rng.choice(SIZES) or None, ok=rng.random() < 0.7, oom=rng.choice([None, True, False]),
                    truncated=rng.random() < 0.2, error=rng.choice([None, "out of memory", "exit status 2"]),
                    back=rng.choice([True, False, None]))
        if rng.random() < 0.3:
            fact["placement"] = rng.choice(["gpu", "partial", "cpu", None])
        return fact
    if kind == "quant_trial":
        fact = trial(rng.choice(["m:q4", "m:q6", MODEL]), rng.choice(["Q4_K_M", "Q6_K"]),
                     peak=rng.choice(SIZES) or None, ok=rng.random() < 0.8, coherent=rng.choice([True, False, None]))
        for field in [f for f in fact if f in SOUND]:  # a figure the engine compares with another may be missing
            if rng.random() < 0.15:
                del fact[field]
        return fact
    if kind == "knob_trial":
        fact = knob(rng.choice(["num_batch", "num_parallel", "kv_cache_type"]), rng.choice([256, 2, "q8_0", None]),
                    peak=rng.choice(SIZES) or None, ok=rng.random() < 0.7)
        if rng.random() < 0.3:
            fact["applied"] = rng.random() < 0.5
        return fact
    if kind == "stability":
        return {"kind": "stability", "config": rng.choice([{}, {"model": MODEL, "max_context_len": 2048}]),
                "eval_count": _maybe(rng, 256), "done_reason": _maybe(rng, "length"), "answered": rng.random() < 0.7,
                "prompt_tokens": rng.choice([None, 600, 1200]), "task_tokens": rng.choice([None, 1200]),
                "repeat_share": rng.choice([0.0, 0.1, 0.5]), "errors": [], "peak": rng.choice(SIZES),
                "measured": rng.random() < 0.8}
    if kind == "answer":
        return {"kind": "answer", "question": rng.choice(["symptom", "model", "want_ctx", "want_parallel", "budget",
                                                          "keep_context", "refuse", "colour"]),
                "value": rng.choice([None, True, False, 0, 4096, "8k", "yes", MODEL, "context", 1.5])}
    if kind == "probe_done":
        return {"kind": "probe_done", "probe": rng.choice(PROBES), "ok": rng.random() < 0.8,
                "error": rng.choice([None, "boom"])}
    return {"kind": "refusal", "remedy": rng.choice(["context", "quant", "backend"])}


@pytest.mark.parametrize("seed", range(8))
def test_random_valid_facts_never_break_the_session(seed):
    rng = random.Random(seed)
    with Advisor() as adv:
        for _ in range(40):
            step = adv.post(_random_fact(rng))
            assert step is not None and step["action"] in ("ask", "probe", "change", "done")
        assert len(adv.why()) <= 40


@pytest.mark.parametrize("seed", range(8))
def test_answering_each_step_with_random_measurements_always_ends(seed):
    # a caller that does what it is asked, with random outcomes: every session ends
    rng = random.Random(1000 + seed)
    with Advisor() as adv:
        step = adv.post_many([symptom(rng.choice(PHASES)), target(want_ctx=rng.choice([None, 4096, 8192]),
                                                                  want_parallel=rng.choice([None, 1, 4])), device()])
        for _ in range(80):
            if step["action"] == "done":
                break
            if step["action"] == "ask":
                facts = [{"kind": "answer", "question": step["question"],
                          "value": rng.choice([None, 4096, True, False, MODEL])}]
            elif step["action"] == "change" or step["probe"] == "stability":
                config = step["config"] if step["action"] == "change" else step["args"]["config"]
                facts = [{"kind": "stability", "config": config, "eval_count": 256, "done_reason": "length",
                          "answered": rng.random() < 0.8, "repeat_share": 0.0, "errors": [],
                          "peak": (peak := rng.choice([None, 12 * GiB, 23 * GiB])), "measured": peak is not None},
                         {"kind": "probe_done", "probe": "stability", "ok": True}]
            else:
                kinds = {"baseline": "load", "context": "tier", "quant": "quant_trial", "backend": "knob_trial"}
                facts = [f for f in (_random_fact(rng) for _ in range(30)) if f["kind"] == kinds[step["probe"]]][:3]
                facts.append({"kind": "probe_done", "probe": step["probe"], "ok": True})
            step = adv.post_many(facts)
        assert step["action"] == "done"
