"""The loop between the knowledge base and the world.

A :class:`Session` posts what the user said (intake) and what the device is
to the rules, then does whatever one next step the rules ask for: ask a
question, run a probe, try a change (a stability retest of a candidate
config), or finish. The rules decide; this module only carries facts back
and forth and keeps the record (steps, charts, why-chain) that the config and
report writers need. The same loop serves the chat (a person answers) and
``diagnose`` (an answers file, or defaults, answer).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

from assistant import __version__
from assistant.session.answers import answer_facts
from assistant.session.render import field_words, note
from common.catalog import t
from common.errors import ExitCode, ProbeError, ServerUnreachable
from assistant.intake import Intake
from assistant.intake.llm import Transcript
from probes import backend, baseline, context, quant, reproduce, stability
from probes.base import Cancelled, in_effect, known_keys, measured_server_env, settings_to_change
from probes.result import ProbeResult
from probes.units import fmt_size
from rules.configs import config_key
from rules.engine import Advisor
from rules.facts import MEASUREMENTS, PROBES
from rules.thresholds import QUANT_SKIP_SLACK, fit_limit

MAX_STEPS = 60  # a guard against a rules bug looping forever


class UI(Protocol):
    """What the session needs from whoever is on the other side."""

    def ask(self, question: str, reason: str) -> Any:
        """Return the answer (None = don't know / skip)."""

    def consent(self, step: dict) -> bool:
        """May we run this probe / try this change?"""

    def run_probe(self, label: str, work: Callable[[], ProbeResult], env) -> ProbeResult:
        """Run ``work`` (showing progress); may raise Cancelled."""

    def pick(self, chosen: dict, other: dict, want: int | None) -> bool:
        """Two configs were verified (``chosen`` by the rules, ``other``
        beside it, each ``{"config", "unmet"}``): True when the user wants the
        files to write ``other``. Unattended, the rules' choice stands."""

    def show(self, event: str, **data) -> None:
        """Tell the user what happened (a probe result, a diagnosis...)."""


@dataclass
class Outcome:
    result: dict
    exit_code: int


#: what :meth:`Session._run` returns for a probe the user stopped and then skipped
SKIPPED = ProbeResult("skipped", ok=False, error="skipped by the user")


@dataclass
class Session:
    world: Any                       # assistant.session.world.World
    ui: UI
    intake: Intake
    model: str | None = None
    lang: str = "en"
    settle_s: float = 30.0
    answers: dict = field(default_factory=dict)
    transcript: Transcript = field(default_factory=Transcript)  # langchain-core messages
    steps: list = field(default_factory=list)
    charts: list = field(default_factory=list)
    last_stability: dict | None = None
    broken: ProbeError | None = None   # the probe error that ended the session early
    journal: Any = None              # assistant.journal.store.SessionLog: everything on disk before it is used
    stopped_probe: str | None = None  # the probe the user stopped, ending the session there

    def run(self) -> Outcome:
        advisor = Advisor()
        if hasattr(self.ui, "bind"):
            self.ui.bind(self, advisor)
        try:
            return self._loop(advisor)
        finally:
            advisor.close()

    # -- the loop ------------------------------------------------------------
    def _initial_facts(self) -> list[dict]:
        facts = []
        for fact in self.intake.facts():
            if fact["kind"] == "target":
                fact = dict(fact)
                fact["model"] = self.model or fact.get("model")
                if self.answers.get("want_ctx") is not None and fact.get("want_ctx") is None:
                    fact["want_ctx"] = int(self.answers["want_ctx"])
                if self.answers.get("want_parallel") is not None and fact.get("want_parallel") is None:
                    fact["want_parallel"] = int(self.answers["want_parallel"])
                for key in ("keep_context", "keep_concurrency"):
                    if self.answers.get(key) is not None and fact.get(key) is None:
                        fact[key] = bool(self.answers[key])
                fact["budget"] = self.world.limit.bytes if self.world.budget else fact.get("budget")
            facts.append(fact)
        facts.append(self.world.device_fact())
        if self.world.server_fact is not None:
            facts.append(self.world.server_fact)
        return facts

    def _loop(self, advisor: Advisor) -> Outcome:
        step = None
        if self.journal is not None:  # a resumed session first replays what it had journalled
            advisor, step = self.journal.attach(advisor, self)
        if step is None:
            step = advisor.post_many(self._initial_facts())
        for _ in range(MAX_STEPS):
            if step is None:
                raise RuntimeError("the rules gave no next step")
            action = step["action"]
            if action == "done":
                return self._finish(advisor, step)
            if action == "ask":
                reason = step.get("reason_zh") if self.lang == "zh" else step.get("reason")
                value = self.ui.ask(step["question"], reason or step.get("reason") or "")
                # one answer parser: the rules get parsed values, plus what the same words also said
                answers = answer_facts(step["question"], value, device_total=self.world.device_fact().get("total"))
                value = answers[0]["value"]
                if step["question"] == "model" and value:
                    self.model = str(value)
                self._record(step, summary=_asked(step["question"], value, self.lang))
                step = advisor.post_many(answers)
            elif action == "probe":
                step = self._probe(advisor, step)
            elif action == "change":
                step = self._change(advisor, step)
            else:
                raise RuntimeError(f"unknown next action {action!r}")
        raise RuntimeError(f"no conclusion after {MAX_STEPS} steps")

    def _probe(self, advisor: Advisor, step: dict) -> dict:
        name, args = step["probe"], dict(step.get("args") or {})
        result = SKIPPED
        if self.ui.consent(step):
            env = self.world.env
            result = self._run(f"{name}", self._probe_work(name, args, env), env)
        if result is None:
            return self._stopped(advisor, step, name)
        if result is SKIPPED:  # declined, or stopped and then skipped: nothing measured, no verdict
            self._record(step, summary=t("session.skipped", self.lang), ok=None)
            return advisor.post({"kind": "probe_done", "probe": name, "ok": False, "error": SKIPPED.error,
                                 "skipped": True})
        return self._post_result(advisor, step, name, result)

    def _stopped(self, advisor: Advisor, step: dict, name: str) -> dict:
        """The user stopped a probe (Ctrl-C in the chat; the server was put back).
        A probe cut short is no evidence: the session ends as stopped, with what
        was measured before it and exit code 130, never with the verdict an
        empty probe would give (before: "no lower-bit quantization loads within
        the limit" after a Ctrl-C in the quant probe)."""
        if self.journal is not None:  # a resume runs this probe again: what follows is not evidence
            self.journal.append("user_stopped", {"probe": name})
        self._record(step, summary=t("session.stopped", self.lang), ok=None)
        self.broken = Cancelled(f"stopped by the user during the {name} probe")
        self.stopped_probe = name
        return advisor.post_many([{"kind": "probe_done", "probe": name, "ok": False, "error": "stopped by the user"},
                                  {"kind": "stop", "reason": str(self.broken), "by_user": True}])

    def _change(self, advisor: Advisor, step: dict) -> dict:
        if not self.ui.consent(step):
            self._record(step, summary=t("session.refused", self.lang), ok=None)
            return advisor.post({"kind": "answer", "question": "refuse", "value": step.get("remedy") or step["knob"]})
        config = step["config"]
        env = self.world.env
        load = step.get("retest") or {}
        result = self._run("stability", lambda: stability.run(env, config, fill=load.get("fill"),
                                                               repeats=load.get("repeats", 1)), env)
        if result is None:
            return self._stopped(advisor, step, "stability")
        if result is SKIPPED:  # stopped, then skipped: as if the change was refused
            self._record(step, summary=t("session.refused", self.lang), ok=None)
            return advisor.post({"kind": "answer", "question": "refuse", "value": step.get("remedy") or step["knob"]})
        return self._post_result(advisor, step, "stability", result)

    def _probe_work(self, name: str, args: dict, env) -> Callable[[], ProbeResult]:
        model = args.get("model") or self.model
        if name == "reproduce":
            return lambda: reproduce.run(env, model, num_ctx=args.get("num_ctx"), requests=args.get("requests", 1),
                                         phase=args.get("phase", "unknown"))
        if name == "baseline":
            return lambda: baseline.run(env, model, num_ctx=args.get("num_ctx", baseline.DEFAULT_NUM_CTX),
                                        num_batch=args.get("num_batch", 512),
                                        num_parallel=args.get("num_parallel", 1), settle_s=self.settle_s)
        if name == "context":
            return lambda: context.run(env, model, tiers=args.get("tiers"), want_ctx=args.get("want_ctx"),
                                       num_parallel=args.get("num_parallel", 1),
                                       fit_limit_bytes=None if env.limit_bytes is None else fit_limit(env.limit_bytes))
        if name == "quant":
            # a level predicted over the line even allowing for the model's error is not loaded
            return lambda: quant.run(env, model, num_ctx=args.get("num_ctx", 2048), candidates=args.get("candidates"),
                                     task_name=args.get("task", "first"), prediction_slack=QUANT_SKIP_SLACK,
                                     fit_limit_bytes=None if env.limit_bytes is None else fit_limit(env.limit_bytes))
        if name == "backend":
            return lambda: backend.run(env, model, args["knob"], args["value"], num_ctx=args.get("num_ctx", 2048),
                                       old=args.get("old"), num_batch=args.get("num_batch", 512),
                                       num_parallel=args.get("num_parallel", 1),
                                       kv_cache_type=args.get("kv_cache_type", "f16"))
        if name == "stability":
            return lambda: stability.run(env, args["config"], fill=args.get("fill"), repeats=args.get("repeats", 1))
        raise RuntimeError(f"the rules asked for an unknown probe {name!r}")

    def _run(self, label: str, work: Callable[[], ProbeResult], env) -> ProbeResult | None:
        """The probe's result; None when the user stopped it (and, in the
        chat, chose to stop there), :data:`SKIPPED` when they skipped it. A probe that
        breaks (the server went away, a model is missing, an unload never
        finished) gives a failed result, and the session ends with what was
        measured before it instead of losing everything."""
        while True:
            if self.journal is not None:
                self.journal.append("probe_started", {"probe": label})
            try:
                return self.ui.run_probe(label, work, env)
            except Cancelled:
                # nothing a stopped probe measured is used; the chat asks what now, --auto stops
                after = getattr(self.ui, "after_stop", None)
                choice = after(label) if after is not None else "stop"
                if choice == "again":
                    continue
                return SKIPPED if choice == "skip" else None
            except ProbeError as exc:
                self.broken = exc
                return ProbeResult(label, ok=False, error=str(exc))

    def _post_result(self, advisor: Advisor, step: dict, name: str, result: ProbeResult) -> dict:
        if self.journal is not None:
            self.journal.append("charts", {"charts": [c.to_dict() for c in result.charts]})
        self.charts.extend(c.to_dict() for c in result.charts)
        for fact in result.facts:
            if fact["kind"] == "stability":
                self.last_stability = fact
        self._record(step, summary=_summary(result, self.lang), ok=result.ok, peak=_peak(result), wall_s=result.wall_s,
                     notes=[note(n, self.lang) for n in result.notes])
        facts = [*result.facts, {"kind": "probe_done", "probe": name, "ok": result.ok, "error": result.error}]
        if self.broken is not None:
            facts.append({"kind": "stop", "reason": str(self.broken)})
        next_step = advisor.post_many(facts)
        # the rules' reading of each measurement, shown under the probe's own figures
        read = advisor.readings()
        posted = advisor.facts()[-len(facts):]
        readings = [read[f["_seq"]] for f in posted
                    if f["_seq"] in read and f["kind"] in MEASUREMENTS]
        self.ui.show("probe_result", result=result, step=step, readings=readings)
        return next_step

    def _record(self, step: dict, **extra) -> None:
        entry = {"n": len(self.steps) + 1, "action": step["action"]}
        for key in ("probe", "question", "knob", "from", "to", "remedy"):
            if key in step:
                entry[key] = step[key]
        entry.update({k: v for k, v in extra.items() if v is not None or k == "ok"})
        if self.journal is not None:
            self.journal.append("step", entry)
        self.steps.append(entry)

    # -- the end -------------------------------------------------------------
    def _picked(self, advisor: Advisor, step: dict) -> dict:
        """``step`` as the user picked between the two verified answers: as
        it is, or with the other answer as the config and the rules' choice
        shown beside it (each keeps its own retest as evidence)."""
        config, alternatives = step.get("config"), list(step.get("alternatives") or [])
        other = next((a for a in alternatives if a.get("verified") and a.get("config")), None)
        pick = getattr(self.ui, "pick", None)
        if not (config and step.get("verified") and other and pick):
            return step
        chosen = {"config": config, "unmet": list(step.get("unmet") or [])}
        if not pick(chosen, other, step.get("want_ctx")):
            return step
        own = _own_retest(advisor.facts(), config) or {}
        former = {"kind": "context" if other["kind"] == "quant" else "quant", "config": dict(config),
                  "verified": True, "peak": own.get("peak"), "unmet": chosen["unmet"]}
        picked = other["config"]
        self._record({"action": "pick"}, summary=f"{picked.get('model')}, num_ctx {picked.get('max_context_len')}")
        return dict(step, config=dict(other["config"]), unmet=list(other.get("unmet") or []),
                    alternatives=[former] + [a for a in alternatives if a is not other], chosen_by="user_picked")

    def _finish(self, advisor: Advisor, step: dict) -> Outcome:
        step = self._picked(advisor, step)
        found = advisor.diagnosis or {}
        cause = found.get("cause") if found.get("cause") not in (None, "none") else step.get("cause")
        diagnosis = {"cause": cause, "summary": t(f"ui.cause.{cause}", self.lang)}
        # what the user must see beside the cause (rules/current_engine.py, rules/versions.py)
        findings = [f.get(self.lang) or f.get("en") for f in found.get("findings") or []]
        if findings:
            diagnosis["findings"] = findings
        reproduced = step.get("reproduced")
        if reproduced:
            diagnosis["reproduced"] = reproduced
            diagnosis["reproduction"] = _reproduction(reproduced, self.lang)
            if cause is None and reproduced["verdict"] == "none" and step.get("config"):
                diagnosis["summary"] = t("ui.cause.not_reproduced", self.lang)
        config = step.get("config")
        alternatives = [dict(a) for a in step.get("alternatives") or []]
        if alternatives and config:
            # what chose the config over the other answer, said as the rule did
            diagnosis["choice"] = t(f"ui.choice.{step.get('chosen_by') or 'method_order'}", self.lang,
                                    want=step.get("want_ctx") or "?", ctx=config.get("max_context_len"),
                                    quant=config.get("quant_type") or "?")
        verified = bool(step.get("verified"))
        fits = bool(step.get("fits", config is not None))
        if step.get("advice"):
            # the rules give what to do instead in both languages; the key stays for scripts
            diagnosis["advice"] = step.get(f"advice_{self.lang}") or step.get("advice_en") or step["advice"]
            diagnosis["advice_key"] = step["advice"]
        facts = advisor.facts()
        engine = (self.world.server_fact or {}).get("engine")
        result = {
            "tool": f"oomvet {__version__}",
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "host": self.world.host,
            "world": self.world.kind,
            "model": self.model,
            "config": config,
            "verified": verified,
            "unverified": None if verified else step.get("unverified"),
            "unverified_zh": None if verified else step.get("unverified_zh"),
            "fits": fits,
            "unmet": list(step.get("unmet") or []),
            # the other answers measured beside the config: each with its config, verified, peak, unmet, why
            "alternatives": alternatives,
            "want_ctx": step.get("want_ctx"),
            "stopped_probe": self.stopped_probe,
            "diagnosis": diagnosis,
            "server_env": _server_env(config, in_effect(self.world.env.control.env(), engine),
                                      known_keys(self.world.env.control), fa_auto=engine == "llama-server"),
            "steps": self.steps,
            "evidence": self._evidence(facts, config),
            "facts": facts,
            # the rules' reading of each fact, by its _seq: the verdicts the facts do not hold
            "readings": [{"seq": seq, **reading} for seq, reading in sorted(advisor.readings().items())],
            "why": advisor.why(),
            "probes": self.charts,
            "transcript": self.transcript.to_json(),
            "lang": self.lang,
        }
        code = ExitCode.OK if (verified and fits and config) else ExitCode.NO_FIT
        if isinstance(self.broken, (ServerUnreachable, Cancelled)):
            code = self.broken.exit_code
        if self.journal is not None:
            self.journal.finished(result, code)
        self.ui.show("done", result=result)
        return Outcome(result, code)

    def _evidence(self, facts: list[dict], config: dict | None = None) -> dict:
        device = next((f for f in facts if f["kind"] == "device"), {})
        loads = [f for f in facts if f["kind"] == "load"]
        readings = {}
        if loads:
            first = loads[0]
            readings = {"idle": first.get("used_idle"), "after_load": first.get("used_after"),
                        "settled": first.get("used_settled")}
        # the recommended config's own peak, from its own retest: not the highest of every
        # step (a failed tier at another context is no reading of this config)
        own = [f for f in _retests_of(facts, config) if f.get("peak") is not None] if config else []
        if own:
            readings["peak"] = own[-1]["peak"]
        return {"device": {k: device.get(k) for k in ("name", "vendor", "total", "source", "unified")},
                "limit": self.world.limit.bytes, "limit_note": str(self.world.limit.note),
                "limit_note_zh": self.world.limit.text("zh"),
                "readings": readings,
                # the posted copy (with its _seq), so the report can show the rules' reading of it
                "stability": _own_retest(facts, config) or self.last_stability}


def _own_retest(facts: list[dict], config: dict | None) -> dict | None:
    """The last retest of ``config`` itself (an alternative's retest, run
    beside it, is not its evidence); with no config, the last retest."""
    retests = [f for f in facts if f["kind"] == "stability"]
    if config:
        retests = _retests_of(facts, config) or retests
    return retests[-1] if retests else None


def _retests_of(facts: list[dict], config: dict) -> list[dict]:
    """The retests of ``config`` itself, in order."""
    key = config_key(config)
    return [f for f in facts if f["kind"] == "stability" and config_key(f.get("config") or {}) == key]


def _server_env(config: dict | None, in_effect: dict[str, str] | None,
                known: frozenset[str] | None = None, fa_auto: bool = False) -> dict[str, str]:
    """The server settings the config needs that are not already in effect on
    the server (all of them when its settings could not be read); none before
    a config. The files write only these: a user's own settings stay theirs."""
    if not config:
        return {}
    return settings_to_change(in_effect, measured_server_env(config.get("max_concurrency"), config.get("kv_cache")),
                              fa_auto=fa_auto, known=known)


def _reproduction(seen: dict, lang: str) -> str:
    """What the user's own setup did when it was run first, in a sentence."""
    slots, requests = seen.get("num_parallel"), seen.get("requests") or 0
    load = (t("ui.repro.load.requests", lang, requests=requests) if requests
            else t("ui.repro.load.alone", lang))  # a failure at load: no request is sent
    return t(f"ui.repro.{seen['verdict']}", lang, ctx=seen.get("num_ctx") or "?",
             slots=slots if slots else t("ui.repro.slots_unknown", lang), load=load,
             peak=fmt_size(seen.get("peak")), error=(seen.get("error") or "?").splitlines()[0],
             vram=fmt_size(seen.get("size_vram")), size=fmt_size(seen.get("size")))


def _peak(result: ProbeResult) -> int | None:
    """The peak of what the probe reports on (a backend trial's new setting,
    not its reference run), else of everything it sampled."""
    peaks = [f["peak"] for f in result.facts if f.get("peak") is not None]
    peaks = peaks or [c.peak_bytes for c in result.charts if c.peak_bytes is not None]
    return max(peaks) if peaks else None


def _asked(question: str, value: Any, lang: str) -> str:
    """A question and its answer as the steps table says them: words, not keys and True."""
    what, shown = field_words(question, value, lang)
    return t("session.asked", lang, question=what, value=shown)


def _summary(result: ProbeResult, lang: str) -> str:
    peak = _peak(result)
    name = t(f"probe.name.{result.name}", lang) if result.name in PROBES else result.name
    text = t("session.ok" if result.ok else "session.failed", lang, name=name)
    if peak is not None:
        text += t("session.peak", lang, peak=fmt_size(peak))
    if result.error:
        text += f" — {note(result.error, lang)}"
    return text


