"""What the rules' actions do to a session, as plain functions on its state.

The knowledge base (:mod:`rules.kb`) decides *which* rule fires; the functions
here carry out what a fired rule means: record a reading, move the session to
its next stage, build the next step and the config it proposes. They take the
session state as a plain dict and never decide a branch themselves, so each is
small enough to read against the method. Values written into the state must
never be ``None`` (durable_rules cannot compare nulls); "unknown" is spelled
``""``, ``0`` or ``"none"``, and rich values that may hold ``None`` (steps, the
why chain) are stored as JSON text the rules never look into.
"""
from __future__ import annotations

import json
from typing import Any

from rules import thresholds as T

#: the knobs of a config, in the method's vocabulary
KNOB_KEYS = ("model", "max_context_len", "max_batch_size", "max_concurrency", "quant_type", "kv_cache")
CONFIG_KEYS = KNOB_KEYS + ("gpu_memory_utilization",)
#: how the method counts knobs: a tag and its quantization level move together,
#: and the utilization is a reading, not a knob
KNOB_OF_KEY = {
    "model": "quant_type",
    "quant_type": "quant_type",
    "max_context_len": "max_context_len",
    "max_batch_size": "max_batch_size",
    "max_concurrency": "max_concurrency",
    "kv_cache": "kv_cache",
}
#: config key -> the Ollama-side knob a backend probe changes
PROBE_KNOB = {"max_batch_size": "num_batch", "max_concurrency": "num_parallel", "kv_cache": "kv_cache_type"}
CONFIG_KEY_OF_PROBE_KNOB = {v: k for k, v in PROBE_KNOB.items()}

QUESTIONS = ("symptom", "model", "want_ctx", "want_parallel", "budget", "keep_context", "keep_concurrency")
PROBE_STAGE = {"baseline": "baseline", "context": "context", "quant": "quant", "backend": "backend"}

_REMEDY_OF = {"max_context_len": "context", "quant_type": "quant", "model": "quant",
              "max_batch_size": "backend", "max_concurrency": "backend", "kv_cache": "backend"}
# answers arrive parsed (assistant/answers.py reads the words, in both
# languages); only the canonical spellings of a parsed yes/no are accepted here
_YES = {"yes", "true"}
_NO = {"no", "false"}


# --- the state ----------------------------------------------------------------

def initial_state(sid: str, max_steps: int = T.MAX_STEPS) -> dict:
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
        "has_device": False,
        "vendor": "",
        "gpu": False,
        "total": 0,
        "device_limit": 0,
        "limit": 0,
        "fit_limit": 0,
        # readings of the probe now running (reset when it is requested)
        "probe_error": "",
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
        "knob_phase": "none",
        "knob": "none",
        "knob_reading": {},
        "knob_try": [],
        "retest": "none",
        "retest_measured": False,   # the latest retest's peak was measured by a source that saw the model
        "retest_why": [],           # why the latest retest regressed against the one before
        "last_retest": {},          # the previous retest, what the next one is compared with
        "unmeasured_why": "",       # the latest reason a reading was not a measurement
        "stop_reason": "",          # why the session must end now (a `stop` fact)
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
        # the record
        "trail": [],
        "why": [],
        "next_json": "",
    }
    for q in QUESTIONS:
        st["q_" + q] = "missing"
    settle(st)
    return st


def settle(st: dict) -> None:
    """Recompute the derived flags the rules match on and drop ``None``s; run
    after every action so a condition never reads a stale or null value."""
    cfg = st["config"]
    st["tag"] = _base(st).get("model") or st["model"]
    st["limit"] = _limit(st)
    st["fit_limit"] = T.fit_limit(st["limit"]) if st["limit"] else 0
    st["has_limit"] = st["limit"] > 0
    st["short_of_want"] = bool(st["tier_mem_fail"]) and (
        st["want_ctx"] == 0 or st["tier_best_ctx"] < st["want_ctx"])
    st["context_blocked"] = (st["context_refused"] or st["keep_context"] == "yes"
                             or st["tag"] in st["context_failed_tags"])
    st["quant_probed"] = bool(st["quant_probed_tag"]) and st["quant_probed_tag"] == st["tag"]
    st["quant_left"] = any(o["tag"] not in st["quant_tried"] for o in st["quant_options"])
    st["wants_concurrency"] = (st["want_parallel"] > 1 and st["has_config"]
                               and cfg.get("max_concurrency", 1) < st["want_parallel"])
    st["concurrency_short"] = (st["want_parallel"] > 1 and st["has_config"]
                               and 0 < (cfg.get("max_concurrency") or 1) < st["want_parallel"])
    st["ladder_left"] = len(_usable_rungs(st)) > 0
    # the complaint is about long input (or says nothing of when), and a request
    # without num_ctx gets less than the wanted context on this server
    default_ctx = st.get("srv_default_ctx") or 0
    st["want_beyond_trained"] = st["trained_ctx"] > 0 and st["want_ctx"] > st["trained_ctx"]
    st["default_cuts_long_input"] = (st["phase"] in ("long_input", "unknown") and default_ctx > 0
                                     and st["want_ctx"] > default_ctx)
    st["step_limit_reached"] = st["n"] >= st["max_steps"]
    _drop_none(st)


def _base(st: dict) -> dict:
    """The config the next change is measured against: the current config, or
    the measured setup that failed while a problem is open against it (the
    baseline that did not fit, the wanted context, the wanted concurrency)."""
    return st["reference"] if st["against_reference"] or not st["has_config"] else st["config"]


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


# --- configs -----------------------------------------------------------------

def full_config(cfg: dict | None) -> dict | None:
    if not cfg:
        return None
    return {k: cfg.get(k) for k in CONFIG_KEYS}


def config_key(cfg: dict) -> str:
    return "|".join(str(cfg.get(k)) for k in KNOB_KEYS)


def knobs_changed(old: dict, new: dict) -> set[str]:
    return {KNOB_OF_KEY[k] for k in KNOB_KEYS if old.get(k) != new.get(k)}


def current_ctx(st: dict) -> int:
    return int(_base(st).get("max_context_len") or T.CONSERVATIVE_NUM_CTX)


def baseline_ctx(st: dict) -> int:
    want = st["want_ctx"]
    return min(T.CONSERVATIVE_NUM_CTX, want) if want else T.CONSERVATIVE_NUM_CTX


def _util(st: dict, peak: int | None) -> float | None:
    return T.utilization(peak, st["total"] or None)


def baseline_config(st: dict) -> dict:
    """The config the baseline load ran at, with the readings it produced."""
    r = st["load_reading"]
    return {
        "model": r.get("model") or st["model"],
        "max_context_len": r.get("num_ctx") or baseline_ctx(st),
        "max_batch_size": r.get("num_batch") or T.CONSERVATIVE_NUM_BATCH,
        "max_concurrency": r.get("num_parallel") or T.CONSERVATIVE_NUM_PARALLEL,
        "quant_type": r.get("level"),
        "kv_cache": T.DEFAULT_KV_CACHE,
        "gpu_memory_utilization": _util(st, r.get("peak")),
    }


# --- recording readings ------------------------------------------------------

def resolve_question(st: dict, question: str, known: bool) -> None:
    st["q_" + question] = "known" if known else "skipped"
    if st["pending_q"] == question:
        st["pending_q"] = "none"
        st["waiting_answer"] = False


def note_symptom(st: dict, f: dict) -> None:
    st["phase"] = f["phase"]
    st["symptom_text"] = f.get("text", "")
    resolve_question(st, "symptom", True)


def note_target(st: dict, f: dict) -> None:
    for key in ("model", "want_ctx", "want_parallel", "budget"):
        if f.get(key) is not None:
            st[key] = f[key]
            resolve_question(st, key, True)
    for key in ("keep_context", "keep_concurrency"):
        if f.get(key) is not None:
            st[key] = "yes" if f[key] else "no"
            resolve_question(st, key, True)


def note_device(st: dict, f: dict) -> None:
    st["has_device"] = True
    st["vendor"] = f["vendor"]
    # "unknown": a server on another machine, whose device only its own /api/ps describes
    st["gpu"] = f["vendor"] not in ("cpu", "unknown")
    st["total"] = f["total"]
    st["device_limit"] = f.get("limit") or f["total"]
    if st["pending_q"] == "budget":
        # the device now gives the limit the budget question was asked for
        resolve_question(st, "budget", True)


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return 0


def _as_yes_no(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value).strip().lower()
    if text in _YES:
        return "yes"
    if text in _NO:
        return "no"
    return "unknown"


def note_answer(st: dict, f: dict) -> None:
    """Apply a user's answer. A value that cannot be read counts as "don't
    know": the question is not asked again. An answer to a question the rules
    never ask is kept in the facts and changes nothing."""
    q, value = f["question"], f.get("value")
    if q == "symptom":
        text = str(value)
        st["phase"] = text if text in ("load", "long_input", "concurrent", "slow", "creeping", "crash") else "unknown"
        st["symptom_text"] = text
        resolve_question(st, q, True)
    elif q == "model":
        st["model"] = str(value).strip()
        resolve_question(st, q, bool(st["model"]))
    elif q in ("want_ctx", "want_parallel", "budget"):
        number = _as_int(value)
        if number > 0:
            st[q] = number
        resolve_question(st, q, number > 0)
    elif q == "keep_context":
        st["keep_context"] = _as_yes_no(value)
        resolve_question(st, q, st["keep_context"] != "unknown")
        if st["keep_context"] == "yes" and _change_pending(st, "context"):
            _refuse_pending(st)
    elif q == "keep_concurrency":
        st["keep_concurrency"] = _as_yes_no(value)
        resolve_question(st, q, st["keep_concurrency"] != "unknown")
    elif q == "refuse":
        # the same as a `refusal` fact; the value names the remedy (or the knob)
        remedy = _REMEDY_OF.get(str(value), str(value))
        if remedy in ("context", "quant", "backend"):
            note_refusal(st, {"remedy": remedy})


def note_skipped_answer(st: dict, f: dict) -> None:
    q = f["question"]
    if q in QUESTIONS:
        resolve_question(st, q, False)


def note_refusal(st: dict, f: dict) -> None:
    remedy = f["remedy"]
    st[{"context": "context_refused", "quant": "quant_refused", "backend": "backend_refused"}[remedy]] = True
    if remedy == "context":
        st["keep_context"] = "yes"
        if st["pending_q"] == "keep_context":
            resolve_question(st, "keep_context", True)
    if _change_pending(st, remedy):
        _refuse_pending(st)


def _change_pending(st: dict, remedy: str) -> bool:
    return st["stage"] == "retest" and st["change"].get("remedy") == remedy and not st["finished"]


def _refuse_pending(st: dict) -> None:
    st["retest"] = "refused"
    st["finished"] = True


def finish_probe(st: dict, f: dict) -> None:
    st["finished"] = True
    if not f.get("ok", True):
        st["probe_error"] = f.get("error") or "the probe reported a failure"


def read_load(st: dict, f: dict, verdict: str) -> None:
    """verdict: no_fit / creeping / fits. A failure is sticky: one bad load
    among several means the weights do not fit."""
    if st["load"] != "no_fit":
        st["load"] = verdict
    options = f.get("options") or {}
    peak = max(f.get("used_after") or 0, f.get("used_settled") or 0) or None
    st["load_reading"] = {
        "model": f["model"],
        "num_ctx": options.get("num_ctx"),
        "num_batch": options.get("num_batch"),
        "num_parallel": options.get("num_parallel"),
        "level": f.get("level"),
        "peak": peak,
    }


def read_tier(st: dict, f: dict, verdict: str) -> None:
    """verdict: fits / oom / over / crash / truncated / unmeasured."""
    st["tiers_seen"] += 1
    if f.get("trained_ctx"):
        st["trained_ctx"] = int(f["trained_ctx"])
    st["tiers"].append({"name": f["name"], "num_ctx": f["num_ctx"], "verdict": verdict, "peak": f.get("peak")})
    if verdict == "fits":
        st["tier_fit_count"] += 1
        if f["num_ctx"] > st["tier_best_ctx"]:
            st["tier_best_ctx"] = f["num_ctx"]
            st["tier_best_peak"] = f["peak"]
        if released(f) is False:
            st["tier_not_back"] = True
    elif verdict in ("oom", "over"):
        if not st["tier_mem_fail"]:
            st["tier_fail_ctx"] = f["num_ctx"]
            # "short fails": nothing fit before the first memory failure
            st["first_tier_failed"] = st["tier_fit_count"] == 0
        st["tier_mem_fail"] = True
    elif verdict == "crash":
        st["tier_crash"] = True
        st["tier_crash_error"] = f.get("error") or ""
    elif verdict == "truncated":
        st["tier_truncated"] = True


def released(f: dict) -> bool | None:
    """Did usage fall back between two requests of the same size? From the
    raw readings when the probe gives them; None when it was not measured."""
    first, second = f.get("after_first_bytes"), f.get("after_second_bytes")
    if first is not None and second is not None:
        return T.back_to_baseline(first, second, max(first, f.get("peak") or first))
    return f.get("back_to_baseline")


def read_quant(st: dict, f: dict, verdict: str) -> None:
    """verdict: usable, or why the level is rejected."""
    if verdict == "usable" and f["tag"] != st["tag"] and f["tag"] not in st["quant_tried"]:
        st["quant_options"].append({"tag": f["tag"], "level": f["level"], "peak": f["peak"]})
    else:
        st["quant_rejected"].append({"tag": f["tag"], "level": f["level"], "why": verdict})


def read_knob(st: dict, f: dict, verdict: str) -> None:
    st["knob"] = verdict
    st["knob_reading"] = {"knob": f["knob"], "new": f.get("new"), "peak": f.get("peak")}


def read_retest(st: dict, f: dict, verdict: str) -> None:
    """verdict: pass / fail / mismatch / unmeasured; a failure is not undone by
    a later pass. A pass that regressed against the previous retest is a
    failure; a pass whose peak was not measured can never verify a config."""
    if verdict == "mismatch":
        if st["retest"] in ("none", "pass"):
            st["retest"] = verdict
        return
    why = retest_regressions(f, st["last_retest"]) if verdict == "pass" else []
    if why:
        verdict = "fail"
    st["retest_why"] = why
    st["retest_measured"] = f.get("measured") is not False and f.get("peak") is not None
    st["last_retest"] = {k: f.get(k) for k in ("ok", "eval_count", "truncated", "repeat_share", "errors")}
    if st["retest"] in ("none", "pass"):
        st["retest"] = verdict


def retest_regressions(current: dict, previous: dict) -> list[str]:
    """Why ``current`` (a stability fact) is worse than ``previous``; empty: not worse."""
    if not previous:
        return []
    why = []
    if previous.get("ok") and not current.get("ok"):
        why.append("the run failed where the previous one passed")
    prev_n, cur_n = previous.get("eval_count") or 0, current.get("eval_count") or 0
    if prev_n and cur_n < prev_n * T.REGRESSION_SHORTER_FRACTION:
        why.append(f"shorter output: {cur_n} tokens, previous run {prev_n}")
    if current.get("truncated") and not previous.get("truncated"):
        why.append("the prompt was truncated at num_ctx")
    if (current.get("repeat_share") or 0) > (previous.get("repeat_share") or 0) + T.REGRESSION_REPEAT_RISE:
        why.append(f"the output repeats itself more: {current['repeat_share']:.0%} of its 4-grams, "
                   f"previous run {previous.get('repeat_share') or 0:.0%}")
    new_errors = set(current.get("errors") or []) - set(previous.get("errors") or [])
    if new_errors:
        why.append("new errors: " + "; ".join(sorted(new_errors))[:200])
    return why


def note_unmeasured(st: dict, f: dict) -> None:
    """Any reading whose figures are not measurements leaves its reason: the
    final step says why a config could not be verified."""
    if f.get("measured") is False and f.get("unmeasured"):
        st["unmeasured_why"] = f["unmeasured"]


# --- moving the session ------------------------------------------------------

def to_plan(st: dict) -> None:
    """A probe's readings are interpreted; decide the next step from them."""
    st["stage"] = "plan"
    st["awaiting"] = "none"
    st["again"] = True


def diagnose(st: dict, cause: str, advice: str = "") -> None:
    """``cause`` is now the open problem; the first cause found stays the
    session's diagnosis, later ones are kept beside it."""
    st["problem"] = cause
    if st["cause"] == "none":
        st["cause"] = cause
    if cause not in st["causes"]:
        st["causes"].append(cause)
    if advice:
        st["advice"] = advice


def establish_baseline(st: dict) -> None:
    st["config"] = baseline_config(st)
    st["has_config"] = True
    st["config_verified"] = False


def refer_to_baseline(st: dict) -> None:
    """The baseline did not fit: it is not a config to recommend, only the
    point the first change (a lower-bit tag) is measured against."""
    st["reference"] = baseline_config(st)
    st["has_config"] = False


def refer_to_wanted_context(st: dict) -> None:
    """The wanted context (or, with no wish, the first that failed) does not
    fit: that measured setup is what the context or quantization change is
    made against, so the change moves one knob from what the user runs."""
    reference = dict(st["config"])
    reference["max_context_len"] = st["want_ctx"] or st["tier_fail_ctx"]
    reference["gpu_memory_utilization"] = None
    st["reference"] = reference
    st["against_reference"] = True


def adopt_largest_fit(st: dict) -> None:
    """The tiers fit: the config is the largest context measured within the
    limit on the current tag (a reading, not a change; it is retested before
    it is reported)."""
    best = best_tier_config(st)
    if best and config_key(best) != config_key(st["config"]):
        st["config"] = best
        st["config_verified"] = False


def accept_candidate(st: dict) -> None:
    remedy = st["change"].get("remedy")
    st["config"] = dict(st["candidate"])
    st["has_config"] = True
    st["config_verified"] = st["retest_measured"]
    st["confirm_failed"] = not st["retest_measured"]  # an unmeasured pass is not retested again
    st["against_reference"] = False
    st["reference"] = {}
    if remedy == "quant":
        st["quant_tried"].append(st["candidate"]["model"])
        st["recheck_context"] = True
        if st["problem"] in ("weights", "kv_cache"):
            st["problem"] = "none"
    elif remedy == "context" and st["problem"] == "kv_cache":
        st["problem"] = "none"
    elif remedy == "backend" and st["problem"] == "concurrency":
        st["problem"] = "none"
    _clear_candidate(st)


def drop_candidate(st: dict, refused: bool) -> None:
    """Revert: the config stays what it was; the remedy that failed (or was
    refused) is marked so the next remedy is tried instead."""
    remedy = st["change"].get("remedy")
    if remedy == "quant":
        st["quant_tried"].append(st["candidate"].get("model", ""))
        if refused:
            st["quant_refused"] = True
    elif remedy == "context":
        if refused:
            st["context_refused"] = True
            st["keep_context"] = "yes"
        else:
            st["context_failed_tags"].append(st["tag"])
    elif remedy == "backend" and refused:
        st["backend_refused"] = True
    _clear_candidate(st)


def _clear_candidate(st: dict) -> None:
    st["candidate"] = {}
    st["candidate_key"] = ""
    st["change"] = {}
    st["has_backend_fit"] = False
    st["backend_fit"] = {}


def start_concurrency_ladder(st: dict) -> None:
    """The wished concurrency overflows: that measured config is the point each
    backend change is made against, one knob at a time (batch, then
    concurrency, then KV cache)."""
    reference = dict(st["config"])
    reference["max_concurrency"] = st["want_parallel"]
    reference["gpu_memory_utilization"] = _util(st, st["knob_reading"].get("peak"))
    st["reference"] = reference
    st["against_reference"] = True
    ladder = [["kv_cache", kv] for kv in T.KV_CACHE_LADDER if kv != reference.get("kv_cache")]
    ladder += [["max_batch_size", b] for b in T.BATCH_LADDER if b < reference["max_batch_size"]]
    parallel = st["want_parallel"] // 2
    while parallel >= 2:
        ladder.append(["max_concurrency", parallel])
        parallel //= 2
    st["ladder"] = ladder


def next_rung(st: dict) -> list:
    """The next backend change to try; fewer concurrent requests only when the
    user did not say the concurrency must stay."""
    while st["ladder"]:
        rung = st["ladder"].pop(0)
        if not (rung[0] == "max_concurrency" and st["keep_concurrency"] == "yes"):
            return rung
    raise AssertionError("next_rung() called with no usable rung left")


def _usable_rungs(st: dict) -> list:
    return [r for r in st["ladder"] if not (r[0] == "max_concurrency" and st["keep_concurrency"] == "yes")]


def keep_backend_fit(st: dict) -> None:
    st["backend_fit"] = dict(st["knob_reading"])
    st["has_backend_fit"] = True


# --- building steps ----------------------------------------------------------

def ask(st: dict, question: str) -> dict:
    return {"action": "ask", "question": question}


def probe(st: dict, name: str, **extra: Any) -> dict:
    if name == "baseline":
        args = {"model": st["model"], "num_ctx": baseline_ctx(st),
                "num_batch": T.CONSERVATIVE_NUM_BATCH, "num_parallel": T.CONSERVATIVE_NUM_PARALLEL}
    elif name == "context":
        args = {"model": st["tag"], "want_ctx": st["want_ctx"] or None, "num_parallel": 1}
    elif name == "quant":
        args = {"model": st["tag"], "num_ctx": current_ctx(st)}
    elif name == "backend":
        base = extra["base"]
        args = {"model": base["model"], "num_ctx": base["max_context_len"],
                "knob": PROBE_KNOB[extra["key"]], "value": extra["value"],
                "num_batch": base["max_batch_size"], "num_parallel": base["max_concurrency"],
                "kv_cache_type": base["kv_cache"]}
        st["knob_phase"] = extra["phase"]
        st["knob_try"] = [extra["key"], extra["value"]]
    elif name == "stability":
        args = {"config": full_config(st["config"])}
    else:  # pragma: no cover - the rules name only the five probes
        raise ValueError(f"no probe {name!r}")
    return {"action": "probe", "probe": name, "args": args}


def change(st: dict, key: str, to: Any, peak: int | None, remedy: str, tag: str | None = None) -> dict:
    """Propose one knob's change against the config it is measured from, and
    refuse (raise) if that would move more than one knob: the invariant holds
    in the rules, whatever the caller does."""
    base = _base(st)
    candidate = dict(base)
    candidate[key] = to
    if key == "quant_type":
        candidate["model"] = tag
    candidate["gpu_memory_utilization"] = _util(st, peak)
    moved = knobs_changed(base, candidate)
    if len(moved) != 1:
        raise AssertionError(f"a change must move exactly one knob, this one moves {sorted(moved) or 'none'}")
    st["candidate"] = candidate
    st["candidate_key"] = config_key(candidate)
    st["change"] = {"key": key, "remedy": remedy, "from": base.get(key), "to": to}
    return {"action": "change", "knob": key, "from": base.get(key), "to": to,
            "config": full_config(candidate), "remedy": remedy, "base": full_config(base)}


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
    unverified = None
    if not verified:
        unverified = (st["stop_reason"] and f"the session stopped: {st['stop_reason']}") \
            or (st["unmeasured_why"] and f"the memory readings were not measurements: {st['unmeasured_why']}") \
            or ("no stability retest passed on this config" if cfg else "no config was measured within the limit")
    return {"action": "done", "cause": None if st["cause"] == "none" else st["cause"],
            "config": full_config(cfg), "verified": bool(verified), "fits": bool(fits) and bool(cfg),
            "advice": advice or None, "unverified": unverified,
            "unmet": unmet_wishes(st, cfg)}


def unmet_wishes(st: dict, cfg: dict | None) -> list[str]:
    """What the user asked for that the config does not give."""
    if not cfg:
        return []
    unmet = []
    if st["want_ctx"] and (cfg.get("max_context_len") or 0) < st["want_ctx"]:
        unmet.append("max_context_len")
    if st["want_parallel"] > 1 and (cfg.get("max_concurrency") or 1) < st["want_parallel"]:
        unmet.append("max_concurrency")
    return unmet


def best_tier_config(st: dict) -> dict | None:
    """The largest context measured within the limit, as a config (a finding,
    not a recommendation: it was measured, never retested)."""
    if not st["tier_best_ctx"] or not st["has_config"]:
        return None
    cfg = dict(st["config"])
    cfg["max_context_len"] = st["tier_best_ctx"]
    cfg["gpu_memory_utilization"] = _util(st, st["tier_best_peak"])
    return cfg


def issue(st: dict, rule: str, step: dict, reason: str, reason_zh: str) -> None:
    """Make ``step`` the session's next step and record why."""
    st["n"] += 1
    if step["action"] == "ask":
        step["reason"] = reason
        step["reason_zh"] = reason_zh
    if step["action"] == "done" and step.get("advice"):
        step["advice_en"], step["advice_zh"] = ADVICE[step["advice"]]
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
    elif st["stage"] != "retest":
        st["stage"] = "confirm"
    st["awaiting"] = name
    st["finished"] = False
    st["probe_error"] = ""
    if name == "baseline":
        st.update(load="none", load_reading={})
    elif name == "context":
        st.update(tiers=[], tier_best_ctx=0, tier_best_peak=0, tier_fit_count=0, tiers_seen=0,
                  tier_mem_fail=False, tier_fail_ctx=0, first_tier_failed=False, tier_crash=False,
                  tier_crash_error="", tier_truncated=False, tier_not_back=False, recheck_context=False)
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


# --- words -------------------------------------------------------------------

#: what to do instead, when the answer is not (only) a config: key -> (en, zh)
ADVICE = {
    "need_model": ("Name the model to diagnose (e.g. --model neohorse:8b).",
                   "请指定要诊断的模型（例如 --model neohorse:8b）。"),
    "need_limit": ("No memory limit is known: run where a GPU can be read, or give --budget SIZE.",
                   "不知道内存上限：请在能读取 GPU 的机器上运行，或用 --budget SIZE 指定预算。"),
    "another_device": ("No lower-bit quantization of this model loads within the limit and stays coherent: "
                       "use a device with more memory, or a smaller model.",
                       "该模型没有任何更低位的量化版本能在上限内加载且输出连贯：请换用内存更大的设备，或更小的模型。"),
    "context_unmet": ("The wanted context does not fit within the limit even at the lowest usable quantization "
                      "(the KV cache does not shrink with weight quantization): accept a shorter context or use "
                      "a device with more memory.",
                      "即使用最低可用的量化，所需上下文也超出上限（权重量化不会缩小 KV 缓存）："
                      "请接受更短的上下文，或换用内存更大的设备。"),
    "concurrency_unmet": ("The wanted concurrency does not fit within the limit with any single backend change: "
                          "serve fewer requests at once or use a device with more memory.",
                          "任何单项后端调整都无法让所需并发在上限内运行：请减少同时处理的请求数，或换用内存更大的设备。"),
    "concurrency_reduced": ("Fewer concurrent requests than you wanted fit within the limit: the config serves "
                            "the measured number (max_concurrency); the KV cache type and batch were tried first. "
                            "Serve the rest from a queue, or use a device with more memory.",
                            "在上限内放不下你想要的并发数：配置采用实测可行的并发数（max_concurrency）；"
                            "已先尝试 KV 缓存类型和批大小。其余请求请排队，或换用内存更大的设备。"),
    "concurrency_unmeasured": ("The server-wide concurrency setting could not be changed by the probe: restart Ollama "
                               "with OLLAMA_NUM_PARALLEL set and run the check again.",
                               "探针无法修改服务器级的并发设置：请设置 OLLAMA_NUM_PARALLEL 后重启 Ollama，再检查一次。"),
    "crash": ("A request failed with an error that is not out-of-memory: read the Ollama server log, and update "
              "Ollama or re-pull the model; more memory will not fix it.",
              "请求因非内存不足的错误而失败：请查看 Ollama 服务器日志，升级 Ollama 或重新拉取模型；加内存解决不了。"),
    "trained_clamp": ("The context you want is longer than the model was trained for: Ollama clamps num_ctx to the "
                      "trained length without an error and cuts longer input there. No memory setting changes that: "
                      "use a model trained for longer context, or split the input.",
                      "你想要的上下文比模型的训练长度还长：Ollama 会把 num_ctx 静默截到训练长度，更长的输入在那里被截断。"
                      "任何内存设置都改变不了：请换用训练上下文更长的模型，或把输入分段。"),
    "default_truncates": ("The memory is enough for the context you want, but a request that does not set num_ctx "
                          "gets the server's shorter default context and longer input is cut there without an "
                          "error: set the measured context explicitly (the Modelfile's PARAMETER num_ctx, or "
                          "OLLAMA_CONTEXT_LENGTH for the whole server).",
                          "内存足够你想要的上下文，但不设 num_ctx 的请求只会得到服务器较短的默认上下文，更长的输入会在那里被"
                          "静默截断：请显式设定实测的上下文（Modelfile 的 PARAMETER num_ctx，或整个服务器的 "
                          "OLLAMA_CONTEXT_LENGTH）。"),
    "truncation": ("The input was cut at num_ctx without an error (Ollama truncates silently): raise num_ctx to the "
                   "measured value or shorten the input; memory is not the problem.",
                   "输入在 num_ctx 处被静默截断（Ollama 不报错）：请把 num_ctx 提高到实测可用的值，或缩短输入；问题不在内存。"),
    "not_released": ("Memory keeps growing while the model is idle, so it is not released between requests: update "
                     "Ollama, lower keep_alive, or restart the server between batches of work.",
                     "模型空闲时内存仍在增长，说明请求之间没有释放内存：请升级 Ollama、调小 keep_alive，或在批次之间重启服务。"),
    "broken_off": ("The session stopped before the method was done; what was measured so far is reported "
                   "(see the reason). Fix it and run the diagnosis again.",
                   "会话在方法完成之前中止；报告迄今测得的结果（原因见说明）。解决后请重新诊断。"),
    "probe_failed": ("A probe produced no usable reading, so nothing could be measured within the limit.",
                     "探针没有得到可用的读数，因此无法在上限内测量出任何配置。"),
    "step_limit": ("The session stopped after too many steps without reaching a verified config.",
                   "步骤过多仍未得到经过验证的配置，会话已停止。"),
    "no_oom": ("No out-of-memory was reproduced up to the measured context; the config sets that context "
               "explicitly (a request without num_ctx gets the server's default, and longer input is cut there "
               "silently).",
               "在实测的上下文范围内没有复现内存不足；配置中显式设定了该上下文（不带 num_ctx 的请求会使用服务器默认值，"
               "更长的输入会在那里被静默截断）。"),
}
