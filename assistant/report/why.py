"""The rules' why-chain as sentences, for the chat's /why and the report.

Each step the rules took is said in words with the rule's own sentence
(which names the figures it rested on) and, the first time a kind of step
appears, the method's reason for taking it then: no rule names, no raw
facts, no internal keys.
"""
from __future__ import annotations

from common.catalog import t

#: the kinds of step the method gives a reason for (``method.<kind>`` in the catalog)
METHOD_STEPS = ("reproduce", "baseline", "context", "quant", "backend", "stability", "ask")


def why_lines(chain: list[dict], lang: str) -> list[str]:
    """``Advisor.why()`` as sentences: each step in words with the rule's own
    sentence (which names the figures it rested on), and, the first time a
    kind of step appears, the method's reason for taking it then."""
    lines, said = [], set()
    for entry in chain:
        nxt = entry.get("next") or {}
        kind = step_kind(nxt)
        sentence = entry.get("reason_zh") if lang == "zh" else entry.get("reason")
        lines.append(t("why.step", lang, n=entry.get("n"), step=t(f"why.kind.{kind}", lang),
                       text=sentence or entry.get("reason") or ""))
        if kind not in said and kind in METHOD_STEPS:
            said.add(kind)
            lines.append(t("why.method", lang, text=t(f"method.{kind}", lang)))
    return lines


def step_kind(step: dict) -> str:
    """What kind of step a ``next`` is, as the /why lines and the answers to
    "why?" name it: a probe's name, ``stability`` for a change retested,
    ``ask`` or ``done``."""
    action = step.get("action")
    if action == "probe":
        return step.get("probe") if step.get("probe") in METHOD_STEPS else "probe"
    if action == "change":
        return "stability"
    return action if action in ("ask", "done") else "probe"
