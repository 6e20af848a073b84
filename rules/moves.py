"""How an interpreting rule moves the session on: a diagnosis, the reference a
change is measured against, the config adopted, a candidate kept or dropped,
and the ladder of backend changes.

Interpreting rules (rules/interpreting.py) decide *which* of these applies; the
functions carry it out on the state and never decide a branch themselves.
"""
from __future__ import annotations

from common.catalog import pair
from rules import thresholds
from rules.configs import baseline_config, best_tier_config, config_key, utilization
from rules.sizes import format_size


def to_plan(st: dict) -> None:
    """A probe's readings are interpreted; decide the next step from them."""
    st["stage"] = "plan"
    st["awaiting"] = "none"
    st["again"] = True


def diagnose(st: dict, cause: str, advice: str = "") -> None:
    """``cause`` is now the open problem; the first cause found stays the
    session's diagnosis, later ones are kept beside it."""
    st["problem"] = cause
    name_cause(st, cause, advice)


def name_cause(st: dict, cause: str, advice: str = "") -> None:
    """``cause`` is what the failure shown was, and the config in hand already
    removes it: the diagnosis, with no problem left open."""
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


def keep_kv_fit(st: dict) -> None:
    """The KV cache overflowed the wanted context: keep the first tag's largest
    fitting context, the other answer to show if a lower-bit tag keeps the
    wanted context instead."""
    if not st["kv_fit"] and st["tier_best_ctx"]:
        st["kv_fit"] = {"model": st["tag"], "level": st["config"].get("quant_type") or "",
                        "ctx": st["tier_best_ctx"], "peak": st["tier_best_peak"]}


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
        elif not _step_down_context(st):
            st["context_failed_tags"].append(st["tag"])
    elif remedy == "backend" and refused:
        st["backend_refused"] = True
    _clear_candidate(st)


def _step_down_context(st: dict) -> bool:
    """A shortened context whose retest went over the limit (the search
    measured it under, and two loads of one context differ a little) steps
    down to the next context the search measured to fit, which is proposed
    and retested in turn; False when no smaller fit is left."""
    tried = st["candidate"].get("max_context_len") or 0
    limit = st.get("fit_limit") or 0
    if not (limit and st["retest_peak"] > limit):
        return False
    smaller = [t for t in st["tiers"] if t["verdict"] == "fits" and t["num_ctx"] < tried and t.get("peak")]
    if not smaller:
        return False
    best = max(smaller, key=lambda t: t["num_ctx"])
    st["tier_best_ctx"], st["tier_best_peak"] = best["num_ctx"], best["peak"]
    en, zh = pair("finding.retest_failed_reverts_change.step_down", tried=tried, peak=format_size(st["retest_peak"]),
                  limit=format_size(limit), next=best["num_ctx"])
    record_finding(st, "retest_failed_reverts_change", en, zh)
    return True


def _clear_candidate(st: dict) -> None:
    st["candidate"] = {}
    st["candidate_key"] = ""
    st["change"] = {}
    st["has_backend_fit"] = False
    st["backend_fit"] = {}


def start_concurrency_ladder(st: dict, slots: int = 0) -> None:
    """The wished concurrency overflows (or, with ``slots``, the server's own
    slots did when the user's setup was reproduced): that measured config is
    the point each backend change is made against, one knob at a time. The
    server's slots come down to the wished concurrency first (that costs the
    user nothing they asked for), then the KV cache type, the batch, and
    fewer concurrent requests."""
    reference = dict(st["config"])
    reference["max_concurrency"] = slots or st["want_parallel"]
    peak = st["repro_at"].get("peak") if slots else st["knob_reading"].get("peak")
    reference["gpu_memory_utilization"] = utilization(st, peak)
    st["reference"] = reference
    st["against_reference"] = True
    ladder = []
    if slots and 1 <= st["want_parallel"] < slots:
        ladder.append(["max_concurrency", st["want_parallel"]])
    ladder += [["kv_cache", kv] for kv in thresholds.KV_CACHE_LADDER if kv != reference.get("kv_cache")]
    ladder += [["max_batch_size", b] for b in thresholds.BATCH_LADDER if b < reference["max_batch_size"]]
    parallel = min(st["want_parallel"] or slots, slots or st["want_parallel"]) // 2
    while parallel >= 2:
        ladder.append(["max_concurrency", parallel])
        parallel //= 2
    st["ladder"] = ladder


def next_rung(st: dict) -> list:
    """The next backend change to try; fewer concurrent requests only when the
    user did not say the concurrency must stay."""
    while st["ladder"]:
        rung = st["ladder"].pop(0)
        if not _drops_wish(st, rung):
            return rung
    raise AssertionError("next_rung() called with no usable rung left")


def _drops_wish(st: dict, rung: list) -> bool:
    """Fewer slots than the user wants, when they said the concurrency must stay."""
    return rung[0] == "max_concurrency" and st["keep_concurrency"] == "yes" and rung[1] < st["want_parallel"]


def usable_rungs(st: dict) -> list:
    return [r for r in st["ladder"] if not _drops_wish(st, r)]


def keep_backend_fit(st: dict) -> None:
    st["backend_fit"] = dict(st["knob_reading"])
    st["has_backend_fit"] = True


# --- the other answer, measured beside the chosen one ------------------------------------

def alternative_of(st: dict, route: str) -> dict | None:
    """The alternative config ``route`` names, one knob away from the chosen
    config (the tag and its level count as one, the context as the other):
    ``quant`` the first usable lower-bit tag at the wanted context, ``context``
    the first tag at its largest fitting context. None: no such config."""
    cfg = dict(st["config"])
    if route == "quant":
        option = next((o for o in st["quant_options"] if o["tag"] not in st["quant_tried"]), None)
        if option is None:
            return None
        cfg.update(model=option["tag"], quant_type=option["level"], max_context_len=st["want_ctx"],
                   gpu_memory_utilization=utilization(st, option["peak"]))
    else:
        fit = st["kv_fit"]
        cfg.update(model=fit["model"], quant_type=fit["level"] or None, max_context_len=fit["ctx"],
                   gpu_memory_utilization=utilization(st, fit["peak"]))
    return cfg


def start_alternative(st: dict, route: str, cfg: dict) -> None:
    """Retest ``cfg`` beside the chosen config; the chosen one's retest record
    is kept aside so the alternative's never counts for it."""
    st["alt_phase"] = "retest"
    st["alt_kind"] = route
    st["alt_config"] = cfg
    st["alt_saved"] = {k: st[k] for k in ("retest", "retest_measured", "retest_why", "last_retest",
                                           "retest_failed_why", "retest_failed_why_zh", "retest_peak")}
    st["last_retest"] = {}  # another config, not a change: nothing to regress against


def end_alternative(st: dict, route: str, cfg: dict | None, why: str = "", why_zh: str = "") -> None:
    """Record the alternative (retested, or why there is none, in both
    languages) and put the chosen config's retest record back."""
    entry = {"kind": route, "config": cfg, "verified": False, "peak": None, "why": why, "why_zh": why_zh}
    if cfg is not None and st["alt_phase"] == "retest":
        entry["verified"] = st["retest"] == "pass" and st["retest_measured"]
        entry["peak"] = st["retest_peak"] or None
        if not entry["verified"]:
            entry["why"] = st["retest_failed_why"] or st["unmeasured_why"] or "its stability retest did not pass"
            entry["why_zh"] = st["retest_failed_why_zh"] or entry["why_zh"] or entry["why"]
        st.update(st["alt_saved"])
    st["alternatives"].append(entry)
    st["alt_phase"] = "done"
    st["alt_config"] = {}
    st["alt_saved"] = {}


def say_recheck(st: dict) -> None:
    """A contradicting level was re-checked on a second task: say what came of
    it, as a finding the user sees (passed: one answer had decided it; failed
    again: it stays out, and the contradiction is said, not hidden)."""
    was = st["quant_recheck_was"]
    passed = any(o["tag"] == was["tag"] for o in st["quant_options"])
    part = "passed" if passed else "failed_again"
    en, zh = pair(f"finding.recheck_contradicting_level.{part}", level=was["level"], lower=was["lower"])
    record_finding(st, "recheck_contradicting_level", en, zh)
    st["quant_recheck"] = ""


def record_finding(st: dict, key: str, en: str, zh: str) -> None:
    """Record a finding once, and let the tree decide this round as if nothing happened."""
    st["findings"] = list(st.get("findings") or []) + [{"key": key, "en": en, "zh": zh}]
    st["found_" + key] = True
    st["again"] = True
