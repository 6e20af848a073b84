"""When a lower-bit model's answer is not sound: the checks, as one table.

The quant probe measures the answer to the fixed task and posts the raw
figures (probes/coherence.py :func:`measure`: lengths, shares, counts); it
judges nothing. Each :class:`Check` here is one way quantization damage shows,
written as clauses over those figures and the thresholds in
:mod:`rules.thresholds`. The reading rules (rules/readings.py) are built from
this table, one rule per check, and :func:`failed_checks` applies the same
table in Python for the report and the tests, so the two can never disagree.

A clause is ``(field, op, bound)``. ``bound`` is a number, a string, a tuple of
values (for ``not_in``), or ``(other_field, factor)``: the fact's own
``other_field`` times ``factor``.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Mapping

from rules import thresholds

_OPS = {">": operator.gt, "<": operator.lt, "==": operator.eq, ">=": operator.ge, "<=": operator.le}
#: characters a finished answer may end with (a sentence's end, a closing
#: bracket, quote, code tick or table bar, in English and Chinese)
SENTENCE_END_CHARS = tuple(".!?。！？:：)]`\"'*|")


@dataclass(frozen=True)
class Check:
    """One sign of a broken quantization: the rule's name and its clauses (all must hold)."""

    rule: str
    clauses: tuple[tuple[str, str, Any], ...]
    #: when it holds, nothing else is judged (an empty answer has no other figure worth reading)
    final: bool = False


_C = thresholds.COHERENCE

#: in the order the rules try them; the first that holds is the reading
CHECKS: tuple[Check, ...] = (
    Check("quant_empty_answer", (("answer_chars", "==", 0),), final=True),
    Check("quant_repeats_itself", (("repeat_share", ">", _C.max_repeat_share),)),
    Check("quant_garbled", (("garbled_share", ">", _C.max_garbled_share),)),
    Check("quant_unfinished", (("done_reason", "==", "stop"), ("last_char", "not_in", SENTENCE_END_CHARS))),
    # only numbers the higher-bit tag kept count against a lower bit
    Check("quant_lost_numbers", (("numbers_lost", ">", ("numbers_checked", _C.max_lost_numbers_share)),)),
    # list markers ("1.", "2.") are not counted as numbers by the probe
    Check("quant_invented_numbers", (("numbers_invented", ">", _C.min_invented_numbers),
                                     ("numbers_invented", ">", ("numbers_in_task", _C.max_invented_numbers_share)))),
    Check("quant_rewrote_code", (("code_spans", ">", 0), ("code_spans_kept", "==", 0))),
)

#: the raw figures the checks read (every quant trial with an answer carries them)
FIELDS = ("answer_chars", "repeat_share", "garbled_share", "done_reason", "last_char", "numbers_checked",
          "numbers_lost", "numbers_in_task", "numbers_invented", "code_spans", "code_spans_kept")


def is_field_bound(bound: Any) -> bool:
    """Whether ``bound`` is ``(other_field, factor)`` rather than a value."""
    return isinstance(bound, tuple) and len(bound) == 2 and isinstance(bound[0], str) and bound[0] in FIELDS


def holds(clause: tuple[str, str, Any], figures: Mapping[str, Any]) -> bool:
    """One clause on a quant trial's figures; a missing figure holds nothing
    (as in the rules engine, where a missing field matches no condition)."""
    field, op, bound = clause
    value = figures.get(field)
    if value is None:
        return False
    if op == "not_in":
        return value not in bound
    if is_field_bound(bound):
        other = figures.get(bound[0])
        if other is None:
            return False
        return _OPS[op](value, other * bound[1])
    return _OPS[op](value, bound)


def failed_checks(figures: Mapping[str, Any]) -> list[str]:
    """The rules of every check ``figures`` fail, in table order; empty: sound."""
    failed = []
    for check in CHECKS:
        if all(holds(clause, figures) for clause in check.clauses):
            failed.append(check.rule)
            if check.final:
                break
    return failed
