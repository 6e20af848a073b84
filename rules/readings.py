"""The reading rules, as one table: what each posted fact means.

Every posted fact is consumed by exactly one reading rule: the first, by
priority, whose conditions hold (a failed load before a spilled one before a
fitting one). A row names the rule, its priority, its condition on the fact and
on the session state, and what it records (rules/record.py); its note in the
why chain is its sentence in rules/sentences.yaml, formatted with the fact's
fields. The readings of the current engine's facts are in
rules/current_engine.py.
"""
from __future__ import annotations

from functools import partial

from rules import record, thresholds
from rules.rulebook import TREE, Reading, fact, in_state, opening_rule, register_readings, state

#: failure kinds (rules/facts.py FAILURES) that mean memory ran out; the probes
#: classify error texts and log lines with probes/oomtext.py and post the kind
#: as ``failure``, so no rule reads an error text itself
OOM_FAILURE = (fact.failure == "startup_oom") | (fact.failure == "runtime_oom") | (fact.failure == "killed")
SPILLED = (fact.placement == "partial") | (fact.placement == "cpu")

AT_BASELINE = state.awaiting == "baseline"
AT_CONTEXT = state.awaiting == "context"
AT_QUANT = state.awaiting == "quant"
AT_BACKEND = state.awaiting == "backend"
AT_STABILITY = state.awaiting == "stability"
ON_GPU = state.gpu == True  # noqa: E712 - a rule condition, not Python truth

LOAD = fact.kind == "load"
TIER = fact.kind == "tier"
TRIAL = fact.kind == "quant_trial"
KNOB = fact.kind == "knob_trial"
STAB = fact.kind == "stability"
PROBE_DONE = (fact.kind == "probe_done") & (fact.probe == in_state("awaiting"))


def load(verdict: str):
    """The row's effect: record the load with ``verdict`` (no_fit / creeping / fits)."""
    return partial(record.read_load, verdict=verdict)


def tier(verdict: str):
    """The row's effect: record the tier with ``verdict`` (fits / oom / over / crash / truncated / unmeasured)."""
    return partial(record.read_tier, verdict=verdict)


def quant(verdict: str):
    """The row's effect: record the quant trial as usable, or why it is rejected."""
    return partial(record.read_quant, verdict=verdict)


def knob(verdict: str):
    """The row's effect: record the knob trial with ``verdict`` (fits / over / not_applied / unmeasured)."""
    return partial(record.read_knob, verdict=verdict)


def retest(verdict: str):
    """The row's effect: record the retest with ``verdict`` (pass / fail / mismatch / unmeasured)."""
    return partial(record.read_retest, verdict=verdict)


# Each row: Reading(name, priority, condition on the fact, condition on the state, what it records).
# `== True` / `== False` in a condition build a rule condition, not Python truth (hence noqa: E712).

#: the self-test: the only way to make an action raise on purpose, so the test
#: suite can prove an action's exception fails the post
SELF_TEST = (
    Reading("selftest_raise", 1, (fact.kind == "answer") & (fact.question == "_selftest_raise"),
            records=record.raise_selftest),
)

#: what the user and the device say, and a probe ending (any stage)
USER_AND_DEVICE = (
    Reading("note_symptom", 10, fact.kind == "symptom", records=record.note_symptom),
    Reading("note_target", 10, fact.kind == "target", records=record.note_target),
    Reading("note_device", 10, fact.kind == "device", records=record.note_device),
    Reading("note_answer", 11, (fact.kind == "answer") & +fact.value, records=record.note_answer),
    Reading("note_skipped_answer", 12, fact.kind == "answer", records=record.note_skipped_answer),
    Reading("note_refusal", 10, fact.kind == "refusal", records=record.note_refusal),
    Reading("note_stop", 10, fact.kind == "stop", records=record.note_stop),
    Reading("probe_broke_off", 10, PROBE_DONE & (fact.ok == False), state.awaiting != "none",  # noqa: E712
            record.finish_probe),
    Reading("probe_finished", 11, PROBE_DONE, state.awaiting != "none", record.finish_probe),
)

#: the baseline load (method step 2)
BASELINE = (
    Reading("load_failed", 20, LOAD & (fact.ok == False), AT_BASELINE, load("no_fit")),  # noqa: E712
    Reading("load_over_limit", 21, LOAD & (fact.over_limit == True), AT_BASELINE, load("no_fit")),  # noqa: E712
    Reading("load_spilled_to_cpu", 22, LOAD & SPILLED, AT_BASELINE & ON_GPU, load("no_fit")),
    Reading("load_settled_above_limit", 23, LOAD & (fact.used_settled > in_state("fit_limit")), AT_BASELINE,
            load("no_fit")),
    Reading("load_above_limit", 24, LOAD & (fact.used_after > in_state("fit_limit")), AT_BASELINE,
            load("no_fit")),
    Reading("load_keeps_creeping", 25,
            LOAD & (fact.ok == True) & (fact.drift_per_min > thresholds.SETTLE_DRIFT_BYTES_PER_MIN),  # noqa: E712
            AT_BASELINE, load("creeping")),
    Reading("load_fits", 26, LOAD & (fact.ok == True) & (fact.used_after <= in_state("fit_limit")),  # noqa: E712
            AT_BASELINE, load("fits")),
    Reading("load_unmeasured", 27, LOAD, AT_BASELINE),
)

#: context tiers (method step 3)
CONTEXT = (
    Reading("tier_out_of_memory", 30, TIER & (fact.ok == False) & (fact.oom == True), AT_CONTEXT,  # noqa: E712
            tier("oom")),
    Reading("tier_error_says_out_of_memory", 31, TIER & (fact.ok == False) & OOM_FAILURE, AT_CONTEXT,  # noqa: E712
            tier("oom")),
    Reading("tier_spilled_to_cpu", 32, TIER & SPILLED, AT_CONTEXT & ON_GPU, tier("over")),
    Reading("tier_truncated", 33, TIER & (fact.truncated == True), AT_CONTEXT, tier("truncated")),  # noqa: E712
    Reading("tier_failed_without_oom", 34, TIER & (fact.ok == False), AT_CONTEXT, tier("crash")),  # noqa: E712
    Reading("tier_above_limit", 35, TIER & (fact.ok == True) & (fact.peak > in_state("fit_limit")),  # noqa: E712
            AT_CONTEXT, tier("over")),
    Reading("tier_fits", 36, TIER & (fact.ok == True) & (fact.peak <= in_state("fit_limit")),  # noqa: E712
            AT_CONTEXT, tier("fits")),
    Reading("tier_unmeasured", 37, TIER, AT_CONTEXT, tier("unmeasured")),
)

#: lower-bit quantizations (method step 4)
QUANT = (
    Reading("quant_load_failed", 40, TRIAL & (fact.ok == False), AT_QUANT, quant("failed")),  # noqa: E712
    Reading("quant_spilled_to_cpu", 41, TRIAL & SPILLED, AT_QUANT & ON_GPU, quant("spilled")),
    Reading("quant_incoherent", 42, TRIAL & (fact.coherent == False), AT_QUANT, quant("incoherent")),  # noqa: E712
    Reading("quant_above_limit", 43, TRIAL & (fact.peak > in_state("fit_limit")), AT_QUANT, quant("over")),
    Reading("quant_usable", 44,
            TRIAL & (fact.ok == True) & (fact.coherent == True) & (fact.peak <= in_state("fit_limit")),  # noqa: E712
            AT_QUANT, quant("usable")),
    Reading("quant_unmeasured", 45, TRIAL, AT_QUANT, quant("unmeasured")),
)

#: backend knob trials (method step 5)
BACKEND = (
    Reading("knob_not_applied", 50, KNOB & (fact.applied == False), AT_BACKEND, knob("not_applied")),  # noqa: E712
    Reading("knob_failed", 51, KNOB & (fact.ok == False), AT_BACKEND, knob("over")),  # noqa: E712
    Reading("knob_spilled_to_cpu", 52, KNOB & SPILLED, AT_BACKEND & ON_GPU, knob("over")),
    Reading("knob_above_limit", 53, KNOB & (fact.peak > in_state("fit_limit")), AT_BACKEND, knob("over")),
    Reading("knob_fits", 54, KNOB & (fact.ok == True) & (fact.peak <= in_state("fit_limit")),  # noqa: E712
            AT_BACKEND, knob("fits")),
    Reading("knob_unmeasured", 55, KNOB, AT_BACKEND, knob("unmeasured")),
)

#: stability retests (method step 6)
STABILITY = (
    Reading("retest_on_another_config", 60, STAB & (fact._config_key != in_state("candidate_key")), AT_STABILITY,
            retest("mismatch")),
    Reading("retest_failed", 61, STAB & (fact.ok == False), AT_STABILITY, retest("fail")),  # noqa: E712
    Reading("retest_unmeasured", 62, STAB & (fact.measured == False) & -fact.peak, AT_STABILITY,  # noqa: E712
            retest("unmeasured")),
    Reading("retest_truncated", 63, STAB & (fact.truncated == True), AT_STABILITY, retest("fail")),  # noqa: E712
    Reading("retest_repeated", 64, STAB & (fact.repeat_share > thresholds.COHERENCE.max_repeated_4gram_ratio),
            AT_STABILITY, retest("fail")),
    Reading("retest_above_limit", 65, STAB & (fact.peak > in_state("fit_limit")), AT_STABILITY, retest("fail")),
    Reading("retest_passed", 66, STAB & (fact.ok == True) & +fact.peak, AT_STABILITY, retest("pass")),  # noqa: E712
    Reading("retest_without_peak", 67, STAB, AT_STABILITY, retest("unmeasured")),
)

#: everything the tree has no use for right now: kept in facts(), not used
OUT_OF_TURN = (Reading("fact_out_of_turn", 300, +fact.kind),)


with TREE:
    register_readings(SELF_TEST)
    # every session opens with this event: durable_rules 2.0.28 crashes in
    # delete_state (munmap_chunk: invalid pointer) for a session whose state
    # was set but never saw an event
    opening_rule("session_opened", fact.kind == "_open")
    for table in (USER_AND_DEVICE, BASELINE, CONTEXT, QUANT, BACKEND, STABILITY, OUT_OF_TURN):
        register_readings(table)
