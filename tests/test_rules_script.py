"""A scripted session for the rules tests: it answers each next step from
queues, the way the real session loop answers them with probes and the user.

``Script`` is a queue-driven fake (``.enqueue()``, ``.history``); ``drive``
runs an Advisor against it and returns the compact trace of steps. The fact
builders make facts that pass ``rules.facts.validate``. The other
``test_rules_*`` files import these; the tests at the bottom check the driver.
"""
from __future__ import annotations

from collections import deque

import pytest

from rules.engine import Advisor

GiB = 1 << 30
MiB = 1 << 20
MODEL = "neohorse:8b-q8_0"


# --- fact builders -------------------------------------------------------------

def symptom(phase="load", text="it runs out of memory"):
    return {"kind": "symptom", "phase": phase, "text": text}


def target(model=MODEL, want_ctx=None, want_parallel=None, budget=None, **extra):
    return {"kind": "target", "model": model, "want_ctx": want_ctx, "want_parallel": want_parallel,
            "budget": budget, **extra}


def reproduction(num_ctx=8192, num_parallel=None, requests=1, phase="unknown", peak=6 * GiB, answered=True,
                 error=None, measured=True, **extra):
    fact = {"kind": "reproduction", "model": MODEL, "num_ctx": num_ctx, "num_parallel": num_parallel,
            "parallel_from": "unknown" if num_parallel is None else "environ", "requests": requests,
            "phase": phase, "answered": answered, "error": error, "peak": peak, "measured": measured, **extra}
    return fact


def device(total=24 * GiB, vendor="nvidia", limit=None, name="RTX 4090"):
    fact = {"kind": "device", "name": name, "vendor": vendor, "total": total, "used_idle": 1 * GiB,
            "unified": False}
    if limit is not None:
        fact["limit"] = limit
    return fact


def load(ok=True, used=10 * GiB, placement="gpu", drift=0.0, model=MODEL, num_ctx=2048, level="Q8_0",
         error=None, over_limit=False, **extra):
    """``ok``: the server answered; ``over_limit``: the load's peak passed every limit."""
    return {"kind": "load", "model": model, "options": {"num_ctx": num_ctx, "num_batch": 512}, "answered": ok,
            "error": error, "size": used if ok else None, "size_vram": used if placement == "gpu" else used // 2,
            "used_after": used if ok else None, "used_settled": used if ok else None, "drift_per_min": drift,
            "placement": placement, "level": level, "peak": OVER_EVERY_LIMIT if over_limit else used, **extra}


#: a peak above any limit a case sets
OVER_EVERY_LIMIT = 1 << 50


def tier(name, num_ctx, peak=None, ok=True, oom=None, truncated=False, error=None, back=True, **extra):
    """The raw tier a probe posts for the case: ``ok`` the server answered,
    ``oom`` its error says memory ran out, ``truncated`` it evaluated half the
    prompt, ``back`` usage fell back after the second request (None: not measured)."""
    sent = num_ctx - 64
    fact = {"kind": "tier", "name": name, "num_ctx": num_ctx, "prompt_tokens": sent // 2 if truncated else sent,
            "sent_tokens": sent, "peak": peak, "answered": ok, "error": error, **extra}
    if not ok:
        fact["prompt_tokens"] = None
    if oom:
        fact["failure"] = "runtime_oom"
    elif oom is False and not ok:
        fact["failure"] = "crash"
    if back is not None and peak is not None:
        fact.update(after_first_bytes=peak // 2, after_second_bytes=peak // 2 + (0 if back else peak // 2))
    return fact


def oom_tier(name, num_ctx):
    return tier(name, num_ctx, ok=False, oom=True, error="CUDA error: out of memory")


#: the figures of a sound answer to the coherence task, and of a looping one
SOUND = {"answer_chars": 400, "repeat_share": 0.02, "garbled_share": 0.0, "done_reason": "stop", "last_char": ".",
         "numbers_checked": 5, "numbers_lost": 0, "numbers_in_task": 5, "numbers_invented": 0, "code_spans": 1,
         "code_spans_kept": 1}
LOOPING = dict(SOUND, repeat_share=0.9)


def trial(tag, level, peak=None, ok=True, coherent=True, issues=()):
    """``coherent`` None: the answer's figures were not read."""
    figures = {} if coherent is None or not ok else SOUND if coherent else LOOPING
    return {"kind": "quant_trial", "tag": tag, "level": level, "answered": ok, "weights": peak and peak - GiB,
            "peak": peak, **figures}


def knob(name, new, peak=None, ok=True, old=None, **extra):
    return {"kind": "knob_trial", "knob": name, "old": old, "new": new, "peak": peak, "answered": ok, **extra}


#: what a measured stability retest peaks at when a case does not say: below
#: every limit the cases use, as a real retest of a config that fits would be
RETEST_PEAK = 1 * GiB
#: the stability task's own token count
TASK_TOKENS = 1200


def passed(peak=RETEST_PEAK):
    return {"answered": True, "prompt_tokens": TASK_TOKENS, "task_tokens": TASK_TOKENS, "repeat_share": 0.02,
            "peak": peak, "measured": True}


def regressed():
    """A retest that ran but cut the input: the change made things worse."""
    return {"answered": True, "prompt_tokens": TASK_TOKENS // 2, "task_tokens": TASK_TOKENS, "repeat_share": 0.02,
            "peak": RETEST_PEAK, "measured": True}


def unmeasured_retest(reason="3 of 40 memory readings failed"):
    return {"answered": True, "prompt_tokens": TASK_TOKENS, "task_tokens": TASK_TOKENS, "repeat_share": 0.02,
            "peak": None, "measured": False, "unmeasured": reason}


def crashed():
    """The runner died mid-task; the device readings went on (the peak up to the crash)."""
    return {"answered": False, "repeat_share": None, "peak": RETEST_PEAK, "measured": True,
            "errors": ["llama runner process has terminated"]}


# --- the scripted caller -----------------------------------------------------

class ScriptError(AssertionError):
    """The rules asked for something the script has no reply for."""


class Script:
    """Replies to steps from queues: ``answers`` by question, one list of facts
    per probe run, one stability outcome per retest, remedies to refuse and
    probes the user declines (``skip``)."""

    def __init__(self, answers=None, refuse=(), skip=(), **queues):
        self.answers = dict(answers or {})
        self.refuse = list(refuse)
        self.skip = list(skip)
        self.queues = {name: deque() for name in ("reproduce", "baseline", "context", "quant", "backend",
                                                  "stability")}
        for name, replies in queues.items():
            self.enqueue(name, *replies)
        self.history: list[dict] = []

    def enqueue(self, probe, *replies):
        if probe not in self.queues:
            raise ScriptError(f"no probe queue {probe!r}")
        self.queues[probe].extend(replies)
        return self

    def _next(self, probe, step):
        if not self.queues[probe]:
            raise ScriptError(f"the script has no reply for {probe} (step {step})")
        return self.queues[probe].popleft()

    def reply(self, step: dict) -> list[dict]:
        self.history.append(step)
        action = step["action"]
        if action == "ask":
            return [{"kind": "answer", "question": step["question"], "value": self.answers.get(step["question"])}]
        if action == "change":
            if step["remedy"] in self.refuse:
                self.refuse.remove(step["remedy"])
                return [{"kind": "refusal", "remedy": step["remedy"]}]
            return self._stability(step["config"], step)
        if action == "probe":
            if step["probe"] in self.skip:  # declined at consent, as the session posts it
                self.skip.remove(step["probe"])
                return [{"kind": "probe_done", "probe": step["probe"], "ok": False, "error": "skipped by the user",
                         "skipped": True}]
            if step["probe"] == "stability":
                return self._stability(step["args"]["config"], step)
            if step["probe"] == "reproduce" and not self.queues["reproduce"]:
                # the user's setup, run first on a server the session knows of:
                # unless a test says otherwise, it ran and its figures tell nothing new
                facts = [reproduction(num_ctx=step["args"]["num_ctx"], requests=step["args"]["requests"],
                                      peak=None, answered=True, measured=False)]
            else:
                facts = list(self._next(step["probe"], step))
            return facts + [{"kind": "probe_done", "probe": step["probe"], "ok": True}]
        raise ScriptError(f"nothing to reply to {step}")

    def _stability(self, config, step):
        outcome = dict(self._next("stability", step))
        fact = {"kind": "stability", "config": config, "eval_count": 256, "done_reason": "length",
                "answered": outcome.pop("answered"),
                "repeat_share": outcome.pop("repeat_share", None), "errors": outcome.pop("errors", [])}
        fact.update({k: v for k, v in outcome.items() if v is not None})
        return [fact, {"kind": "probe_done", "probe": "stability", "ok": True}]


def label(step: dict) -> str:
    """A step as one short string: ``ask:model``, ``probe:quant``,
    ``change:max_context_len=4096``, ``done``."""
    action = step["action"]
    if action == "ask":
        return f"ask:{step['question']}"
    if action == "probe":
        if step["probe"] == "backend":
            return f"probe:backend:{step['args']['knob']}={step['args']['value']}"
        return f"probe:{step['probe']}"
    if action == "change":
        return f"change:{step['knob']}={step['to']}"
    return "done"


def drive(first: list[dict], script: Script, advisor: Advisor | None = None, max_steps: int = 40):
    """Post ``first``, then answer every step from ``script`` until done.
    Returns ``(advisor, trace, steps)``; the advisor is left open for reading."""
    adv = advisor or Advisor()
    step = adv.post_many(first)
    steps = [step]
    while step["action"] != "done":
        if len(steps) > max_steps:
            raise ScriptError(f"no end after {max_steps} steps: {[label(s) for s in steps]}")
        step = adv.post_many(script.reply(step))
        steps.append(step)
    return adv, [label(s) for s in steps], steps


# --- the driver itself -------------------------------------------------------

def test_script_refuses_a_probe_it_has_no_reply_for():
    with pytest.raises(ScriptError, match="no reply for baseline"):
        Script().reply({"action": "probe", "probe": "baseline", "args": {}})


def test_script_records_every_step_it_answered():
    script = Script(answers={"model": MODEL})
    script.reply({"action": "ask", "question": "model"})
    assert script.history == [{"action": "ask", "question": "model"}]


def test_stability_reply_carries_the_config_it_was_given():
    script = Script(stability=[passed(peak=5 * GiB)])
    facts = script.reply({"action": "probe", "probe": "stability", "args": {"config": {"model": "m"}}})
    assert facts[0]["config"] == {"model": "m"} and facts[0]["peak"] == 5 * GiB
    assert facts[1] == {"kind": "probe_done", "probe": "stability", "ok": True}
