"""What a reading rule records: the user's words and each measurement, written
into the session state.

Each function here is the effect of one kind of reading rule (rules/readings.py
says which fires): it stores what the fact says and the rule's verdict on it
(``fits`` / ``oom`` / ``over`` ...) where the interpreting rules will look. None
of them decides a branch. Answers arrive parsed (assistant/session/answers.py reads the
words, in both languages); only the canonical spellings of a parsed yes/no are
accepted here.
"""
from __future__ import annotations

from typing import Any

from common.catalog import pair
from rules import thresholds
from rules.configs import REMEDY_OF_KEY
from rules.state import QUESTIONS

_YES = {"yes", "true"}
_NO = {"no", "false"}


# --- the user's words --------------------------------------------------------

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
    if f.get("ctx_unset") is not None:
        st["ctx_unset"] = bool(f["ctx_unset"])
    if f.get("upgraded_from") is not None:
        st["upgraded"] = True
        st["upgraded_from"] = f["upgraded_from"]
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
        remedy = REMEDY_OF_KEY.get(str(value), str(value))
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
    st["probe_skipped"] = bool(f.get("skipped"))
    if not f.get("ok", True):
        st["probe_error"] = f.get("error") or "the probe reported a failure"


def note_stop(st: dict, f: dict) -> None:
    st["stop_reason"] = f["reason"]
    st["stopped_by_user"] = bool(f.get("by_user"))


def raise_selftest(st: dict, f: dict) -> None:
    """The only way to make an action raise on purpose: the test suite proves
    with it that an action's exception fails the post."""
    raise RuntimeError(f"self-test failure requested: {f.get('value')}")


# --- measurements ------------------------------------------------------------

def read_reproduction(st: dict, f: dict, verdict: str) -> None:
    """verdict: oom / spill / over / crash / cut / none / unmeasured: what the
    user's own setup did under the load their symptom names."""
    st["repro"] = verdict
    st["repro_at"] = {"num_ctx": f.get("num_ctx"), "num_parallel": f.get("num_parallel"),
                      "parallel_from": f.get("parallel_from"), "requests": f["requests"],
                      "peak": f.get("peak"), "error": f.get("error"), "placement": f.get("placement"),
                      "size": f.get("size"), "size_vram": f.get("size_vram")}
    st["repro_parallel"] = f.get("num_parallel") or 0


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
        return thresholds.back_to_baseline(first, second, max(first, f.get("peak") or first))
    return None


def read_quant(st: dict, f: dict, verdict: str) -> None:
    """verdict: usable, or why the level is rejected."""
    bits = f.get("bits") or 0
    if verdict == "usable" and f["tag"] != st["tag"] and f["tag"] not in st["quant_tried"]:
        st["quant_options"].append({"tag": f["tag"], "level": f["level"], "peak": f["peak"], "bits": bits})
        # the best quality first, whatever order the trials were read in (a re-checked level comes last)
        st["quant_options"].sort(key=lambda o: -(o.get("bits") or 0))
    else:
        st["quant_rejected"].append({"tag": f["tag"], "level": f["level"], "why": verdict, "bits": bits})


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
    pairs = regressions(f, st["last_retest"]) if verdict == "pass" else []
    why = [en for en, _ in pairs]
    if why:
        verdict = "fail"
    st["retest_why"] = why
    if verdict == "fail":  # said in both languages: the final step's "not verified" quotes it
        en, zh = ("; ".join(why), "；".join(z for _, z in pairs)) if pairs else retest_failure(st, f)
        st["retest_failed_why"], st["retest_failed_why_zh"] = en, zh
    elif verdict == "pass":
        st["retest_failed_why"] = st["retest_failed_why_zh"] = ""
    st["retest_measured"] = f["measured"] and f.get("peak") is not None
    st["retest_peak"] = f.get("peak") or 0
    st["last_retest"] = {k: f.get(k) for k in ("answered", "eval_count", "prompt_tokens", "task_tokens",
                                                "repeat_share", "errors")}
    if st["retest"] in ("none", "pass"):
        st["retest"] = verdict


def retest_failure(st: dict, f: dict) -> tuple[str, str]:
    """Why a stability fact failed the retest, in the order the readings test
    it, in English and Chinese (a server's error text is quoted as it is)."""
    if not f.get("answered"):
        errors = "; ".join(f.get("errors") or [])[:200]
        return pair("rulebook.retest.run_failed_with", errors=errors) if errors else pair("rulebook.retest.run_failed")
    if f.get("prompt_tokens") is not None and thresholds.truncated(f["prompt_tokens"], f.get("task_tokens")):
        return pair("rulebook.retest.cut", read=f["prompt_tokens"], task=f["task_tokens"])
    share = f.get("repeat_share") or 0
    if share > thresholds.RETEST_MAX_REPEAT_SHARE:
        return pair("rulebook.retest.repeats", share=f"{share:.0%}")
    if f.get("peak") is not None and st.get("fit_limit") is not None and f["peak"] > st["fit_limit"]:
        return pair("rulebook.retest.above", peak=f"{f['peak'] / (1 << 20):.1f} MiB",
                    limit=f"{st['fit_limit'] / (1 << 20):.1f} MiB")
    return pair("rulebook.retest.not_passed")


def retest_regressions(current: dict, previous: dict) -> list[str]:
    """Why ``current`` (a stability fact) is worse than ``previous``; empty: not worse."""
    return [en for en, _ in regressions(current, previous)]


def regressions(current: dict, previous: dict) -> list[tuple[str, str]]:
    """:func:`retest_regressions` in English and Chinese."""
    if not previous:
        return []
    why = []
    if previous.get("answered") and not current.get("answered"):
        why.append(pair("rulebook.regressed.failed"))
    prev_n, cur_n = previous.get("eval_count") or 0, current.get("eval_count") or 0
    if prev_n and cur_n < prev_n * thresholds.REGRESSION_SHORTER_FRACTION:
        why.append(pair("rulebook.regressed.shorter", now=cur_n, before=prev_n))
    if _task_cut(current) and not _task_cut(previous):
        why.append(pair("rulebook.regressed.cut"))
    if (current.get("repeat_share") or 0) > (previous.get("repeat_share") or 0) + thresholds.REGRESSION_REPEAT_RISE:
        why.append(pair("rulebook.regressed.repeats", now=f"{current['repeat_share']:.0%}",
                        before=f"{previous.get('repeat_share') or 0:.0%}"))
    new_errors = set(current.get("errors") or []) - set(previous.get("errors") or [])
    if new_errors:
        why.append(pair("rulebook.regressed.errors", errors="; ".join(sorted(new_errors))[:200]))
    return why


def _task_cut(f: dict) -> bool:
    """The retest's task was cut at num_ctx (the same test as the retest_truncated rule)."""
    return thresholds.truncated(f.get("prompt_tokens"), f.get("task_tokens"))


def note_unmeasured(st: dict, f: dict) -> None:
    """Any reading whose figures are not measurements leaves its reason: the
    final step says why a config could not be verified."""
    if f.get("measured") is False and f.get("unmeasured"):
        st["unmeasured_why"] = f["unmeasured"]
    if f.get("unconfirmed"):
        st["unconfirmed_why"] = f["unconfirmed"]
