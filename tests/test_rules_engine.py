"""The Advisor as the session loop sees it: facts are checked at the door,
sessions do not see each other, a failing rule action fails the post that
caused it, the why chain names rules and facts, and a Python without
durable_rules gets one clear line.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rules.durable import load_durable
from rules.engine import Advisor, RulesError, RulesUnavailable
from rules.facts import FactError
from rules.kb import RULESET, lang
from tests.test_rules_script import (
    GiB, MODEL, Script, device, drive, load, oom_tier, passed, symptom, target, tier,
)
from tests.test_rules_tree import CASES, DEV, KV_AT_8K


def test_nothing_is_next_before_the_first_fact():
    with Advisor() as adv:
        assert adv.next is None and adv.diagnosis is None and adv.why() == [] and adv.facts() == []


def test_two_sessions_interleaved_do_not_see_each_other():
    a_case = next(c for c in CASES if c.name == "short_ok_long_fails_means_kv_cache")
    b_case = next(c for c in CASES if c.name == "load_fails_means_weights_then_a_lower_bit_tag_and_its_context")
    a, b = Advisor(), Advisor()
    a_script, b_script = Script(**a_case.script), Script(**b_case.script)
    a_steps, b_steps = [a.post_many(a_case.first)], [b.post_many(b_case.first)]
    try:
        while a_steps[-1]["action"] != "done" or b_steps[-1]["action"] != "done":
            if a_steps[-1]["action"] != "done":
                a_steps.append(a.post_many(a_script.reply(a_steps[-1])))
            if b_steps[-1]["action"] != "done":
                b_steps.append(b.post_many(b_script.reply(b_steps[-1])))
        assert a.diagnosis["cause"] == "kv_cache" and b.diagnosis["cause"] == "weights"
        assert len(a_steps) == len(a_case.steps) and len(b_steps) == len(b_case.steps)
        assert {f["_seq"] for f in a.facts()} == set(range(1, len(a.facts()) + 1))
        assert not any(f["kind"] == "quant_trial" for f in a.facts())
    finally:
        a.close()
        b.close()


def test_an_exception_inside_a_rule_action_fails_the_post():
    with Advisor() as adv:
        adv.post(symptom("load"))
        with pytest.raises(RulesError, match="self-test failure requested: boom"):
            adv.post({"kind": "answer", "question": "_selftest_raise", "value": "boom"})


def test_after_a_failed_action_the_next_post_reports_only_its_own_outcome():
    with Advisor() as adv:
        adv.post(symptom("load"))
        with pytest.raises(RulesError):
            adv.post({"kind": "answer", "question": "_selftest_raise", "value": "boom"})
        assert adv.post(target())["question"] == "want_ctx"


@pytest.mark.parametrize("fact, message", [
    ({"kind": "weather", "sunny": True}, "unknown fact kind 'weather'"),
    ({"kind": "tier", "name": "short", "num_ctx": 2048}, "tier fact is missing field"),
    ({"kind": "probe_done", "probe": "baseline"}, "probe_done fact is missing field 'ok'"),
    ({"kind": "probe_done", "probe": "warmup", "ok": True}, "probe_done.probe must be one of"),
    ({"kind": "refusal", "remedy": "sleep"}, "refusal.remedy must be one of"),
    ({"kind": "diagnosis", "cause": "weights"}, "made by the rules"),
    ({"kind": "next", "action": "done"}, "made by the rules"),
    ({"kind": "load", "model": MODEL, "options": {"x": {1, 2}}, "answered": True, "error": None, "size": None,
      "size_vram": None, "used_after": None, "used_settled": None, "drift_per_min": None}, "not plain data"),
])
def test_a_fact_outside_the_contract_is_refused(fact, message):
    with Advisor() as adv:
        with pytest.raises(FactError, match=message):
            adv.post(fact)


def test_a_stability_fact_must_say_whether_its_peak_was_measured():
    retest = {"kind": "stability", "config": {"model": MODEL}, "eval_count": 256, "done_reason": "length",
              "answered": True, "errors": [], "peak": 1 * GiB}
    with Advisor() as adv:
        with pytest.raises(FactError, match="stability fact is missing field 'measured'"):
            adv.post(retest)
        adv.post(dict(retest, measured=True))
        assert adv.facts()[-1]["measured"] is True


def test_a_batch_with_one_bad_fact_is_refused_whole():
    with Advisor() as adv:
        with pytest.raises(FactError):
            adv.post_many([symptom("load"), {"kind": "tier"}])
        assert adv.facts() == [] and adv.next is None


def test_a_fact_out_of_turn_is_kept_but_changes_nothing():
    with Advisor() as adv:
        first = adv.post_many([symptom("load"), target(want_ctx=2048), DEV])
        assert first["action"] == "probe" and first["probe"] == "baseline"
        assert adv.post(tier("short", 2048, 10 * GiB)) == first
        assert adv.facts()[-1]["kind"] == "tier"
        assert adv.why()[-1]["n"] == 1


def test_why_names_the_rule_and_the_facts_behind_each_step():
    adv, trace, steps = drive([symptom("long_input"), target(want_ctx=None), DEV],
                              Script(answers={"want_ctx": None}, baseline=[[load()]], context=[KV_AT_8K],
                                     stability=[passed()]))
    try:
        why = adv.why()
        change = why[3]
        assert change["rule"] == "reduce_context_to_largest_fit"
        assert [f["kind"] for f in change["because"]] == ["tier", "tier", "tier", "probe_done"]
        assert [link["rule"] for link in change["chain"]] == [
            "tier_fits", "tier_fits", "tier_error_says_out_of_memory", "probe_finished",
            "long_tier_fails_means_kv_cache"]
        assert "4096" in change["reason"] and "4096" in change["reason_zh"]
        assert why[-1]["rule"] == "finish_with_config"
    finally:
        adv.close()


def test_facts_and_why_are_copies():
    with Advisor() as adv:
        adv.post(symptom("load"))
        adv.facts()[0]["phase"] = "crash"
        adv.why()[0]["because"][0]["phase"] = "crash"
        assert adv.facts()[0]["phase"] == "load" and adv.why()[0]["because"][0]["phase"] == "load"


def test_a_closed_advisor_is_unusable_and_its_state_is_gone():
    adv = Advisor()
    adv.post(symptom("load"))
    adv.close()
    with pytest.raises(RulesError, match="closed"):
        adv.post(target())
    with pytest.raises(Exception, match="309"):
        lang.get_state(RULESET, adv.sid)
    adv.close()  # closing twice is harmless


def test_the_diagnosis_follows_the_rules():
    with Advisor() as adv:
        adv.post_many([symptom("long_input"), target(want_ctx=8192), device()])
        adv.post_many([load(), {"kind": "probe_done", "probe": "baseline", "ok": True}])
        assert adv.diagnosis is None
        step = adv.post_many([tier("short", 2048, 12 * GiB), oom_tier("medium", 4096),
                              {"kind": "probe_done", "probe": "context", "ok": True}])
        assert adv.diagnosis == {"cause": "kv_cache", "causes": ["kv_cache"], "problem": "kv_cache", "advice": None,
                                 "findings": []}
        assert step["action"] == "ask" and step["question"] == "keep_context"  # 2048 fits, 8192 is wanted


def test_a_done_step_carries_its_advice_in_both_languages():
    adv, _, steps = drive([symptom("load")], Script(answers={"model": None}))
    try:
        assert steps[-1]["advice"] == "need_model"
        assert "--model" in steps[-1]["advice_en"] and "--model" in steps[-1]["advice_zh"]
    finally:
        adv.close()


def test_without_durable_rules_the_error_is_one_clear_line():
    def broken_import(name):
        raise ImportError("undefined symbol: PyEval_CallObject")

    with pytest.raises(RulesUnavailable) as raised:
        load_durable(broken_import)
    message = str(raised.value)
    assert isinstance(raised.value, ImportError)
    assert message.startswith("durable_rules cannot be imported on Python 3.")
    assert "oomvet needs Python 3.11 or 3.12: undefined symbol: PyEval_CallObject" in message
    assert "\n" not in message


def test_durable_rules_loads_here():
    assert load_durable().__name__ == "durable.lang"


def test_where_durable_rules_is_missing_the_advisor_raises_and_the_module_still_imports():
    # a fresh interpreter in which `import durable` fails, as on Python 3.13
    code = ("import sys; sys.modules['durable'] = None\n"
            "from rules.engine import Advisor, RulesUnavailable\n"
            "try:\n    Advisor()\nexcept RulesUnavailable as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("durable_rules cannot be imported on Python 3.")
    assert out.stdout.count("\n") == 1


def test_the_readme_draws_every_deciding_rule_and_only_rules_that_exist():
    readme = (Path(__file__).resolve().parents[1] / "rules" / "README.md").read_text(encoding="utf-8")
    tree = readme[readme.index("## The tree, as encoded"):readme.index("## Invariants")]
    cited = set(re.findall(r"\b([a-z]+_[a-z_]+) \d{1,3}\b", tree))
    from rules.kb import RULES
    assert cited <= set(RULES), sorted(cited - set(RULES))
    deciding = {name for name, rule in RULES.items() if rule.layer in ("decide", "wait")}
    assert deciding - cited <= {"session_finished", "awaiting_measurements", "nothing_to_decide"}, \
        sorted(deciding - cited)
