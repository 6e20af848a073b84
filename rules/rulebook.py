"""How a rule is written down: the three kinds of rule, their registration
with durable_rules, and the words each firing leaves in the why chain.

Every rule lives in the one ruleset :data:`TREE` and is named; its sentences
come from the catalog (common/messages/rules/sentences.yaml) under ``rule.<name>``.

- A *reading* rule (:func:`register_readings`, one table row each) consumes one
  posted fact joined with the session's state, records what it means, and
  leaves a note (its sentence, formatted with the fact's fields).
- A *deciding* rule (:func:`deciding_rule`) answers one ``_decide`` event when
  the state matches: it interprets a finished probe (and hands over to
  planning) or issues the next step; its sentence is the reason.
- A *waiting* rule (:func:`waiting_rule`) answers ``_decide`` when the session
  is not ready to decide; the step stands.

Conditions are written in durable_rules' own terms, under plain names:
``fact.<field>`` (the posted fact), ``state.<field>`` (the session state) and,
inside a fact's condition, ``in_state("<field>")`` (the joined state's field).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from common.catalog import pair, t, templates
from rules import thresholds
from rules.configs import current_ctx
from rules.sizes import format_size
from rules.durable import RULESET, load_durable
from rules.record import note_unmeasured
from rules.state import recompute_flags
from rules.steps import issue

lang = load_durable()
_when_all, _pri, _join = lang.when_all, lang.pri, lang.c

#: the ruleset that holds the whole tree; rule modules add to it with ``with TREE:``
TREE = lang.ruleset(RULESET)

#: a field of the posted fact, in a rule's condition: ``fact.kind == "load"``
fact = lang.m
#: a field of the session state, in a rule's condition: ``state.awaiting == "baseline"``
state = lang.s


def in_state(field: str):
    """The joined session state's ``field``, inside a condition on the fact:
    ``fact.peak > in_state("fit_limit")``."""
    return getattr(_join.st, field)


#: the request for a decision the Advisor posts after every batch of facts
DECIDE = fact.kind == "_decide"


@dataclass(frozen=True)
class Rule:
    """A rule as the why chain cites it."""

    name: str
    layer: str  # "read" / "decide" / "wait"
    priority: int
    reason: str
    reason_zh: str


#: every rule, by name, in the order it was defined
RULES: dict[str, Rule] = {}


def _cite(name: str, layer: str, priority: int) -> tuple[str, str]:
    en, zh = templates(f"rule.{name}")
    RULES[name] = Rule(name, layer, priority, en, zh)
    return en, zh


# --- reading rules --------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """One row of a reading table: the rule's name and priority, its conditions
    on the posted fact and (optionally) on the session state, and what it
    records (a function of the state and the fact; ``None``: nothing)."""

    name: str
    priority: int
    on_fact: Any
    on_state: Any = None
    records: Callable[[dict, dict], Any] | None = None


#: size fields a reading note shows in GiB/MiB as ``<field>_h``
_SIZES = ("peak", "total", "limit", "used_after", "used_settled", "size", "size_vram", "drift_per_min", "in_use",
          "unaccounted")


class _Loose(dict):
    """Format fields for reading notes: a fact may lack an optional field."""

    def __missing__(self, key: str) -> str:
        return "?"


#: the context tiers and the finish reasons Ollama gives, each with its Chinese word in the catalog
TIERS = ("short", "medium", "long")
DONE_REASONS = ("length", "stop", "load", "unload")


def tier_word(name: str, lang: str) -> str:
    """A tier's name in ``lang``: "short" / "medium" / "long", and "medium 2"
    (the third of five points the search measured) with its number kept."""
    base, _, number = str(name).partition(" ")
    if base not in TIERS:
        return str(name)
    word = t(f"rulebook.tier.{base}", lang)
    return f"{word} {number}" if number else word


def register_readings(rows: Iterable[Reading]) -> None:
    """Register each row as a reading rule in :data:`TREE` (call inside ``with TREE:``)."""
    for row in rows:
        _register_reading(row)


def _register_reading(row: Reading) -> None:
    name, records = row.name, row.records
    en, zh = _cite(name, "read", row.priority)

    def action(closure):
        st, posted = closure.s._d, closure.f._d
        if records is not None:
            records(st, posted)
        note_unmeasured(st, posted)
        fields = _Loose(posted)
        fields.update({k + "_h": format_size(posted.get(k)) for k in _SIZES})
        fields["fit_limit_h"] = format_size(st["fit_limit"])
        placement = posted.get("placement")
        fields["placement_zh"] = (t(f"rulebook.placement.{placement}", "zh")
                                  if placement in ("gpu", "partial", "cpu") else "?")
        # a tier's name and a retest's finish reason are words, said in Chinese in a Chinese sentence
        tier, reason = posted.get("name"), posted.get("done_reason")
        fields["name_zh"] = tier_word(tier, "zh") if tier else fields["name"]
        fields["done_reason_zh"] = t(f"rulebook.done.{reason}", "zh") if reason in DONE_REASONS else fields["done_reason"]
        if posted.get("requests") is not None:  # a reproduction: the load it sent
            key = "rulebook.load.alone" if not posted["requests"] else "rulebook.load.at_once"
            fields["load"], fields["load_zh"] = (t(key, lang, n=posted["requests"]) for lang in ("en", "zh"))
        st["trail"].append({"rule": name, "seq": posted.get("_seq"),
                            "note": en.format_map(fields), "note_zh": zh.format_map(fields)})
        recompute_flags(st)

    action.__name__ = name
    patterns = ([_join.st << row.on_state] if row.on_state is not None else []) + [_join.f << row.on_fact]
    _when_all(_pri(row.priority), *patterns)(action)


def opening_rule(name: str, on_fact) -> None:
    """The rule that consumes a session's opening event and does nothing else."""
    _cite(name, "read", 0)

    def action(closure):
        pass

    action.__name__ = name
    _when_all(_pri(0), _join.f << on_fact)(action)


# --- deciding and waiting rules ---------------------------------------------------

def deciding_rule(priority: int, on_state):
    """A deciding rule: answers one ``_decide`` when the state matches. Its body
    returns the next step, or ``None`` when it only interprets (and hands over
    to planning); either way the sentence goes into the why chain."""
    def wrap(body: Callable[[dict], dict | None]):
        name = body.__name__
        en, zh = _cite(name, "decide", priority)

        def action(closure):
            st = closure.s._d
            step = body(st)
            recompute_flags(st)
            if step is not None:
                fields = step_fields(st, step)
                issue(st, name, step, en.format_map(fields), zh.format_map(fields))
            else:
                fields = step_fields(st, {})
                st["trail"].append({"rule": name, "note": en.format_map(fields),
                                    "note_zh": zh.format_map(fields)})
            recompute_flags(st)

        action.__name__ = name
        _when_all(_pri(priority), _join.st << on_state, _join.f << DECIDE)(action)
        return body
    return wrap


def waiting_rule(priority: int, on_state):
    """A waiting rule: the session is not ready to decide; the step stands."""
    def wrap(body):
        name = body.__name__
        _cite(name, "wait", priority)

        def action(closure):
            closure.s._d["again"] = False

        action.__name__ = name
        _when_all(_pri(priority), _join.st << on_state, _join.f << DECIDE)(action)
        return body
    return wrap


def step_fields(st: dict, step: dict) -> dict:
    """The fields a deciding rule's sentence may name."""
    args = step.get("args") or {}
    config = step.get("config") or {}
    verified, verified_zh = pair("rulebook.verified.yes" if st["config_verified"] else "rulebook.verified.no")
    return {
        "model": st["model"] or "?",
        "tag": st["tag"] or "?",
        "tag_to": config.get("model") or "?",
        "want_ctx": st["want_ctx"] or "?",
        "want_parallel": st["want_parallel"] or "?",
        "best_ctx": st["tier_best_ctx"],
        "fail_ctx": st["tier_fail_ctx"],
        # a request with no num_ctx gets the server's own default: as read ("?" unread), never "None"
        "num_ctx": args.get("num_ctx", current_ctx(st)) or st.get("srv_default_ctx") or "?",
        "batch": args.get("num_batch", thresholds.CONSERVATIVE_NUM_BATCH),
        "limit": format_size(st["limit"]),
        "fit_limit": format_size(st["fit_limit"]),
        "knob": step.get("knob") or args.get("knob") or "?",
        "from": step.get("from", "?"),
        "to": step.get("to", args.get("value", "?")),
        "error": st["tier_crash_error"] or st["probe_error"] or "?",
        "options": len(st["quant_options"]),
        "requests": args.get("requests", "?"),
        "slots": st.get("repro_parallel") or "?",
        "trials": len(st["quant_options"]) + len(st["quant_rejected"]),
        "verified": verified,
        "verified_zh": verified_zh,
    }
