"""Interpreting rules: what a finished probe's readings mean.

Once a probe has finished (its ``probe_done`` read), exactly one of these
deciding rules turns its readings into a diagnosis and hands over to planning
(``moves.to_plan``): the baseline (120-123), the context tiers (130-139), the
quant ladder (140), the backend trials (150-154), a change's stability retest
(160-162) a confirming retest (165-166) and the
alternative's retest (167). Sentences:
common/messages/rules/sentences.yaml, under ``rule.<name>``.
"""
from __future__ import annotations

from rules import moves, steps
from rules.rulebook import TREE, deciding_rule, state
from rules.state import contradicting_level


def finished_in(stage: str):
    """The session waits in ``stage`` and its probe has finished."""
    return (state.stage == stage) & (state.finished == True)  # noqa: E712 - a rule condition, not Python truth


def _diagnose_and_adopt_largest_fit(st: dict, cause: str, advice: str) -> None:
    """A cause whose remedy is not a memory setting: the config is the largest
    context measured within the limit (retested before it is reported)."""
    moves.diagnose(st, cause, advice)
    moves.adopt_largest_fit(st)
    moves.to_plan(st)


CTX_DONE = finished_in("context")
WISH = finished_in("backend") & (state.knob_phase == "wish")
LADDER = finished_in("backend") & (state.knob_phase == "ladder")

with TREE:

    # --- the user's own setup ------------------------------------------------------------

    @deciding_rule(119, finished_in("reproduce"))
    def reproduction_read(st):
        # what it showed is kept for the diagnosis; the method goes on from
        # conservative settings either way
        if st["repro"] == "unrun":
            st["repro"] = "unmeasured"
        st["stage"] = "intake"
        st["awaiting"] = "none"
        st["again"] = True

    # --- the baseline --------------------------------------------------------------------

    @deciding_rule(120, finished_in("baseline") & (state.load == "no_fit"))
    def weights_do_not_fit_at_load(st):
        moves.refer_to_baseline(st)
        moves.diagnose(st, "weights")
        moves.to_plan(st)

    @deciding_rule(121, finished_in("baseline") & (state.load == "creeping"))
    def memory_creeps_while_idle(st):
        moves.establish_baseline(st)
        moves.diagnose(st, "not_released", "not_released")
        st["recheck_context"] = True  # the remedy is outside the config; the config still needs its context
        moves.to_plan(st)

    @deciding_rule(122, finished_in("baseline") & (state.load == "fits"))
    def loaded_within_limit(st):
        moves.establish_baseline(st)
        st["recheck_context"] = True
        moves.to_plan(st)

    @deciding_rule(123, finished_in("baseline"))
    def baseline_without_reading(st):
        st["problem"] = "unmeasured"  # not a cause: nothing was measured
        moves.to_plan(st)

    # --- the context tiers ---------------------------------------------------------------

    @deciding_rule(130, CTX_DONE & (state.tier_crash == True))  # noqa: E712
    def crash_without_oom_means_not_memory(st):
        moves.diagnose(st, "not_memory", "crash")
        moves.to_plan(st)

    @deciding_rule(131, CTX_DONE & (state.tier_mem_fail == True) & (state.first_tier_failed == True))  # noqa: E712
    def short_tier_fails_means_weights(st):
        moves.diagnose(st, "weights")
        moves.to_plan(st)

    @deciding_rule(132, CTX_DONE & (state.tier_mem_fail == True) & (state.short_of_want == True))  # noqa: E712
    def long_tier_fails_means_kv_cache(st):
        moves.diagnose(st, "kv_cache")
        moves.keep_kv_fit(st)
        moves.refer_to_wanted_context(st)
        moves.to_plan(st)

    @deciding_rule(133, CTX_DONE & (state.tier_mem_fail == True))  # noqa: E712
    def wanted_context_fits(st):
        moves.adopt_largest_fit(st)
        moves.to_plan(st)

    @deciding_rule(134, CTX_DONE & (state.tier_truncated == True) & (state.cause == "none"))  # noqa: E712
    def truncation_means_not_memory(st):
        # the fix for truncation: an explicit, measured context
        _diagnose_and_adopt_largest_fit(st, "not_memory", "truncation")

    @deciding_rule(135, CTX_DONE & (state.tier_not_back == True))  # noqa: E712
    def memory_not_back_means_not_released(st):
        _diagnose_and_adopt_largest_fit(st, "not_released", "not_released")

    @deciding_rule(136, CTX_DONE & (state.tier_fit_count > 0) & (state.tier_mem_fail == False)
                        & (state.cause == "none") & (state.want_beyond_trained == True))  # noqa: E712
    def wanted_context_beyond_the_trained_one(st):
        _diagnose_and_adopt_largest_fit(st, "not_memory", "trained_clamp")

    @deciding_rule(137, CTX_DONE & (state.tier_fit_count > 0) & (state.tier_mem_fail == False)
                        & (state.cause == "none") & (state.default_cuts_long_input == True))  # noqa: E712
    def server_default_cuts_long_input(st):
        # the fix: an explicit, measured context
        _diagnose_and_adopt_largest_fit(st, "not_memory", "default_truncates")

    @deciding_rule(138, CTX_DONE & (state.tier_fit_count > 0))
    def all_tiers_fit(st):
        moves.adopt_largest_fit(st)
        moves.to_plan(st)

    @deciding_rule(139, CTX_DONE)
    def context_without_reading(st):
        st["problem"] = "unmeasured"  # not a cause: nothing was measured
        moves.to_plan(st)

    # --- quant trials, backend trials and retests ----------------------------------------

    @deciding_rule(140, finished_in("quant") & (state.quant_contradiction == True))  # noqa: E712
    def recheck_contradicting_level(st):
        # more bits judged incoherent where fewer bits were not: one answer decided it,
        # so that level answers a second task once before it is given up
        level = contradicting_level(st)
        st["quant_recheck"] = level["tag"]
        st["quant_recheck_was"] = {"tag": level["tag"], "level": level["level"],
                                   "lower": min(st["quant_options"], key=lambda o: o.get("bits") or 0)["level"]}
        st["quant_rechecked"].append(level["tag"])
        return steps.probe(st, "quant", recheck=level["tag"])

    @deciding_rule(141, finished_in("quant"))
    def quant_ladder_read(st):
        st["quant_probed_tag"] = st["tag"]
        if st["probe_skipped"]:  # declined or skipped: no level was measured, none is ruled out
            st["quant_refused"] = True
        if st["quant_recheck"]:
            moves.say_recheck(st)
        moves.to_plan(st)


    @deciding_rule(150, WISH & (state.knob == "over"))
    def wished_concurrency_overflows(st):
        st["concurrency_checked"] = True
        moves.diagnose(st, "concurrency")
        moves.start_concurrency_ladder(st)
        moves.to_plan(st)

    @deciding_rule(151, WISH & (state.knob == "fits"))
    def wished_concurrency_fits(st):
        st["concurrency_checked"] = True
        moves.keep_backend_fit(st)
        moves.to_plan(st)

    @deciding_rule(152, WISH)
    def wished_concurrency_unmeasured(st):
        st["concurrency_checked"] = True
        st["advice"] = "concurrency_unmeasured"
        moves.to_plan(st)

    @deciding_rule(153, LADDER & (state.knob == "fits"))
    def backend_change_fits(st):
        moves.keep_backend_fit(st)
        moves.to_plan(st)

    @deciding_rule(154, LADDER)
    def backend_change_does_not_fit(st):
        moves.to_plan(st)

    @deciding_rule(160, finished_in("retest") & (state.retest == "refused"))
    def change_refused(st):
        moves.drop_candidate(st, refused=True)
        moves.to_plan(st)

    @deciding_rule(161, finished_in("retest") & (state.retest == "pass"))
    def retest_passed_keeps_change(st):
        moves.accept_candidate(st)
        moves.to_plan(st)

    @deciding_rule(162, finished_in("retest"))
    def retest_failed_reverts_change(st):
        moves.drop_candidate(st, refused=False)
        moves.to_plan(st)

    @deciding_rule(165, finished_in("confirm") & (state.retest == "pass"))
    def confirm_passed(st):
        st["config_verified"] = st["retest_measured"]
        # a pass whose memory was not measured cannot verify; retesting again would not either
        st["confirm_failed"] = not st["retest_measured"]
        moves.to_plan(st)

    @deciding_rule(166, finished_in("confirm"))
    def confirm_failed(st):
        st["config_verified"] = False
        st["confirm_failed"] = True
        moves.to_plan(st)

    @deciding_rule(167, finished_in("alternative"))
    def alternative_retested(st):
        # the other answer is shown beside the chosen one, verified or with why not;
        # the chosen config's own retest stands as it was
        moves.end_alternative(st, st["alt_kind"], dict(st["alt_config"]))
        moves.to_plan(st)
