"""The session's door to the knowledge base: one :class:`Advisor` per session.

Importing this module never imports durable_rules: the ruleset
(:mod:`rules.kb`, which loads durable_rules through :mod:`rules.durable`) is
imported when the first Advisor is made, so a Python where durable_rules cannot
load (3.13+) fails there, once, with :class:`RulesUnavailable`. An Advisor owns
one session id in the one module-level ruleset: it validates each
fact against :mod:`rules.facts`, hands it to the engine, lets the rules decide,
and reads back the next step, the diagnosis and the why chain. Exceptions in
rule actions are never swallowed: durable_rules parks them in the session
state, and the Advisor raises them as :class:`RulesError` after every post.
"""
from __future__ import annotations

import copy
import importlib
import json
import uuid
from typing import Any, Iterable, Mapping

from rules import thresholds
# RulesUnavailable is part of this module's interface: the CLI catches it
from rules.durable import RULESET, RulesUnavailable  # noqa: F401
from rules.facts import FactError, validate
from rules.state import initial_state, recompute_flags, to_event

#: kinds only the rules produce; a caller posting them is a bug in the caller
_RULES_ONLY = ("diagnosis", "next")
#: interpretation rules re-post a decision request; a tree that does not settle
#: within this many rounds has a loop in it
_MAX_ROUNDS = 25


class RulesError(RuntimeError):
    """A rule action raised, or the engine refused a message: a defect in the
    knowledge base (or a closed Advisor), never a user's input."""


def _ruleset_engine():
    """durable_rules, with the tree defined in it. Imported on first use:
    importing rules.engine must work even where durable_rules does not, so the
    CLI can catch RulesUnavailable. (rules.kb never imports this module.)"""
    return importlib.import_module("rules.kb").lang


class Advisor:
    """One diagnosis session: post facts, read the next step.

    >>> adv = Advisor()
    >>> adv.post({"kind": "symptom", "phase": "load", "text": "OOM at load"})["action"]
    'ask'
    """

    def __init__(self, max_steps: int | None = None) -> None:
        """``max_steps``: steps after which the session stops with what it has
        (default :data:`rules.thresholds.MAX_STEPS`)."""
        self._lang = _ruleset_engine()
        self.sid = uuid.uuid4().hex
        self._facts: list[dict] = []
        self._seq = 0
        self._ticks = 0
        self._closed = False
        self._lang.update_state(RULESET, initial_state(self.sid, max_steps or thresholds.MAX_STEPS))
        self._send({"kind": "_open", "sid": self.sid})

    # --- posting --------------------------------------------------------------

    def post(self, fact: Mapping[str, Any]) -> dict | None:
        """Validate ``fact``, assert it into this session, return the next step."""
        return self.post_many([fact])

    def post_many(self, facts: Iterable[Mapping[str, Any]]) -> dict | None:
        """Post several facts, then let the rules decide once. The batch is
        validated first and refused whole if one fact does not fit the contract."""
        self._open()
        checked = [self._checked(f) for f in facts]
        for fact in checked:
            self._seq += 1
            fact["_seq"] = self._seq
            self._facts.append(fact)
            self._send(to_event(fact, self.sid))
        self._decide()
        return self.next

    def _checked(self, fact: Mapping[str, Any]) -> dict:
        if isinstance(fact, Mapping) and fact.get("kind") in _RULES_ONLY:
            raise FactError(f"{fact['kind']} facts are made by the rules, not posted to them")
        checked = copy.deepcopy(validate(fact))  # the record must not change when the caller's dicts do
        try:
            json.dumps(checked)
        except (TypeError, ValueError) as exc:
            raise FactError(f"{checked['kind']} fact is not plain data: {exc}") from exc
        return checked

    def _decide(self) -> None:
        for _ in range(_MAX_ROUNDS):
            self._ticks += 1
            self._send({"kind": "_decide", "sid": self.sid, "_tick": self._ticks})
            if not self._state.get("again"):
                return
        raise RulesError(f"the rules did not settle after {_MAX_ROUNDS} rounds (stage {self._state.get('stage')!r})")

    def _send(self, event: dict) -> None:
        try:
            self._lang.post(RULESET, event)
        except Exception as exc:  # the engine's own refusals carry no useful type
            raise RulesError(f"the rules engine refused a {event.get('kind')} message: "
                             f"{getattr(exc, 'message', exc)}") from exc
        self._state = self._read_state()
        failure = self._state.pop("exception", None)
        if failure is not None:
            # clear it, so the next post does not report the same failure again
            self._lang.update_state(RULESET, self._state)
            raise RulesError(f"a rule action failed on a {event.get('kind')} message: {failure}")

    def _read_state(self) -> dict:
        return self._lang.get_state(RULESET, self.sid)

    def _open(self) -> None:
        if self._closed:
            raise RulesError("this Advisor is closed; start a new one")

    # --- reading ----------------------------------------------------------------

    @property
    def next(self) -> dict | None:
        """The current next step (``None`` before any fact)."""
        text = self._state.get("next_json")
        return json.loads(text) if text else None

    @property
    def diagnosis(self) -> dict | None:
        """``{"cause", "causes", "problem", "advice", "findings"}`` once a cause is found or
        the session is done, else ``None``."""
        state = self._state
        if state.get("cause", "none") == "none" and state.get("stage") != "done":
            return None
        cause = state.get("cause", "none")
        return {
            "cause": None if cause == "none" else cause,
            "causes": list(state.get("causes", [])),
            "problem": None if state.get("problem", "none") == "none" else state.get("problem"),
            "advice": state.get("advice") or None,
            # what the user must see beside the cause (rules/current_engine.py): [{key, en, zh}]
            "findings": list(state.get("findings", [])),
        }

    def why(self) -> list[dict]:
        """One entry per step decided: the rule, the facts behind it, the step,
        and one sentence in English and Chinese."""
        by_seq = {f["_seq"]: f for f in self._facts}
        entries = []
        for text in self._state.get("why", []):
            entry = json.loads(text)
            entry["because"] = [copy.deepcopy(by_seq[s]) for s in entry["because"] if s in by_seq]
            entries.append(entry)
        return entries

    def readings(self) -> dict[int, dict]:
        """What each posted fact was read as: ``{seq: {"rule", "note",
        "note_zh"}}`` for every fact a reading rule consumed (the verdicts are
        the rules'; a fact carries only its measurements)."""
        out = {}
        chains = [json.loads(text)["chain"] for text in self._state.get("why", [])] + [self._state.get("trail", [])]
        for chain in chains:
            for link in chain:
                if link.get("seq") is not None:
                    out[link["seq"]] = {"rule": link["rule"], "note": link["note"], "note_zh": link["note_zh"]}
        return out

    def facts(self) -> list[dict]:
        """The facts posted so far, in order, each with its ``_seq``."""
        return copy.deepcopy(self._facts)

    def close(self) -> None:
        """Delete the session's state; the Advisor is unusable afterwards."""
        if not self._closed:
            self._closed = True
            self._lang.delete_state(RULESET, self.sid)

    def __enter__(self) -> "Advisor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_measurements(probe: str, facts: Iterable[Mapping[str, Any]], *, limit: int, gpu: bool = False) -> list[dict | None]:
    """How the reading rules read one ``probe`` run's ``facts`` on their own,
    outside a diagnosis: a session that awaits that probe under ``limit``
    (bytes; the fit limit is it less the safety margin), on a GPU or not.
    One entry per fact (``{"rule", "note", "note_zh"}``, None when no reading
    rule consumed it); no deciding rule runs. ``oomvet probe`` and the rig
    tests judge a probe's facts with this, so nothing outside rules/ judges."""
    from rules.configs import config_key
    from rules.steps import PROBE_STAGE

    checked = [validate(f) for f in facts]
    with Advisor() as adv:
        state = adv._read_state()
        state.update(awaiting=probe, stage=PROBE_STAGE.get(probe, "confirm"), has_device=True,
                     device_limit=int(limit), total=int(limit), gpu=bool(gpu))
        recompute_flags(state)
        retests = [f for f in checked if f["kind"] == "stability"]
        if retests:  # a retest stands alone here: it is the candidate it ran
            state["candidate_key"] = config_key(retests[0].get("config") or {})
        adv._lang.update_state(RULESET, state)
        seqs = []
        for fact in checked:
            adv._seq += 1
            fact["_seq"] = adv._seq
            seqs.append(adv._seq)
            adv._send(to_event(fact, adv.sid))
        readings = adv.readings()
    return [readings.get(seq) for seq in seqs]

