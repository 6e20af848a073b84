"""The set's rules: several models that must stay loaded together.

A second durable_rules ruleset beside the one-model tree (:mod:`rules.kb`),
built the same way: every posted fact is consumed by exactly one named rule,
the first by priority whose conditions hold, and each firing leaves its
sentence (``setrule.<name>`` in common/messages/rules/set_sentences.yaml) in
the why chain. The facts (made by :mod:`probes.together` and the set's
session) are:

* ``set``: each model alone and the set together. What failed: an eviction
  the server's ``OLLAMA_MAX_LOADED_MODELS`` explains (read, and lower than the
  set), an eviction with that setting not read (either cause: said so), an
  eviction to make room, a model that would not load alone, or the models'
  peaks adding up over the limit; or nothing (the set fits).
* ``set_level``: a lower-bit tag of one model, measured alone and checked
  for coherence.
* ``set_retest``: the fixed task against every model at once; the set held
  only if no model left ``/api/ps`` (nor, on a GPU, spilled part of itself
  to system memory), every answer came back and the peak stayed under the
  limit with the margin.

After each reading, the next step is the first of: retest the arrangement
:func:`rules.setplan.plan` finds under the limit; measure the next lower-bit
tag (highest bits first, one at a time, so no tag is loaded that the plan
does not need) of the heaviest model whose tags are not all tried; stop (no
arrangement fits). A retest
that went over tightens the plan's limit (:data:`RETEST_SHRINK`) at most
:data:`MAX_RETESTS` times.
"""
from __future__ import annotations

import importlib
import uuid
from typing import Any, Mapping

from common.catalog import templates
from rules import setplan, thresholds
from rules.durable import load_durable
from rules.sizes import format_size

SET_RULESET = "oomvet_set"
#: how many set retests a session runs before it stops with what it has
MAX_RETESTS = 3
#: the plan's limit is multiplied by this after a retest that went over or lost a model
RETEST_SHRINK = 0.9
#: Ollama's OLLAMA_MAX_LOADED_MODELS when unset (3 per GPU, 3 on a CPU): only used where the setting was read as unset
MAX_LOADED_UNSET = 3

lang = load_durable()
m = lang.m
#: open sessions, by id: the rules' actions record into them
_SESSIONS: dict[str, "SetRules"] = {}
#: every set rule by name, in the order defined, with its (en, zh) sentence
RULES: dict[str, tuple[str, str]] = {}


def _rule(name: str, priority: int, condition):
    RULES[name] = templates(f"setrule.{name}")

    def wrap(body):
        def action(c):
            fact = dict(c.m._d)
            session = _SESSIONS[fact["sid"]]
            session._fired(name, fact)
            body(session, fact)
        action.__name__ = name
        lang.when_all(lang.pri(priority), condition)(action)
        return body
    return wrap


with lang.ruleset(SET_RULESET):
    # --- the set, measured alone and together
    @_rule("set_model_failed_alone", 1, (m.kind == "set") & (m.failed_alone == True))  # noqa: E712
    def _failed_alone(s, f):
        s.stop(False, "set_model_failed_alone")

    @_rule("set_evicted_by_setting", 2, (m.kind == "set") & (m.evictions > 0) & (m.max_loaded < m.n))
    def _by_setting(s, f):
        s.server_env["OLLAMA_MAX_LOADED_MODELS"] = str(f["n"])
        s.cause("evicted_by_setting")
        s.decide()

    @_rule("set_evicted_setting_unread", 3,
           (m.kind == "set") & (m.evictions > 0) & (m.max_loaded_read == False))  # noqa: E712
    def _unread(s, f):
        s.cause("evicted_setting_unread")
        s.decide()

    @_rule("set_evicted_for_room", 4, (m.kind == "set") & (m.evictions > 0))
    def _for_room(s, f):
        s.cause("evicted_for_room")
        s.decide()

    @_rule("set_over_limit", 5, (m.kind == "set") & (m.alone_total > m.fit_limit))
    def _over(s, f):
        s.cause("over_limit")
        s.decide()

    @_rule("set_fits", 6, m.kind == "set")
    def _fits(s, f):
        s.cause("fits")
        s.decide()

    # --- a lower-bit tag of one model
    @_rule("set_level_coherent", 1, (m.kind == "set_level") & (m.coherent == True) & (m.peak > 0))  # noqa: E712
    def _coherent(s, f):
        s.add_level(f)

    @_rule("set_level_rejected", 2, m.kind == "set_level")
    def _rejected(s, f):
        pass

    @_rule("set_embedder_kept", 3, (m.kind == "set_levels_done") & (m.levels < 0))
    def _embedder(s, f):
        s.decide()

    @_rule("set_no_lower_level", 3, (m.kind == "set_levels_done") & (m.levels == 0))
    def _no_lower(s, f):
        s.decide()

    @_rule("set_levels_left", 4, (m.kind == "set_levels_done") & (m.remaining > 0))
    def _levels_left(s, f):
        s.decide()

    @_rule("set_levels_done", 5, m.kind == "set_levels_done")
    def _levels_done(s, f):
        s.decide()

    # --- the set's retest
    @_rule("set_retest_unconfirmed", 1, (m.kind == "set_retest") & (m.applied == False))  # noqa: E712
    def _unconfirmed(s, f):
        s.stop(False, "set_retest_unconfirmed")

    @_rule("set_retest_failed", 2, (m.kind == "set_retest") & (m.answered == False))  # noqa: E712
    def _failed(s, f):
        s.stop(False, "set_retest_failed")

    @_rule("set_retest_dropped", 3, (m.kind == "set_retest") & (m.dropped_count > 0))
    def _dropped(s, f):
        s.tighten()

    @_rule("set_retest_spilled", 4, (m.kind == "set_retest") & (m.spilled_count > 0))
    def _spilled(s, f):
        s.tighten()

    @_rule("set_retest_over", 5, (m.kind == "set_retest") & (m.peak > m.fit_limit))
    def _over_retest(s, f):
        s.tighten(over=f["peak"])

    @_rule("set_retest_unmeasured", 6, (m.kind == "set_retest") & (m.measured == False))  # noqa: E712
    def _unmeasured(s, f):
        s.stop(False, "set_retest_unmeasured")

    @_rule("set_retest_held", 7, m.kind == "set_retest")
    def _held(s, f):
        s.stop(True, "set_retest_held")


class SetRules:
    """One set session's door to the ruleset: post facts, read the next step
    (``{"action": "retest", "plan": ...}``, ``{"action": "quant", "model": M}``
    or ``{"action": "done", "verified": bool, "why": rule}``) and the why chain."""

    def __init__(self, members: list[Mapping[str, Any]], limit: int, max_loaded: int | None):
        """``members``: each ``{"model", "num_ctx"}``; ``max_loaded``: the
        server's OLLAMA_MAX_LOADED_MODELS as read (None: not read)."""
        # durable_rules builds its host from the rulesets defined at the first
        # post: the one-model tree must be whole by then, or a later session's
        # Advisor finds its rules missing ("Could not handle message")
        importlib.import_module("rules.kb")
        self.sid = uuid.uuid4().hex
        self.members = [dict(x) for x in members]
        self.limit = int(limit)
        self.fit_limit = thresholds.fit_limit(self.limit)
        self.max_loaded = max_loaded
        self.levels: dict[str, list[setplan.Level]] = {}
        self.tried: set[str] = set()
        self.causes: list[str] = []
        self.server_env: dict[str, str] = {}
        self.trail: list[dict] = []
        self.plan: setplan.Plan | None = None
        self.shrink = 1.0
        self.retests = 0
        self.next: dict | None = None
        _SESSIONS[self.sid] = self

    def close(self) -> None:
        _SESSIONS.pop(self.sid, None)

    # --- posting ----------------------------------------------------------------
    def post(self, fact: Mapping[str, Any]) -> dict | None:
        """The next step after ``fact``; None after a ``set_level`` (the
        ``set_levels_done`` that follows a model's levels decides)."""
        self.next = None
        event = {**self._fields(fact), "sid": self.sid, "id": uuid.uuid4().hex}
        lang.post(SET_RULESET, event)
        if self.next is None and fact["kind"] != "set_level":
            raise RuntimeError(f"no set rule decided on a {fact.get('kind')} fact")
        return self.next

    def _fields(self, fact: Mapping[str, Any]) -> dict:
        """The fact as the rules read it: the fields they compare, made plain."""
        kind = fact["kind"]
        out: dict[str, Any] = {"kind": kind}
        if kind == "set":
            points = {a["model"]: a["points"] for a in fact["members"]}
            for model, pts in points.items():
                self.levels[model] = [setplan.Level(model, tuple((p["num_ctx"], p["peak"]) for p in pts
                                                                 if p["peak"] is not None))]
            firsts = [pts[0] for pts in points.values()]
            out.update(n=len(fact["members"]), evictions=len(fact["evicted"]),
                       max_loaded=self.max_loaded if self.max_loaded is not None else 1 << 30,
                       max_loaded_read=self.max_loaded is not None,
                       failed_alone=any(not p["ok"] or p["peak"] is None for p in firsts),
                       alone_total=sum(p["peak"] or 0 for p in firsts), fit_limit=self.fit_limit)
        elif kind == "set_level":
            out.update(model=fact["model"], tag=fact["tag"], coherent=bool(fact.get("coherent")),
                       peak=int(fact.get("peak") or 0), num_ctx=fact.get("num_ctx"), bits=fact.get("bits"))
        elif kind == "set_levels_done":
            if not fact.get("remaining"):
                self.tried.add(fact["model"])
            out.update(model=fact["model"], levels=int(fact.get("levels") or 0),
                       remaining=int(fact.get("remaining") or 0))
        elif kind == "set_retest":
            self.retests += 1
            out.update(applied=bool(fact.get("applied")), answered=bool(fact.get("answered")),
                       dropped_count=len(fact.get("dropped") or []), spilled_count=len(fact.get("spilled") or []),
                       peak=int(fact.get("peak") or 0),
                       measured=bool(fact.get("measured")), fit_limit=self.fit_limit)
        return out

    # --- what the rules' actions do ---------------------------------------------
    def _fired(self, name: str, fact: Mapping[str, Any]) -> None:
        en, zh = RULES[name]
        fields = {**fact, "limit": format_size(self.limit, 2), "fit_limit": format_size(self.fit_limit, 2),
                  "peak": format_size(fact.get("peak"), 2), "alone_total": format_size(fact.get("alone_total"), 2),
                  "n": fact.get("n", len(self.members)), "max_loaded": self.max_loaded}
        self.trail.append({"rule": name, "note": en.format_map(_Loose(fields)),
                           "note_zh": zh.format_map(_Loose(fields))})

    def cause(self, name: str) -> None:
        self.causes.append(name)

    def add_level(self, fact: Mapping[str, Any]) -> None:
        own = self.levels[fact["model"]]
        own.append(setplan.Level(fact["tag"], ((int(fact["num_ctx"]), int(fact["peak"])),), fact.get("bits")))

    def models(self) -> list[setplan.Model]:
        return [setplan.Model(x["model"], int(x["num_ctx"]), tuple(self.levels.get(x["model"], ())))
                for x in self.members]

    def decide(self) -> None:
        models = self.models()
        self.plan = setplan.plan(models, self.fit_limit, self.shrink)
        if self.plan.fits:
            self.next = {"action": "retest", "plan": self.plan.to_dict(), "server_env": dict(self.server_env)}
            return
        heavy = sorted((x for x in models if x.model not in self.tried),
                       key=lambda x: x.peak(len(x.levels) - 1, x.floor()) or 0, reverse=True)
        if heavy:
            self.next = {"action": "quant", "model": heavy[0].model, "num_ctx": heavy[0].num_ctx}
            return
        self.stop(False, "set_no_arrangement")

    def tighten(self, over: int | None = None) -> None:
        """After a retest that lost a model, plan under a limit
        :data:`RETEST_SHRINK` lower; after one that peaked ``over`` the
        limit, lower it by what the set measured above its prediction (and
        1 % more), so the next plan carries the set's own excess."""
        if self.retests >= MAX_RETESTS:
            self.stop(False, "set_retests_spent")
            return
        if over is not None and self.plan is not None and self.plan.total is not None:
            # over > fit limit >= the plan's limit >= its total: the excess is positive
            excess = over - self.plan.total + self.fit_limit // 100
            self.shrink = (self.plan.limit - excess) / self.fit_limit
        else:
            self.shrink *= RETEST_SHRINK
        self.decide()

    def stop(self, verified: bool, why: str) -> None:
        self.next = {"action": "done", "verified": verified, "why": why}


class _Loose(dict):
    def __missing__(self, key: str) -> str:
        return "?"
