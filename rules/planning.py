"""Planning rules: the remedies, in the method's order.

With the session in stage ``plan`` (a probe interpreted, a problem open or
none), exactly one of these deciding rules issues the next step. Their
priorities are the method's order of remedies: the context (170-171), then
lower-bit quantization (173-177), then the backend under concurrency
(178-182), then the reports (183-185), the wished concurrency and a last retest
(186-189), the other answer measured beside the chosen one (190-191) and the
finish (193-194). Sentences:
common/messages/rules/sentences.yaml, under ``rule.<name>``.
"""
from __future__ import annotations

from common.catalog import pair
from rules import configs, moves, steps
from rules.rulebook import TREE, deciding_rule, state, waiting_rule

PLAN = state.stage == "plan"
WEIGHTS_OR_KV = (state.problem == "weights") | (state.problem == "kv_cache")
KV = PLAN & (state.problem == "kv_cache")
CONC = PLAN & (state.problem == "concurrency") & (state.backend_refused == False)  # noqa: E712
NONE = PLAN & (state.problem == "none")


def _apply_backend_fit(st: dict) -> dict:
    """Change the one knob whose backend trial fit (``knob_try``), measured at that trial's peak."""
    key, value = st["knob_try"]
    return steps.change(st, key, value, st["backend_fit"].get("peak"), "backend")

with TREE:

    # --- the KV cache runs out: the context first -----------------------------------

    @deciding_rule(170, KV & (state.want_ctx > 0) & (state.q_keep_context == "missing")
                        & (state.context_blocked == False))  # noqa: E712
    def ask_keep_context(st):
        return steps.ask(st, "keep_context")

    @deciding_rule(171, KV & (state.context_blocked == False) & (state.tier_best_ctx > 0))  # noqa: E712
    def reduce_context_to_largest_fit(st):
        return steps.change(st, "max_context_len", st["tier_best_ctx"], st["tier_best_peak"], "context")

    # --- lower-bit weights (the weights, or the KV cache at the wanted context) ----------

    @deciding_rule(173, PLAN & WEIGHTS_OR_KV & (state.quant_refused == False) & (state.quant_probed == True)
                        & (state.quant_left == True))  # noqa: E712
    def try_lower_quant(st):
        option = next(o for o in st["quant_options"] if o["tag"] not in st["quant_tried"])
        return steps.change(st, "quant_type", option["level"], option["peak"], "quant", tag=option["tag"])

    @deciding_rule(174, PLAN & WEIGHTS_OR_KV & (state.quant_refused == False)
                        & (state.quant_probed == False))  # noqa: E712
    def look_for_lower_quant(st):
        return steps.probe(st, "quant")

    @deciding_rule(169, PLAN & (state.problem == "weights") & (state.quant_refused == True))  # noqa: E712
    def weights_without_lower_quant(st):
        # the user declined the lower-bit levels: none was measured, so none is said not to fit
        return steps.done(st, False, "quant_declined")

    @deciding_rule(175, PLAN & (state.problem == "weights"))
    def weights_need_another_device(st):
        return steps.done(st, False, "another_device")

    @deciding_rule(176, KV)
    def wanted_context_does_not_fit(st):
        return steps.done(st, False, "context_unmet", config=configs.best_tier_config(st))

    @deciding_rule(177, PLAN & (state.recheck_context == True))  # noqa: E712
    def measure_context_tiers(st):
        return steps.probe(st, "context")

    # --- the server's own slots overflowed where fewer fit -------------------------------

    @deciding_rule(172, NONE & (state.slots_overflow == True) & (state.slots_checked == False)  # noqa: E712
                        & (state.recheck_context == False) & (state.backend_refused == False))  # noqa: E712
    def server_slots_overflow(st):
        st["slots_checked"] = True
        moves.diagnose(st, "concurrency", "fewer_slots")
        moves.start_concurrency_ladder(st, slots=st["repro_parallel"])
        key, value = moves.next_rung(st)
        return steps.probe(st, "backend", base=st["reference"], key=key, value=value, phase="ladder")

    # --- concurrency overflows: one backend knob at a time ------------------------------

    @deciding_rule(178, CONC & (state.want_parallel > 1) & (state.q_keep_concurrency == "missing")
                        & (state.has_backend_fit == False) & (state.ladder_drops_wish == True))  # noqa: E712
    def ask_keep_concurrency(st):
        return steps.ask(st, "keep_concurrency")

    @deciding_rule(179, CONC & (state.has_backend_fit == True))  # noqa: E712
    def apply_backend_change(st):
        return _apply_backend_fit(st)

    @deciding_rule(180, CONC & (state.ladder_left == True))  # noqa: E712
    def try_next_backend_knob(st):
        key, value = moves.next_rung(st)
        return steps.probe(st, "backend", base=st["reference"], key=key, value=value, phase="ladder")

    # --- reports: a confirming retest first ------------------------------------------

    @deciding_rule(181, PLAN & ((state.problem == "not_memory") | (state.problem == "not_released")
                                | (state.problem == "concurrency"))
                        & (state.has_config == True) & (state.config_verified == False)  # noqa: E712
                        & (state.confirm_failed == False))  # noqa: E712
    def confirm_before_report(st):
        return steps.probe(st, "stability")

    @deciding_rule(182, PLAN & (state.problem == "concurrency"))
    def concurrency_does_not_fit(st):
        return steps.done(st, False, "concurrency_unmet")

    @deciding_rule(183, PLAN & (state.problem == "not_memory"))
    def report_not_memory(st):
        return steps.done(st, True, st["advice"])

    @deciding_rule(184, PLAN & (state.problem == "not_released"))
    def report_not_released(st):
        return steps.done(st, True, "not_released")

    @deciding_rule(185, PLAN & (state.problem == "unmeasured"))
    def report_unmeasured(st):
        return steps.done(st, False, "probe_failed")

    # --- no problem open: the wished concurrency, a last retest, done ------------------

    @deciding_rule(186, NONE & (state.cause == "none") & (state.repro_ctx_overflow == True))  # noqa: E712
    def reproduced_context_overflow(st):
        # the user's own context failed and the config runs a smaller one measured
        # to fit: the KV cache was the growth, whatever the tiers alone showed
        moves.name_cause(st, "kv_cache", "default_ctx_overflows" if st["ctx_unset"] else "context_reduced")
        st["again"] = True

    @deciding_rule(187, NONE & (state.has_backend_fit == True) & (state.backend_refused == False))  # noqa: E712
    def apply_wished_concurrency(st):
        return _apply_backend_fit(st)

    @deciding_rule(188, NONE & (state.wants_concurrency == True) & (state.concurrency_checked == False)
                        & (state.backend_refused == False))  # noqa: E712
    def check_wished_concurrency(st):
        return steps.probe(st, "backend", base=st["config"], key="max_concurrency",
                           value=st["want_parallel"], phase="wish")

    @deciding_rule(189, NONE & (state.has_config == True) & (state.config_verified == False)
                        & (state.confirm_failed == False))  # noqa: E712
    def confirm_final_config(st):
        return steps.probe(st, "stability")

    # --- the other answer to a KV cache overflow, measured beside the chosen one --------

    @deciding_rule(190, NONE & (state.alt_route == "quant") & (state.quant_probed == False))  # noqa: E712
    def look_for_alternative_quant(st):
        # the context was shortened: what a lower-bit tag does at the wanted one
        st["alt_phase"] = "quant"
        return steps.probe(st, "quant", num_ctx=st["want_ctx"])

    @deciding_rule(191, NONE & ((state.alt_route != "none") | (state.alt_phase == "quant")))
    def retest_alternative(st):
        route = "quant" if st["alt_phase"] == "quant" or st["alt_route"] == "quant" else "context"
        cfg = moves.alternative_of(st, route)
        if cfg is None:
            moves.end_alternative(st, route, None, *pair("finding.retest_alternative.none_usable",
                                                         want=st["want_ctx"]))
            st["again"] = True
            return None
        moves.start_alternative(st, route, cfg)
        return steps.probe(st, "stability", config=cfg)

    @deciding_rule(193, NONE & (state.has_config == True))  # noqa: E712
    def finish_with_config(st):
        advice = st["advice"] or ("concurrency_reduced" if st["concurrency_short"] else "") \
            or ("no_oom" if st["cause"] == "none" else "")
        return steps.done(st, True, advice)

    @deciding_rule(194, PLAN)
    def nothing_fits(st):
        return steps.done(st, False, "probe_failed")

    @waiting_rule(250, state.stage != "none")
    def nothing_to_decide(st):
        pass
