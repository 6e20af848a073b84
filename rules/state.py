"""The session state the rules match on: its fields, its derived flags, and
the engine's copy of a posted fact.

durable_rules keeps one state dict per session id; every rule's conditions
read it, every action writes it. Values written into it must never be
``None`` (durable_rules cannot compare nulls); "unknown" is spelled ``""``,
``0`` or ``"none"``, and rich values that may hold ``None`` (steps, the why
chain) are stored as JSON text the rules never look into. The derived flags
(:func:`recompute_flags`) are recomputed after every action, so a condition
never reads a stale value. Throughout rules/, ``st`` is this dict and ``f`` the
fact being read.
"""
from __future__ import annotations

import json
from typing import Any

from rules import thresholds
from rules.configs import base_config, config_key
from rules.moves import usable_rungs

#: the questions the rules may ask, each tracked as ``q_<question>``:
#: missing / asked / known / skipped
QUESTIONS = ("symptom", "model", "want_ctx", "want_parallel", "budget", "keep_context", "keep_concurrency")


def initial_state(sid: str, max_steps: int = thresholds.MAX_STEPS) -> dict:
    """A fresh session: nothing known, every question still open."""
    st: dict[str, Any] = {
        "sid": sid,
        "max_steps": max_steps,
        "stage": "intake",
        "awaiting": "none",
        "finished": False,
        "again": False,
        "n": 0,
        "waiting_answer": False,
        "pending_q": "none",
        # what the user wants, and the device
        "phase": "unknown",
        "symptom_text": "",
        "model": "",
        "want_ctx": 0,
        "want_parallel": 0,
        "budget": 0,
        "keep_context": "unknown",
        "keep_concurrency": "unknown",
        "upgraded": False,          # the user blames an upgrade
        "upgraded_from": "",        # the version it worked on, as they said it ("" not named)
        "found_upgrade": False,
        "ctx_unset": False,         # the user's app sends no num_ctx: their setup runs at the server's default
        "has_device": False,
        "vendor": "",
        "gpu": False,
        "total": 0,
        "device_limit": 0,
        "limit": 0,
        "fit_limit": 0,
        # the user's own setup, as it ran under the symptom's load (method step 1)
        "srv_seen": False,
        "srv_version": "",          # a server fact was posted: there is a server to run the user's setup on
        "repro": "unrun",           # unrun / oom / spill / over / crash / cut / none / unmeasured
        "repro_tried": False,
        "repro_at": {},             # what it ran with, and its peak and error
        "repro_parallel": 0,        # the server's slots as read (0: not read)
        "slots_checked": False,     # fewer slots than the server's were measured against them
        # readings of the probe now running (reset when it is requested)
        "probe_error": "",
        "probe_skipped": False,     # the user declined or skipped it: no evidence either way
        "load": "none",
        "load_reading": {},
        "tiers": [],
        "tier_best_ctx": 0,
        "tier_best_peak": 0,
        "tier_fit_count": 0,
        "tiers_seen": 0,
        "tier_mem_fail": False,
        "tier_fail_ctx": 0,
        "first_tier_failed": False,
        "tier_crash": False,
        "tier_crash_error": "",
        "tier_truncated": False,
        "tier_not_back": False,
        "quant_options": [],
        "quant_rejected": [],
        "quant_probed_tag": "",
        "quant_ctx": 0,             # the context the quant trials ran at
        "quant_recheck": "",        # the level being re-checked on a second task ("" none)
        "quant_rechecked": [],      # levels re-checked once already (never twice)
        "knob_phase": "none",
        "knob": "none",
        "knob_reading": {},
        "knob_try": [],
        "retest": "none",
        "retest_measured": False,   # the latest retest's peak was measured by a source that saw the model
        "retest_why": [],           # why the latest retest regressed against the one before
        "last_retest": {},          # the previous retest, what the next one is compared with
        "retest_failed_why": "",    # why the latest retest failed (the final step's "not verified" says it)
        "retest_failed_why_zh": "",
        "unconfirmed_why": "",      # the server settings a retest could not confirm in effect, and why
        "unmeasured_why": "",       # the latest reason a reading was not a measurement
        "stop_reason": "",          # why the session must end now (a `stop` fact)
        "stopped_by_user": False,   # the stop fact was the user's own
        "trained_ctx": 0,           # the model's trained context, as the context probe read it
        "confirm_failed": False,
        # the session's decisions so far
        "config": {},
        "has_config": False,
        "config_verified": False,
        "reference": {},
        "against_reference": False,
        "candidate": {},
        "candidate_key": "",
        "change": {},
        "backend_fit": {},
        "has_backend_fit": False,
        "ladder": [],
        "problem": "none",
        "cause": "none",
        "causes": [],
        "advice": "",
        "context_refused": False,
        "context_failed_tags": [],
        "quant_refused": False,
        "quant_tried": [],
        "backend_refused": False,
        "recheck_context": False,
        "concurrency_checked": False,
        # the other answer to a KV cache overflow, measured beside the chosen one (method step 7):
        # the first tag's largest fitting context, kept when the overflow is found
        "kv_fit": {},
        "alt_phase": "none",        # none / quant / retest / done
        "alt_kind": "none",         # which: quant / context
        "alt_config": {},           # the alternative being retested
        "alt_saved": {},            # the chosen config's retest record, put back after the alternative's
        "alternatives": [],         # each: kind, config, verified, peak, why
        "retest_peak": 0,           # the latest retest's peak (0: not measured)
        # the record
        "trail": [],
        "why": [],
        "next_json": "",
    }
    for q in QUESTIONS:
        st["q_" + q] = "missing"
    recompute_flags(st)
    return st


def recompute_flags(st: dict) -> None:
    """Recompute the derived flags the rules match on and drop ``None``s; run
    after every action so a condition never reads a stale or null value."""
    cfg = st["config"]
    st["tag"] = base_config(st).get("model") or st["model"]
    st["limit"] = _limit(st)
    st["fit_limit"] = thresholds.fit_limit(st["limit"]) if st["limit"] else 0
    st["has_limit"] = st["limit"] > 0
    st["short_of_want"] = bool(st["tier_mem_fail"]) and (
        st["want_ctx"] == 0 or st["tier_best_ctx"] < st["want_ctx"])
    st["context_blocked"] = (st["context_refused"] or st["keep_context"] == "yes"
                             or st["tag"] in st["context_failed_tags"])
    st["quant_probed"] = bool(st["quant_probed_tag"]) and st["quant_probed_tag"] == st["tag"]
    st["quant_left"] = any(o["tag"] not in st["quant_tried"] for o in st["quant_options"])
    st["quant_contradiction"] = bool(contradicting_level(st))
    st["wants_concurrency"] = (st["want_parallel"] > 1 and st["has_config"]
                               and cfg.get("max_concurrency", 1) < st["want_parallel"])
    st["concurrency_short"] = (st["want_parallel"] > 1 and st["has_config"]
                               and 0 < (cfg.get("max_concurrency") or 1) < st["want_parallel"])
    st["ladder_left"] = len(usable_rungs(st)) > 0
    # a rung left would serve fewer requests at once than wanted: worth asking whether that may be
    st["ladder_drops_wish"] = any(r[0] == "max_concurrency" and r[1] < st["want_parallel"] for r in st["ladder"])
    # the user's failure came back on the server's own slots, and the config
    # measured since runs fewer: the slots are what the failure showed
    st["repro_failed"] = st["repro"] in ("oom", "spill", "over")
    # the user's setup failed at a context larger than the config's, on no more slots than wanted
    st["repro_ctx_overflow"] = (st["repro_failed"] and st["has_config"]
                                and (st["repro_parallel"] <= max(st["want_parallel"], 1))
                                and (cfg.get("max_context_len") or 0) < (st["repro_at"].get("num_ctx") or 0))
    st["slots_overflow"] = (st["repro_failed"] and st["repro_parallel"] > max(st["want_parallel"], 1)
                            and st["has_config"] and (cfg.get("max_concurrency") or 1) < st["repro_parallel"])
    # the complaint is about long input (or says nothing of when), and a request
    # without num_ctx gets less than the wanted context on this server
    default_ctx = st.get("srv_default_ctx") or 0
    st["want_beyond_trained"] = st["trained_ctx"] > 0 and st["want_ctx"] > st["trained_ctx"]
    st["default_cuts_long_input"] = (st["phase"] in ("long_input", "unknown") and default_ctx > 0
                                     and st["want_ctx"] > default_ctx)
    st["step_limit_reached"] = st["n"] >= st["max_steps"]
    st["alt_route"] = _alternative_route(st)
    _drop_none(st)


def contradicting_level(st: dict) -> dict | None:
    """A level judged incoherent while a level with fewer bits was usable: a
    contradiction (fewer bits do not keep what more bits lost), so one answer
    decided it; it is re-checked once on a second task. None: no such level."""
    usable = [o.get("bits") or 0 for o in st["quant_options"]]
    if not usable:
        return None
    return next((r for r in st["quant_rejected"] if r["why"] == "incoherent" and (r.get("bits") or 0) > min(usable)
                 and r["tag"] not in st["quant_rechecked"]), None)


def _alternative_route(st: dict) -> str:
    """Which other answer to a KV cache overflow is left to measure beside the
    verified config: ``quant`` (a lower-bit tag at the wanted context, when the
    context was shortened), ``context`` (the first tag at its largest fitting
    context, when a lower-bit tag kept the wanted one), or ``none``."""
    cfg = st["config"]
    if (st["alt_phase"] != "none" or st["cause"] != "kv_cache" or not st["want_ctx"]
            or not st["has_config"] or not st["config_verified"]):
        return "none"
    if (cfg.get("max_context_len") or 0) < st["want_ctx"]:
        return "none" if st["quant_refused"] else "quant"
    fit = st["kv_fit"]
    # a tag whose shorter context already failed its retest has no other answer to give
    if fit.get("ctx") and fit.get("model") != cfg.get("model") and fit["model"] not in st["context_failed_tags"]:
        return "context"
    return "none"


def _limit(st: dict) -> int:
    limit = st["device_limit"] if st["has_device"] else 0
    if st["budget"]:
        limit = min(limit, st["budget"]) if limit else st["budget"]
    return int(limit)


def _drop_none(obj: Any) -> Any:
    if isinstance(obj, dict):
        for key in [k for k, v in obj.items() if v is None]:
            del obj[key]
        for v in obj.values():
            _drop_none(v)
    elif isinstance(obj, list):
        obj[:] = [v for v in obj if v is not None]
        for v in obj:
            _drop_none(v)
    return obj


def to_event(fact: dict, sid: str) -> dict:
    """The engine's copy of a validated fact: no ``None`` values (absent means
    unknown), the session id, and for a stability fact the knob key of the
    config it ran, so a rule can compare it with the candidate as one string."""
    event = _drop_none(json.loads(json.dumps(fact)))
    event["sid"] = sid
    if fact.get("kind") == "stability":
        event["_config_key"] = config_key(fact.get("config") or {})
    return event
