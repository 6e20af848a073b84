"""The invariants the rules enforce themselves, whatever the caller does: one
knob per change, a stability retest after each change, context before
quantization before backend unless the user refuses, and no config
recommended that was not measured within the limit. Each is checked over
every branch of ``test_rules_tree`` and, where a caller could break it, by a
session that tries to.
"""
from __future__ import annotations

import pytest

from rules import configs
from rules import thresholds
from rules.engine import Advisor
from rules.kb import RULES
from tests.test_rules_script import (
    GiB, MODEL, Script, device, drive, label, load, passed, regressed, symptom, target, tier, trial,
)
from tests.test_rules_tree import CASES, DEV, KV_AT_8K, Case

IDS = [c.name for c in CASES]


@pytest.fixture(scope="session")
def runs():
    """Every branch driven once: name -> (case, trace, steps, facts, why)."""
    out = {}
    for case in CASES:
        adv, trace, steps = drive(case.first, Script(**case.script))
        out[case.name] = (case, trace, steps, adv.facts(), adv.why())
        adv.close()
    return out


@pytest.mark.parametrize("name", IDS)
def test_every_change_moves_exactly_one_knob(runs, name):
    _, _, steps, _, _ = runs[name]
    for step in (s for s in steps if s["action"] == "change"):
        assert configs.knobs_changed(step["base"], step["config"]) == {configs.KNOB_OF_KEY[step["knob"]]}
        assert step["config"][step["knob"]] == step["to"] != step["from"] == step["base"][step["knob"]]


def _cut(f: dict) -> bool:
    """The server evaluated clearly less than was sent (a tier's fill, the retest's task)."""
    sent = f.get("sent_tokens") or f.get("task_tokens")
    return bool(sent and f.get("prompt_tokens") is not None and f["prompt_tokens"] < 0.9 * sent)


@pytest.mark.parametrize("name", IDS)
def test_a_verified_config_is_exactly_the_one_the_last_retest_passed(runs, name):
    _, _, steps, facts, _ = runs[name]
    final = steps[-1]
    # an alternative's retest (measured beside the config, never in its place) verifies only the alternative
    beside = {configs.config_key(a["config"]) for a in final.get("alternatives") or [] if a.get("config")}
    retests = [f for f in facts if f["kind"] == "stability" and configs.config_key(f["config"]) not in beside]
    if final["verified"]:
        last = retests[-1]
        assert configs.config_key(last["config"]) == configs.config_key(final["config"])
        assert last["answered"] and not _cut(last)
    else:
        assert not retests or not final["config"] or configs.config_key(retests[-1]["config"]) != configs.config_key(
            final["config"]) or not retests[-1]["answered"] or _cut(retests[-1])


@pytest.mark.parametrize("name", IDS)
def test_a_recommended_config_was_measured_within_the_limit(runs, name):
    case, _, steps, facts, _ = runs[name]
    config = steps[-1]["config"]
    if config is None:
        return
    limits = [f.get("limit") or f["total"] for f in facts if f["kind"] == "device"]
    budgets = [f["value"] for f in facts if f["kind"] == "answer" and f["question"] == "budget" and f["value"]]
    limit = min(limits + budgets)
    fit = thresholds.fit_limit(limit)
    # from the raw fields, by this test's own arithmetic (not the rules' readings)
    measured_ctx = {f["options"]["num_ctx"] for f in facts if f["kind"] == "load" and f["answered"]}
    measured_ctx |= {f["num_ctx"] for f in facts if f["kind"] == "tier" and f["answered"] and f["peak"]
                     and f["peak"] <= fit and not _cut(f)}
    usable_tags = {f["tag"] for f in facts if f["kind"] == "quant_trial" and f["answered"]
                   and f.get("repeat_share", 1) <= thresholds.COHERENCE.max_repeat_share and f["peak"] <= fit}
    assert config["max_context_len"] in measured_ctx
    assert config["model"] in usable_tags | {MODEL}
    totals = [f["total"] for f in facts if f["kind"] == "device"]
    if totals and config["gpu_memory_utilization"] is not None:
        assert config["gpu_memory_utilization"] <= thresholds.utilization(fit, totals[0])


@pytest.mark.parametrize("name", IDS)
def test_no_question_is_asked_twice(runs, name):
    _, trace, _, _, _ = runs[name]
    asks = [t for t in trace if t.startswith("ask:")]
    assert len(asks) == len(set(asks))


@pytest.mark.parametrize("name", IDS)
def test_every_step_has_its_rule_its_facts_and_a_reason_in_both_languages(runs, name):
    _, _, steps, _, why = runs[name]
    assert [entry["next"] for entry in why] == steps
    assert [entry["n"] for entry in why] == list(range(1, len(steps) + 1))
    for entry in why:
        assert entry["rule"] in RULES and RULES[entry["rule"]].layer == "decide"
        assert entry["reason"] and entry["reason_zh"] and entry["reason"] != entry["reason_zh"]
        assert all(link["rule"] in RULES and link["note"] and link["note_zh"] for link in entry["chain"])
    assert all(f["kind"] in {"symptom", "target", "device", "answer"} for f in why[0]["because"])


@pytest.mark.parametrize("name", IDS)
def test_context_comes_before_quantization_for_the_kv_cache(runs, name):
    case, trace, steps, facts, _ = runs[name]
    if case.cause != "kv_cache" or "probe:quant" not in trace:
        return
    before_quant = trace[:trace.index("probe:quant")]
    kept = any(f["kind"] == "answer" and f["question"] == "keep_context" and f["value"] for f in facts) or any(
        f["kind"] == "target" and f.get("keep_context") for f in facts)
    assert kept or any(t.startswith("change:max_context_len") for t in before_quant)


@pytest.mark.parametrize("name", IDS)
def test_backend_knobs_only_when_concurrency_is_wanted(runs, name):
    case, trace, _, facts, _ = runs[name]
    wanted = any(f["kind"] == "target" and (f.get("want_parallel") or 0) > 1 for f in facts) or any(
        f["kind"] == "answer" and f["question"] == "want_parallel" and (f["value"] or 0) > 1 for f in facts)
    if any(t.startswith("probe:backend") for t in trace):
        assert wanted
        assert "probe:context" in trace[:trace.index(next(t for t in trace if t.startswith("probe:backend")))]


# --- a caller that tries to break them ----------------------------------------

def _to_first_change(adv):
    script = Script(answers={"want_ctx": None}, baseline=[[load()]], context=[KV_AT_8K])
    step = adv.post_many([symptom("long_input"), target(), DEV])
    while step["action"] != "change":
        step = adv.post_many(script.reply(step))
    return step


def test_a_change_does_not_move_on_without_its_stability_retest():
    with Advisor() as adv:
        change = _to_first_change(adv)
        assert adv.post_many([tier("long", 8192, 12 * GiB), {"kind": "probe_done", "probe": "context", "ok": True}]) \
            == change
        assert adv.post({"kind": "probe_done", "probe": "baseline", "ok": True}) == change
        after = adv.post_many(Script(stability=[passed()]).reply(change))
        assert after["action"] == "done" and after["verified"] and after["config"] == change["config"]


@pytest.mark.parametrize("refusal", [
    {"kind": "refusal", "remedy": "context"},
    {"kind": "answer", "question": "refuse", "value": "context"},
    {"kind": "answer", "question": "keep_context", "value": True},
])
def test_each_way_of_refusing_the_context_change_moves_on_to_quantization(refusal):
    with Advisor() as adv:
        _to_first_change(adv)
        assert label(adv.post(refusal)) == "probe:quant"
        assert adv.why()[-1]["chain"][-1]["rule"] == "change_refused"


def test_a_retest_of_another_config_does_not_verify_the_change():
    with Advisor() as adv:
        change = _to_first_change(adv)
        other = dict(change["config"], max_context_len=8192)
        after = adv.post_many([
            {"kind": "stability", "config": other, "eval_count": 256, "done_reason": "length", "answered": True,
             "repeat_share": 0.0, "errors": [], "peak": 1 * GiB, "measured": True},
            {"kind": "probe_done", "probe": "stability", "ok": True}])
        assert label(after) == "probe:quant"  # reverted: the next remedy, not a verified 4096
        assert adv.why()[-1]["chain"][0]["rule"] == "retest_on_another_config"


def test_a_session_done_stays_done():
    with Advisor() as adv:
        _, _, steps = drive([symptom("load")], Script(answers={"model": None}), advisor=adv)
        assert adv.post(load()) == steps[-1]
        assert len(adv.why()) == len(steps)


def test_a_session_that_never_settles_stops_at_the_step_limit():
    # every lower level regresses its retest: the ladder is long, the session is not
    limit = 12
    ladder = [trial(f"m:q{i}", f"Q{i}", peak=10 * GiB) for i in range(limit + 10)]
    script = Script(baseline=[[load(ok=False, error="out of memory")]], quant=[ladder],
                    stability=[regressed()] * (limit + 10))
    adv, trace, steps = drive([symptom("load"), target(want_ctx=2048), DEV], script, advisor=Advisor(max_steps=limit),
                              max_steps=limit + 5)
    try:
        assert trace == ["probe:baseline", "probe:quant"] + [f"change:quant_type=Q{i}" for i in range(limit - 2)] \
            + ["done"]
        assert steps[-1]["advice"] == "step_limit" and steps[-1]["fits"] is False
    finally:
        adv.close()


def test_the_default_step_limit_is_far_beyond_any_branch():
    assert thresholds.MAX_STEPS > 3 * max(len(case.steps) for case in CASES)


def test_a_wished_context_is_never_recommended_from_a_wish():
    # the user wants 16k; nothing above 4096 was measured, so 16k never appears
    case = Case("wish", [symptom("long_input"), target(want_ctx=16384), device()],
                dict(answers={"keep_context": False}, baseline=[[load()]], context=[KV_AT_8K], stability=[passed()],
                     quant=[[]]),
                [], "kv_cache", None, True, True)
    adv, trace, steps = drive(case.first, Script(**case.script))
    try:
        assert all(s.get("config", {}) is None or (s.get("config") or {}).get("max_context_len") != 16384
                   for s in steps)
        assert steps[-1]["config"]["max_context_len"] == 4096
    finally:
        adv.close()
