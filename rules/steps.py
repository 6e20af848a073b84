"""The next step a deciding rule issues, and the record of why.

A *step* here is what the session is told to do next: ``ask`` a question,
``probe`` (run a measurement), ``change`` one knob (then retest it), or
``done``. The builders return the step as a plain dict; :func:`issue` makes it
the session's next step, records the why entry, and moves the session to the
stage that waits for its answer or its measurements.
"""
from __future__ import annotations

import json
from typing import Any

from common.catalog import pair
from rules import thresholds
from rules.configs import (PROBE_KNOB, base_config, baseline_ctx, config_key, current_ctx, full_config,
                           knobs_changed, unmet_wishes, utilization)

#: probe -> the stage the session waits in while it runs (a stability retest
#: waits in ``retest`` after a change, in ``confirm`` otherwise)
PROBE_STAGE = {"reproduce": "reproduce", "baseline": "baseline", "context": "context", "quant": "quant", "backend": "backend"}


def ask(st: dict, question: str) -> dict:
    return {"action": "ask", "question": question}


def probe(st: dict, name: str, **extra: Any) -> dict:
    if name == "reproduce":
        requests = st["want_parallel"] if st["phase"] == "concurrent" and st["want_parallel"] > 0 else 1
        # the context the user's requests carry: none when their app sends none
        ctx = None if st["ctx_unset"] else st["want_ctx"] or None
        args = {"model": st["model"], "num_ctx": ctx, "requests": requests,
                "phase": st["phase"]}
    elif name == "baseline":
        args = {"model": st["model"], "num_ctx": baseline_ctx(st),
                "num_batch": thresholds.CONSERVATIVE_NUM_BATCH, "num_parallel": thresholds.CONSERVATIVE_NUM_PARALLEL}
    elif name == "context":
        args = {"model": st["tag"], "want_ctx": st["want_ctx"] or None, "num_parallel": 1}
    elif name == "quant":
        if extra.get("recheck"):  # one level again, at the same context, on the second coherence task
            args = {"model": st["tag"], "num_ctx": st["quant_ctx"], "candidates": [extra["recheck"]],
                    "task": "recheck"}
        else:
            args = {"model": st["tag"], "num_ctx": extra.get("num_ctx") or current_ctx(st)}
            st["quant_ctx"] = args["num_ctx"]
    elif name == "backend":
        base = extra["base"]
        args = {"model": base["model"], "num_ctx": base["max_context_len"],
                "knob": PROBE_KNOB[extra["key"]], "value": extra["value"],
                "num_batch": base["max_batch_size"], "num_parallel": base["max_concurrency"],
                "kv_cache_type": base["kv_cache"]}
        st["knob_phase"] = extra["phase"]
        st["knob_try"] = [extra["key"], extra["value"]]
    elif name == "stability":
        args = {"config": full_config(extra.get("config") or st["config"]), **retest_load(st)}
    else:  # pragma: no cover - the rules name only the six probes
        raise ValueError(f"no probe {name!r}")
    return {"action": "probe", "probe": name, "args": args}


def change(st: dict, key: str, to: Any, peak: int | None, remedy: str, tag: str | None = None) -> dict:
    """Propose one knob's change against the config it is measured from, and
    refuse (raise) if that would move more than one knob: the invariant holds
    in the rules, whatever the caller does."""
    base = base_config(st)
    candidate = dict(base)
    candidate[key] = to
    if key == "quant_type":
        candidate["model"] = tag
    candidate["gpu_memory_utilization"] = utilization(st, peak)
    moved = knobs_changed(base, candidate)
    if len(moved) != 1:
        raise AssertionError(f"a change must move exactly one knob, this one moves {sorted(moved) or 'none'}")
    st["candidate"] = candidate
    st["candidate_key"] = config_key(candidate)
    st["change"] = {"key": key, "remedy": remedy, "from": base.get(key), "to": to}
    return {"action": "change", "knob": key, "from": base.get(key), "to": to,
            "config": full_config(candidate), "remedy": remedy, "base": full_config(base), "retest": retest_load(st)}


def retest_load(st: dict) -> dict:
    """The load the stability retest puts on a config, as the symptom names
    it: a long-input complaint fills the context, memory that creeps gets
    repeated requests; concurrency is the config's own (its slots, all busy)."""
    if st["phase"] == "long_input":
        return {"fill": thresholds.RETEST_FILL}
    if st["phase"] == "creeping":
        return {"repeats": thresholds.RETEST_REPEATS}
    return {}


def done(st: dict, fits: bool, advice: str, config: dict | None = None) -> dict:
    """The final step. Without ``config`` it is the current config, verified
    only if its last stability retest passed; a finding passed as ``config``
    (measured, never retested) is reported unverified."""
    if advice:
        st["advice"] = advice
    if config is None:
        cfg = st["config"] if st["has_config"] else None
        verified = bool(cfg) and st["config_verified"]
    else:
        cfg, verified = config, False
    unverified = unverified_zh = None
    if not verified:
        unverified, unverified_zh = _unverified(st, cfg)
    return {"action": "done", "cause": None if st["cause"] == "none" else st["cause"],
            "config": full_config(cfg), "verified": bool(verified),
            # a verified config was retested within the limit: it fits, whatever wish it leaves
            # unmet (``unmet`` and the advice say which)
            "fits": (bool(fits) or bool(verified)) and bool(cfg),
            "advice": advice or None, "unverified": unverified, "unverified_zh": unverified_zh,
            "unmet": unmet_wishes(st, cfg),
            # the other answers measured beside this one, and what chose between them
            "alternatives": [dict(a, config=full_config(a.get("config")), unmet=unmet_wishes(st, a.get("config")))
                             for a in st["alternatives"]],
            "chosen_by": _chosen_by(st) if st["alternatives"] else None,
            "want_ctx": st["want_ctx"] or None,
            # what the user's own setup did when it was run first (None: it was not run)
            "reproduced": None if st["repro"] == "unrun" else {"verdict": st["repro"], **st["repro_at"]}}


def _unverified(st: dict, cfg: dict | None) -> tuple[str, str]:
    """Why the config is not verified, the first reason that holds, in English
    and Chinese (what a probe or the server said is quoted as it said it)."""
    if st["stop_reason"]:
        return pair("rulebook.unverified.stopped", why=st["stop_reason"])
    if st["unconfirmed_why"]:
        return pair("rulebook.unverified.unconfirmed", why=st["unconfirmed_why"])
    if st["unmeasured_why"]:
        return pair("rulebook.unverified.unmeasured", why=st["unmeasured_why"])
    if st["retest_failed_why"] and cfg:
        en, zh = pair("rulebook.unverified.retest_failed", why="{why}")
        return en.format(why=st["retest_failed_why"]), zh.format(why=st["retest_failed_why_zh"] or st["retest_failed_why"])
    return pair("rulebook.unverified.no_retest" if cfg else "rulebook.unverified.no_config")


def _chosen_by(st: dict) -> str:
    """What chose the config over its alternatives: the user kept the context
    (a lower bit instead), let it shrink, or said nothing (the method's order:
    the context first)."""
    if st["keep_context"] == "yes" or st["context_refused"]:
        return "keep_context"
    return "context_may_shrink" if st["keep_context"] == "no" else "method_order"


def issue(st: dict, rule: str, step: dict, reason: str, reason_zh: str) -> None:
    """Make ``step`` the session's next step and record why."""
    st["n"] += 1
    if step["action"] == "ask":
        step["reason"] = reason
        step["reason_zh"] = reason_zh
    if step["action"] == "done" and step.get("advice"):
        step["advice_en"], step["advice_zh"] = pair(f"advice.{step['advice']}")
    seqs = sorted({t["seq"] for t in st["trail"] if "seq" in t})
    entry = {"n": st["n"], "rule": rule, "because": seqs, "chain": st["trail"],
             "next": step, "reason": reason, "reason_zh": reason_zh}
    st["why"].append(json.dumps(entry, ensure_ascii=False))
    st["trail"] = []
    st["next_json"] = json.dumps(step, ensure_ascii=False)
    st["again"] = False
    action = step["action"]
    if action == "ask":
        st["waiting_answer"] = True
        st["pending_q"] = step["question"]
        st["q_" + step["question"]] = "asked"
    elif action == "probe":
        _await(st, step["probe"])
    elif action == "change":
        st["stage"] = "retest"
        _await(st, "stability")
    elif action == "done":
        st["stage"] = "done"
        st["awaiting"] = "none"


def _await(st: dict, name: str) -> None:
    if name != "stability":
        st["stage"] = PROBE_STAGE[name]
    elif st["alt_phase"] == "retest":
        st["stage"] = "alternative"  # the other answer's retest: it never counts for the chosen config
    elif st["stage"] != "retest":
        st["stage"] = "confirm"
    st["awaiting"] = name
    st["finished"] = False
    st["probe_error"] = ""
    st["probe_skipped"] = False
    if name == "reproduce":
        st.update(repro="unrun", repro_tried=True, repro_at={})
    elif name == "baseline":
        st.update(load="none", load_reading={})
    elif name == "context":
        st.update(tiers=[], tier_best_ctx=0, tier_best_peak=0, tier_fit_count=0, tiers_seen=0,
                  tier_mem_fail=False, tier_fail_ctx=0, first_tier_failed=False, tier_crash=False,
                  tier_crash_error="", tier_truncated=False, tier_not_back=False, recheck_context=False)
    elif name == "quant" and st["quant_recheck"]:
        # a re-check reads one level again: the other levels' readings stand
        st["quant_rejected"] = [r for r in st["quant_rejected"] if r["tag"] != st["quant_recheck"]]
        st["quant_probed_tag"] = ""
    elif name == "quant":
        st.update(quant_options=[], quant_rejected=[], quant_probed_tag="")
    elif name == "backend":
        st.update(knob="none", knob_reading={})
    elif name == "stability":
        st["retest"] = "none"
        st["retest_measured"] = False
        st["retest_why"] = []
        if st["stage"] == "confirm":
            st["candidate_key"] = config_key(st["config"])
        elif st["stage"] == "alternative":
            st["candidate_key"] = config_key(st["alt_config"])
