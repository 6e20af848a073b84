"""The other answer to a KV cache overflow, measured beside the chosen one.

When the wanted context does not fit, two configs answer it: the first tag at
the largest context that fits (quality kept, context lost) and a lower-bit tag
at the wanted context (context kept, bits lost). The user's word picks one;
the other is measured too (its own stability retest) and shown beside it, so
a user sees what they gave up. These sessions are scripted (no server): what
the rules ask for, what the done step carries, and that the alternative's
retest never counts for the chosen config.
"""
from __future__ import annotations

from tests.test_rules_script import (GiB, MODEL, Script, device, drive, load, oom_tier, passed, regressed, symptom,
                                     target, tier, trial)

Q6 = "neohorse:8b-q6_K"
Q4 = "neohorse:8b-q4_K_M"
KV_AT_8K = [tier("short", 2048, 12 * GiB), tier("medium", 4096, 14 * GiB), oom_tier("long", 8192)]
Q6_TIERS = [tier("short", 2048, 8 * GiB), tier("medium", 4096, 10 * GiB), tier("long", 8192, 14 * GiB)]


def _session(keep: bool, quant: list, stability: list, context: list | None = None):
    script = Script(answers={"keep_context": keep}, baseline=[[load()]],
                    context=context or [KV_AT_8K], quant=quant, stability=stability)
    adv, trace, steps = drive([symptom("long_input"), target(want_ctx=8192), device()], script)
    adv.close()
    return trace, steps[-1], script


def test_context_may_shrink_chooses_full_bits_at_the_largest_fit_and_shows_the_lower_bit_at_the_wanted_context():
    trace, done, script = _session(False, [[trial(Q6, "Q6_K", peak=11 * GiB), trial(Q4, "Q4_K_M", peak=9 * GiB)]],
                                   [passed(), passed(peak=11 * GiB)])
    assert trace[-3:] == ["probe:quant", "probe:stability", "done"]
    # the lower-bit tags are tried at the wanted context, not the shortened one
    quant_step = next(s for s in script.history if s.get("probe") == "quant")
    assert quant_step["args"]["num_ctx"] == 8192
    assert done["verified"] is True and done["config"]["model"] == MODEL
    assert done["config"]["max_context_len"] == 4096 and done["unmet"] == ["max_context_len"]
    assert done["chosen_by"] == "context_may_shrink"
    [alt] = done["alternatives"]
    # the best quality first: Q6_K, not Q4_K_M, at the wanted context
    assert alt["kind"] == "quant" and alt["verified"] is True
    assert alt["config"]["model"] == Q6 and alt["config"]["quant_type"] == "Q6_K"
    assert alt["config"]["max_context_len"] == 8192 and alt["unmet"] == []
    assert alt["peak"] == 11 * GiB
    # the alternative's retest ran exactly its config
    retest = [s for s in script.history if s.get("probe") == "stability"][-1]
    assert retest["args"]["config"]["model"] == Q6 and retest["args"]["config"]["max_context_len"] == 8192


def test_keeping_the_context_chooses_the_lower_bit_and_shows_full_bits_at_the_largest_fit():
    trace, done, _ = _session(True, [[trial(Q6, "Q6_K", peak=11 * GiB)]], [passed(), passed(), passed()],
                              context=[KV_AT_8K, Q6_TIERS])
    assert trace[-2:] == ["probe:stability", "done"]
    assert done["config"]["model"] == Q6 and done["config"]["max_context_len"] == 8192
    assert done["verified"] is True and done["unmet"] == [] and done["chosen_by"] == "keep_context"
    [alt] = done["alternatives"]
    assert alt["kind"] == "context" and alt["verified"] is True
    assert alt["config"]["model"] == MODEL and alt["config"]["max_context_len"] == 4096
    assert alt["unmet"] == ["max_context_len"]


def test_an_alternative_whose_retest_fails_is_shown_unverified_with_why_and_the_chosen_config_stays_verified():
    trace, done, _ = _session(False, [[trial(Q6, "Q6_K", peak=11 * GiB)]], [passed(), regressed()])
    assert done["verified"] is True and done["config"]["model"] == MODEL
    [alt] = done["alternatives"]
    assert alt["verified"] is False and "cut at num_ctx" in alt["why"]
    assert done["unverified"] is None


def test_no_usable_lower_bit_tag_is_said_as_the_alternative_that_is_missing():
    trace, done, _ = _session(False, [[trial(Q6, "Q6_K", peak=30 * GiB)]], [passed()])
    assert trace[-2:] == ["probe:quant", "done"]
    [alt] = done["alternatives"]
    assert alt["kind"] == "quant" and alt["verified"] is False and alt.get("config") is None
    assert "no lower-bit tag" in alt["why"] and "8192" in alt["why_zh"]


def test_a_context_that_fits_the_wish_has_no_alternative_to_show():
    script = Script(baseline=[[load()]], context=[[tier("short", 2048, 12 * GiB), tier("long", 8192, 14 * GiB)]],
                    stability=[passed()])
    adv, trace, steps = drive([symptom("long_input"), target(want_ctx=8192), device()], script)
    adv.close()
    assert "probe:quant" not in trace and steps[-1]["alternatives"] == [] and steps[-1]["chosen_by"] is None


# --- a higher level failing where a lower one passes is re-checked once --------------

def _bits(fact, bits, **figures):
    return dict(fact, bits=bits, **figures)


def _weights_session(quant, stability):
    script = Script(baseline=[[load(ok=False, error="CUDA error: out of memory")]], quant=quant,
                    context=[[tier("short", 2048, 9 * GiB), tier("long", 8192, 12 * GiB)]], stability=stability)
    adv, trace, steps = drive([symptom("load"), target(want_ctx=8192), device()], script)
    diagnosis = adv.diagnosis
    adv.close()
    return trace, steps[-1], script, diagnosis


LOST = {"numbers_lost": 5}


def test_a_higher_level_judged_incoherent_where_a_lower_one_passes_is_rechecked_once_and_kept_if_it_passes():
    first = [_bits(trial(Q6, "Q6_K", peak=10 * GiB), 6.56, **LOST), _bits(trial(Q4, "Q4_K_M", peak=9 * GiB), 4.85)]
    trace, done, script, diagnosis = _weights_session([first, [_bits(trial(Q6, "Q6_K", peak=10 * GiB), 6.56)]],
                                                      [passed(), passed()])
    assert trace[:4] == ["probe:baseline", "probe:quant", "probe:quant", "change:quant_type=Q6_K"]
    recheck = [s for s in script.history if s.get("probe") == "quant"][1]
    # the one level, at the same context, on the second task
    assert recheck["args"]["candidates"] == [Q6] and recheck["args"]["task"] == "recheck"
    assert recheck["args"]["num_ctx"] == [s for s in script.history if s.get("probe") == "quant"][0]["args"]["num_ctx"]
    assert done["config"]["model"] == Q6 and done["verified"] is True
    [finding] = [f for f in diagnosis["findings"] if f["key"] == "recheck_contradicting_level"]
    assert "passed" in finding["en"] and "Q4_K_M" in finding["en"] and "Q6_K" in finding["zh"]


def test_a_level_that_fails_the_recheck_stays_out_and_the_contradiction_is_said():
    first = [_bits(trial(Q6, "Q6_K", peak=10 * GiB), 6.56, **LOST), _bits(trial(Q4, "Q4_K_M", peak=9 * GiB), 4.85)]
    again = [_bits(trial(Q6, "Q6_K", peak=10 * GiB), 6.56, **LOST)]
    trace, done, _, diagnosis = _weights_session([first, again], [passed(), passed()])
    # re-checked once, never twice
    assert trace.count("probe:quant") == 2 and "change:quant_type=Q4_K_M" in trace
    assert done["config"]["model"] == Q4
    [finding] = [f for f in diagnosis["findings"] if f["key"] == "recheck_contradicting_level"]
    assert "two tasks" in finding["en"]


def test_a_lower_level_failing_under_a_usable_higher_one_is_no_contradiction():
    first = [_bits(trial(Q6, "Q6_K", peak=10 * GiB), 6.56), _bits(trial(Q4, "Q4_K_M", peak=9 * GiB), 4.85, **LOST)]
    trace, done, _, diagnosis = _weights_session([first], [passed(), passed()])
    assert trace.count("probe:quant") == 1 and done["config"]["model"] == Q6
    assert not [f for f in diagnosis["findings"] if f["key"] == "recheck_contradicting_level"]



def _kv_session(stability: list, context: list):
    script = Script(answers={"keep_context": False}, baseline=[[load()]], context=[context],
                    quant=[[trial(Q6, "Q6_K", peak=30 * GiB)]], stability=stability)
    adv, trace, steps = drive([symptom("long_input"), target(want_ctx=8192), device()], script)
    diagnosis = adv.diagnosis
    adv.close()
    return trace, steps[-1], diagnosis


def test_a_shortened_context_whose_retest_goes_over_steps_down_to_the_next_measured_fit():
    # the retest's long input can weigh a little more than the search's tier at the same context:
    # a retest over the limit does not end the context step while a smaller fit was measured
    trace, done, diagnosis = _kv_session([passed(peak=30 * GiB), passed()], KV_AT_8K)
    assert [t for t in trace if t.startswith("change:")] == ["change:max_context_len=4096",
                                                             "change:max_context_len=2048"]
    assert done["verified"] is True and done["config"]["max_context_len"] == 2048
    [finding] = [f for f in diagnosis["findings"] if f["key"] == "retest_failed_reverts_change"]
    assert "4096" in finding["en"] and "30.0 GiB" in finding["en"] and "2048" in finding["zh"]


def test_a_retest_over_the_limit_with_no_smaller_fit_left_is_not_verified():
    trace, done, diagnosis = _kv_session([passed(peak=30 * GiB)],
                                         [tier("short", 2048, 12 * GiB), oom_tier("long", 8192)])
    assert [t for t in trace if t.startswith("change:")] == ["change:max_context_len=2048"]
    assert done["verified"] is False
    assert not [f for f in diagnosis["findings"] if f["key"] == "retest_failed_reverts_change"]
