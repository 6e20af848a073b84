"""How sure the intake is of each field it read, and what else it could be.

A reading is only as good as the evidence behind it, and some evidence is
known to mislead: a card's size said beside the part left for the model
("卡 48G，只给它留 30G"), a count that works beside one that fails ("fine with
three, a fourth makes it crawl"), a cue for one time against a learned reader
sure of another. :func:`evidence` names, for each field :func:`parse` read,
the kind of evidence it came from (a *class*: ``budget.part``,
``par.several``, ``phase.cue_disputed``...) and the other values the message
also supports. :func:`assess` turns a class into sure or unsure with the
share of the development corpus that class read right
(``confidence.yaml``, written by ``bench/intake_confidence.py`` from a
replay in which each batch is read by readers fitted on the others: a new
writer's view).

A field is **unsure** when its class's replay counts cannot show it right at
least ``SURE_SHARE`` of the time (:func:`is_sure`), or when its
evidence conflicts (``CONFLICTS``: two sizes for one budget, two counts, a
cue disputed): those are asked whatever the replay says, because reading them
wrong costs the user most (a budget too high takes memory they reserved).
The chat says every field it read and asks each unsure one, with its
choices, once; ``--auto`` keeps only the sure ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

TABLE = Path(__file__).parent / "confidence.yaml"
#: the fields the chat reads back, in the order it says them
FIELDS = ("phase", "model", "budget", "want_ctx", "want_parallel", "keep_context")
#: a class is sure where the replay's counts put its share right at least this
#: high (the lower end of their 95% interval, :func:`lower_bound`);
#: bench/intake_confidence.py prints what that leaves confidently wrong
SURE_SHARE = 0.95
#: evidence that disagrees with itself: asked whatever the replay says
CONFLICTS = frozenset({"budget.part", "budget.cards", "budget.per_card", "budget.learned", "par.several", "ctx.several",
                       "phase.cue_disputed", "model.guess"})
_PHASE_OF_WHEN = {"load": "load", "long_input": "long_input", "concurrent": "concurrent", "over_time": "creeping"}
#: the class of a value the user gave in answer: their word, always sure
USER = "said.user"
#: a learned reader of *when* this sure of another time disputes a cue's
DISPUTE = 0.5


@dataclass(frozen=True)
class Sureness:
    field: str
    value: Any              # as the Intake holds it
    evidence: str           # the class
    sure: bool
    right: float | None     # the share of the class read right on the replay (None: not seen there)
    choices: tuple = ()     # the other values the message supports, likeliest first


def evidence(*, phase: str, when: str, what: str, cue: str | None, taught: tuple, top_when,
             model: str | None, model_sure: bool, budget: int | None, share: float | None,
             budget_taught: bool, sizes: dict, other_sizes: list, cards: int | None, ctx: int | None, ctx_estimated: bool,
             ctx_seen: list, parallel: int | None, par_seen: list, keep_context) -> tuple[tuple, tuple]:
    """``(classes, choices)``: ``((field, class), ...)`` for every field read,
    and ``((field, (other value, ...)), ...)`` for those with other readings."""
    classes, choices = [], []

    def put(field, kind, others=()):
        classes.append((field, kind))
        if others:
            choices.append((field, tuple(others)))

    if phase != "unknown":
        put("phase", *_phase_class(phase, when, what, cue, taught, top_when))
    if model:
        put("model", "model.said" if model_sure else "model.guess")
    if budget is not None or share is not None:
        put("budget", *_budget_class(budget, share, budget_taught, sizes, other_sizes, cards))
    if ctx:
        others = sorted({v for v in ctx_seen if v != ctx}, reverse=True)
        put("want_ctx", "ctx.estimated" if ctx_estimated else "ctx.several" if others else "ctx.said", others)
    if parallel:
        others = sorted({v for v in par_seen if v != parallel}, reverse=True)
        put("want_parallel", "par.several" if others else "par.one", others)
    if keep_context is not None:
        put("keep_context", "keep.said")
    return tuple(classes), tuple(choices)


def _phase_class(phase, when, what, cue, taught, top_when) -> tuple[str, tuple]:
    other = ()
    if top_when is not None and top_when.value in _PHASE_OF_WHEN and _PHASE_OF_WHEN[top_when.value] != phase:
        other = (_PHASE_OF_WHEN[top_when.value],)
    if "when" in taught:
        return ("phase.learned_hi" if top_when is not None and top_when.probability >= 0.6 else "phase.learned_lo"), other
    if when == "unknown":
        return ("phase.what_learned" if "what" in taught else "phase.what_cue"), other
    if top_when is None or top_when.value == when:
        return "phase.cue_agreed", ()
    if top_when.value != "unknown" and top_when.probability >= DISPUTE:
        return "phase.cue_disputed", other
    return "phase.cue_alone", other


def _budget_class(budget, share, taught, sizes, other_sizes, cards) -> tuple[str, tuple]:
    if budget is None:
        return "budget.said", ()  # a share of the card
    if taught:
        return "budget.learned", tuple(sorted({v for v in other_sizes if v != budget}, reverse=True))
    kind = next((name for name in ("free", "total", "card") if sizes.get(name)), "card")
    said = {v for values in sizes.values() for v in values}
    others = sorted(said - {budget}, reverse=True)
    loose = {v for v in other_sizes if v not in said and v != budget}
    if kind == "free" and any(v > budget for v in [*others, *loose]):
        # a part of a card whose size is said too: all of it is the other reading
        return "budget.part", tuple(sorted({*others, *loose}, reverse=True))
    if kind == "card" and others:
        return "budget.cards", tuple(others)
    if kind == "card" and cards and budget * cards not in said:
        return "budget.per_card", (budget * cards,)  # one card's size, or the sum of all of them
    # a size said as the card's, what is free or allowed, or a total: one class, so that its count can
    # speak for it (apart, the rarer kinds are too few to show they are sure, though none was read wrong)
    return "budget.said" + (".with_sizes" if loose or others else ""), tuple(others) + tuple(sorted(loose, reverse=True))


@lru_cache(maxsize=1)
def table() -> dict:
    """The replay's figures per class (``confidence.yaml``): ``{class: {"n", "right"}}``."""
    try:
        return yaml.safe_load(TABLE.read_text(encoding="utf-8")).get("classes") or {}
    except FileNotFoundError:
        return {}


def lower_bound(right: int, n: int, z: float = 1.96) -> float:
    """The Wilson score interval's lower end for ``right`` of ``n``: the share
    right that the counts rule out falling below (95%). 40 of 40 is not
    100%: it is at least 91%; 140 of 144 at least 93%."""
    if n <= 0:
        return 0.0
    p = right / n
    centre = p + z * z / (2 * n)
    spread = z * ((p * (1 - p) + z * z / (4 * n)) / n) ** 0.5
    return (centre - spread) / (1 + z * z / n)


def is_sure(kind: str) -> tuple[bool, float | None]:
    """Whether a reading of class ``kind`` is sure, and the share of the class
    the replay read right. Sure takes a share whose lower bound
    (:func:`lower_bound`) reaches ``SURE_SHARE``: the cues were tuned on the
    very batches the replay reads, so a class's replay share flatters it,
    and a small class's more."""
    if kind == USER:
        return True, None
    row = table().get(kind)
    if not row or not row.get("n"):
        return False, None
    sure = kind not in CONFLICTS and lower_bound(row["right"], row["n"]) >= SURE_SHARE
    return sure, row["right"] / row["n"]


def assess(read) -> dict[str, Sureness]:
    """Every field ``read`` (an :class:`~assistant.intake.Intake`) holds, with how sure it is."""
    others = dict(read.alternatives)
    out = {}
    for field, kind in read.evidence:
        sure, share = is_sure(kind)
        value = read.budget_share if field == "budget" and read.budget is None else getattr(read, field)
        out[field] = Sureness(field, value, kind, sure, share, others.get(field, ()))
    return {field: out[field] for field in FIELDS if field in out}


def unsure(read) -> tuple[str, ...]:
    """The fields of ``read`` it is not sure of, in the order the chat asks them."""
    return tuple(field for field, s in assess(read).items() if not s.sure)
