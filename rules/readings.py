"""The reading rules, as one table: what each posted fact means.

Every posted fact is consumed by exactly one reading rule: the first, by
priority, whose conditions hold (a failed load before a spilled one before a
fitting one). A row names the rule, its priority, its condition on the fact and
on the session state, and what it records (rules/record.py); its note in the
why chain is its sentence (``rule.<name>`` in
common/messages/rules/sentences.yaml), formatted with the fact's fields. The readings of the current engine's facts are in
rules/current_engine.py.
"""
from __future__ import annotations

from functools import partial, reduce
from operator import and_

from rules import coherence, record, thresholds
from rules.rulebook import TREE, Reading, fact, in_state, opening_rule, register_readings, state

#: failure kinds (rules/facts.py FAILURES) that mean memory ran out; the probes
#: classify error texts and log lines with probes/oomtext.py and post the kind
#: as ``failure``, so no rule reads an error text itself
OOM_FAILURE = (fact.failure == "startup_oom") | (fact.failure == "runtime_oom") | (fact.failure == "killed")
SPILLED = (fact.placement == "partial") | (fact.placement == "cpu")

AT_REPRODUCE = state.awaiting == "reproduce"
AT_BASELINE = state.awaiting == "baseline"
AT_CONTEXT = state.awaiting == "context"
AT_QUANT = state.awaiting == "quant"
AT_BACKEND = state.awaiting == "backend"
AT_STABILITY = state.awaiting == "stability"
ON_GPU = state.gpu == True  # noqa: E712 - a rule condition, not Python truth
#: the session knows the hard limit (a device or a budget was posted)
HAS_LIMIT = state.has_limit == True  # noqa: E712
#: the server answered every call the measurement made
ANSWERED = fact.answered == True  # noqa: E712

REPRO = fact.kind == "reproduction"
LOAD = fact.kind == "load"
TIER = fact.kind == "tier"
TRIAL = fact.kind == "quant_trial"
KNOB = fact.kind == "knob_trial"
STAB = fact.kind == "stability"
PROBE_DONE = (fact.kind == "probe_done") & (fact.probe == in_state("awaiting"))


def repro(verdict: str):
    """The row's effect: record what the user's setup did (oom / spill / over / crash / cut / none / unmeasured)."""
    return partial(record.read_reproduction, verdict=verdict)


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
    Reading("note_ledger", 13, fact.kind == "ledger"),
    Reading("probe_broke_off", 10, PROBE_DONE & (fact.ok == False), state.awaiting != "none",  # noqa: E712
            record.finish_probe),
    Reading("probe_finished", 11, PROBE_DONE, state.awaiting != "none", record.finish_probe),
)


def _cut(sent):
    """The evaluated prompt is clearly shorter than ``sent`` (thresholds.truncated, as a rule's test)."""
    return fact.prompt_tokens < sent * (1 - thresholds.TRUNCATION_SLACK) - thresholds.TRUNCATION_SLACK_TOKENS


#: the evaluated prompt is shorter than what was sent: the server cut it at num_ctx
REPRO_CUT = _cut(fact.sent_tokens)

#: the user's own setup, under the load their symptom names (method step 1)
REPRODUCE = (
    Reading("repro_out_of_memory", 13, REPRO & (fact.answered == False) & OOM_FAILURE, AT_REPRODUCE,  # noqa: E712
            repro("oom")),
    Reading("repro_spilled_to_cpu", 14, REPRO & SPILLED, AT_REPRODUCE & ON_GPU, repro("spill")),
    Reading("repro_over_limit", 15, REPRO & (fact.peak > in_state("limit")), AT_REPRODUCE & HAS_LIMIT, repro("over")),
    Reading("repro_failed_without_oom", 16, REPRO & (fact.answered == False), AT_REPRODUCE,  # noqa: E712
            repro("crash")),
    Reading("repro_truncated", 17, REPRO & ANSWERED & REPRO_CUT, AT_REPRODUCE, repro("cut")),
    Reading("repro_ran", 18, REPRO & ANSWERED & +fact.peak & (fact.measured == True), AT_REPRODUCE,  # noqa: E712
            repro("none")),
    Reading("repro_unmeasured", 19, REPRO, AT_REPRODUCE, repro("unmeasured")),
)

#: the baseline load (method step 2)
BASELINE = (
    Reading("load_failed", 20, LOAD & (fact.answered == False), AT_BASELINE, load("no_fit")),  # noqa: E712
    Reading("load_over_limit", 21, LOAD & (fact.peak > in_state("limit")), AT_BASELINE & HAS_LIMIT, load("no_fit")),
    Reading("load_spilled_to_cpu", 22, LOAD & SPILLED, AT_BASELINE & ON_GPU, load("no_fit")),
    Reading("load_settled_above_limit", 23, LOAD & (fact.used_settled > in_state("fit_limit")), AT_BASELINE,
            load("no_fit")),
    Reading("load_above_limit", 24, LOAD & (fact.used_after > in_state("fit_limit")), AT_BASELINE,
            load("no_fit")),
    Reading("load_keeps_creeping", 25,
            LOAD & ANSWERED & (fact.drift_per_min > thresholds.SETTLE_DRIFT_BYTES_PER_MIN),
            AT_BASELINE, load("creeping")),
    Reading("load_fits", 26, LOAD & ANSWERED & (fact.used_after <= in_state("fit_limit")),
            AT_BASELINE, load("fits")),
    Reading("load_unmeasured", 27, LOAD, AT_BASELINE),
)

#: the evaluated prompt is shorter than what was sent: the server cut it at num_ctx
TIER_CUT = _cut(fact.sent_tokens)

#: context tiers (method step 3)
CONTEXT = (
    Reading("tier_error_says_out_of_memory", 30, TIER & (fact.answered == False) & OOM_FAILURE,  # noqa: E712
            AT_CONTEXT, tier("oom")),
    Reading("tier_spilled_to_cpu", 31, TIER & SPILLED, AT_CONTEXT & ON_GPU, tier("over")),
    Reading("tier_out_of_memory", 32, TIER & (fact.peak > in_state("limit")), AT_CONTEXT & HAS_LIMIT, tier("oom")),
    Reading("tier_truncated", 33, TIER & ANSWERED & TIER_CUT, AT_CONTEXT, tier("truncated")),
    Reading("tier_failed_without_oom", 34, TIER & (fact.answered == False), AT_CONTEXT, tier("crash")),  # noqa: E712
    Reading("tier_above_limit", 35, TIER & ANSWERED & (fact.peak > in_state("fit_limit")), AT_CONTEXT, tier("over")),
    Reading("tier_fits", 36, TIER & ANSWERED & (fact.peak <= in_state("fit_limit")), AT_CONTEXT,
            tier("fits")),
    Reading("tier_unmeasured", 37, TIER, AT_CONTEXT, tier("unmeasured")),
)


def _clause(field: str, op: str, bound):
    """One clause of a coherence check (rules/coherence.py) as a condition on the fact."""
    value = getattr(fact, field)
    if op == "not_in":
        return reduce(and_, (value != b for b in bound))
    if coherence.is_field_bound(bound):
        bound = getattr(fact, bound[0]) * bound[1]
    return {">": value.__gt__, "<": value.__lt__, "==": value.__eq__, ">=": value.__ge__, "<=": value.__le__}[op](bound)


def _incoherent(check: coherence.Check, priority: int) -> Reading:
    condition = reduce(and_, (_clause(*c) for c in check.clauses), TRIAL & ANSWERED)
    return Reading(check.rule, priority, condition, AT_QUANT, quant("incoherent"))


#: lower-bit quantizations (method step 4): a failed or spilled load, then each
#: sign of a broken answer (rules/coherence.py), then the peak
QUANT = (
    # not loaded: the memory model put it over the limit even were it QUANT_SKIP_SLACK too high
    Reading("quant_predicted_over", 39, TRIAL & (fact.skipped == True), AT_QUANT, quant("predicted_over")),  # noqa: E712
    Reading("quant_load_failed", 40, TRIAL & (fact.answered == False), AT_QUANT, quant("failed")),  # noqa: E712
    Reading("quant_spilled_to_cpu", 41, TRIAL & SPILLED, AT_QUANT & ON_GPU, quant("spilled")),
    *(_incoherent(check, 42 + i) for i, check in enumerate(coherence.CHECKS)),
    Reading("quant_above_limit", 42 + len(coherence.CHECKS), TRIAL & (fact.peak > in_state("fit_limit")), AT_QUANT,
            quant("over")),
    Reading("quant_usable", 43 + len(coherence.CHECKS),
            TRIAL & ANSWERED & +fact.answer_chars & (fact.peak <= in_state("fit_limit")), AT_QUANT, quant("usable")),
    Reading("quant_unmeasured", 44 + len(coherence.CHECKS), TRIAL, AT_QUANT, quant("unmeasured")),
)

#: backend knob trials (method step 5)
BACKEND = (
    Reading("knob_not_applied", 60, KNOB & (fact.applied == False), AT_BACKEND, knob("not_applied")),  # noqa: E712
    Reading("knob_failed", 61, KNOB & (fact.answered == False), AT_BACKEND, knob("over")),  # noqa: E712
    Reading("knob_spilled_to_cpu", 62, KNOB & SPILLED, AT_BACKEND & ON_GPU, knob("over")),
    Reading("knob_above_limit", 63, KNOB & (fact.peak > in_state("fit_limit")), AT_BACKEND, knob("over")),
    Reading("knob_fits", 64, KNOB & ANSWERED & (fact.peak <= in_state("fit_limit")), AT_BACKEND, knob("fits")),
    Reading("knob_unmeasured", 65, KNOB, AT_BACKEND, knob("unmeasured")),
)

#: the evaluated task is shorter than its own count: the server cut it at num_ctx
TASK_CUT = _cut(fact.task_tokens)

#: stability retests (method step 6)
STABILITY = (
    Reading("retest_on_another_config", 70, STAB & (fact._config_key != in_state("candidate_key")), AT_STABILITY,
            retest("mismatch")),
    Reading("retest_failed", 71, STAB & (fact.answered == False), AT_STABILITY, retest("fail")),  # noqa: E712
    Reading("retest_unmeasured", 72, STAB & (fact.measured == False) & -fact.peak, AT_STABILITY,  # noqa: E712
            retest("unmeasured")),
    Reading("retest_truncated", 73, STAB & TASK_CUT, AT_STABILITY, retest("fail")),
    Reading("retest_repeated", 74, STAB & (fact.repeat_share > thresholds.RETEST_MAX_REPEAT_SHARE),
            AT_STABILITY, retest("fail")),
    Reading("retest_above_limit", 75, STAB & (fact.peak > in_state("fit_limit")), AT_STABILITY, retest("fail")),
    Reading("retest_passed", 76, STAB & ANSWERED & +fact.peak, AT_STABILITY, retest("pass")),
    Reading("retest_without_peak", 77, STAB, AT_STABILITY, retest("unmeasured")),
)

#: everything the tree has no use for right now: kept in facts(), not used
OUT_OF_TURN = (Reading("fact_out_of_turn", 300, +fact.kind),)


with TREE:
    register_readings(SELF_TEST)
    # every session opens with this event: durable_rules 2.0.28 crashes in
    # delete_state (munmap_chunk: invalid pointer) for a session whose state
    # was set but never saw an event
    opening_rule("session_opened", fact.kind == "_open")
    for table in (USER_AND_DEVICE, REPRODUCE, BASELINE, CONTEXT, QUANT, BACKEND, STABILITY, OUT_OF_TURN):
        register_readings(table)
