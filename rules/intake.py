"""Before the tree: the guards, the waiting rules, and the start.

These deciding rules answer a ``_decide`` before any interpretation or plan: a
session that ran too long or must stop ends here (priorities 99-100), a session
still waiting for an answer or a measurement keeps its step (101-103), and a
new session asks what it needs to know, then reproduces the user's own setup and
starts the baseline probe (110-118). Sentences: common/messages/rules/sentences.yaml, under
``rule.<name>``.
"""
from __future__ import annotations

from rules import steps
from rules.rulebook import TREE, deciding_rule, state, waiting_rule

with TREE:

    # --- guards and waiting --------------------------------------------------------

    @deciding_rule(100, (state.stage != "done") & (state.step_limit_reached == True))  # noqa: E712
    def step_limit_reached(st):
        return steps.done(st, False, "step_limit")

    @deciding_rule(99, (state.stage != "done") & (state.stop_reason != ""))
    def stop_with_what_was_measured(st):
        st["awaiting"] = "none"
        st["waiting_answer"] = False
        # the user's own stop is nothing to fix: resuming goes on from the stopped probe
        return steps.done(st, st["has_config"], "user_stopped" if st["stopped_by_user"] else "broken_off")

    @waiting_rule(101, state.stage == "done")
    def session_finished(st):
        pass

    @waiting_rule(102, state.waiting_answer == True)  # noqa: E712
    def awaiting_answer(st):
        pass

    @waiting_rule(103, (state.awaiting != "none") & (state.finished == False))  # noqa: E712
    def awaiting_measurements(st):
        pass

    # --- the start: what do we know, what is missing and matters ----------------------

    INTAKE = state.stage == "intake"

    @deciding_rule(110, INTAKE & (state.q_symptom == "missing"))
    def ask_symptom(st):
        return steps.ask(st, "symptom")

    @deciding_rule(111, INTAKE & (state.q_model == "missing"))
    def ask_model(st):
        return steps.ask(st, "model")

    @deciding_rule(112, INTAKE & (state.q_model != "known"))
    def stop_without_model(st):
        return steps.done(st, False, "need_model")

    @deciding_rule(113, INTAKE & (state.q_want_ctx == "missing"))
    def ask_wanted_context(st):
        return steps.ask(st, "want_ctx")

    @deciding_rule(114, INTAKE & (state.q_want_parallel == "missing") & (state.phase == "concurrent"))
    def ask_wanted_concurrency(st):
        return steps.ask(st, "want_parallel")

    @deciding_rule(115, INTAKE & (state.q_budget == "missing") & (state.has_limit == False))  # noqa: E712
    def ask_budget(st):
        return steps.ask(st, "budget")

    @deciding_rule(116, INTAKE & (state.has_limit == False))  # noqa: E712
    def stop_without_limit(st):
        return steps.done(st, False, "need_limit")

    @deciding_rule(117, INTAKE & (state.srv_seen == True) & (state.repro_tried == False))  # noqa: E712
    def reproduce_first(st):
        return steps.probe(st, "reproduce")

    @deciding_rule(118, INTAKE)
    def start_with_baseline(st):
        return steps.probe(st, "baseline")
