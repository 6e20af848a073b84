"""The method's decision tree as one durable_rules ruleset, defined once at import.

Every posted fact reaches the engine as an event joined with the session's
state, and is consumed by exactly one *reading* rule: the first, by priority,
whose conditions hold (a failed load before a spilled one before a fitting
one). Reading rules record what a measurement means. After each post the
Advisor asks for a decision (a ``_decide`` event), and exactly one *deciding*
rule answers it: either an interpreting rule that turns a finished probe's
readings into a diagnosis and hands over to planning, or a planning rule that
issues the next step (ask / probe / change / done), or a waiting rule when the
session is still waiting for an answer or a measurement. The priorities of the
planning rules are the method's order of remedies: context, then quantization,
then backend. Every rule is named, and every firing is recorded, so the why
chain cites rules and facts, not code paths. ``rules/README.md`` draws the tree.

This module only assembles the tree, in the method's order; each part adds its
rules to the one ruleset when it is imported:

1. rules/readings.py      what each posted fact means (one table)
2. rules/intake.py        guards, waiting, and the start
3. rules/interpreting.py  what a finished probe's readings mean
4. rules/planning.py      the remedies, in the method's order
5. rules/current_engine.py  the current engine's facts, setup problems and findings
6. rules/versions.py      what changed between Ollama versions, named when a user blames an upgrade
"""
from __future__ import annotations

from common.catalog import keys

# imported for their rules, in this order (the order they are defined in)
import rules.readings  # noqa: F401
import rules.intake  # noqa: F401
import rules.interpreting  # noqa: F401
import rules.planning  # noqa: F401
import rules.current_engine  # noqa: F401
import rules.versions  # noqa: F401
from rules.durable import RULESET
from rules.rulebook import RULES, Rule, lang

__all__ = ["RULES", "RULESET", "Rule", "lang"]

# rule.<name> and finding.<rule>[.<part>]: the second word names a rule
_without_rule = {key.split(".")[1] for key in keys("rule.") + keys("finding.")} - set(RULES)
if _without_rule:  # a renamed rule whose words stayed behind
    raise RuntimeError(f"common/messages/rules/sentences.yaml names rules that do not exist: {sorted(_without_rule)}")
