"""The current engine (Ollama v0.30+, llama-server) and the server log.

Knowledge from shared/ollama-current.md; the ``server`` and ``log`` facts come
from probes/serverinfo.py and probes/serverlog.py. State fields added here (all
written by the two reading rules below, so a rule that names one cannot match
before its fact arrived):

- ``srv_engine``, ``srv_default_ctx``, ``srv_default_ctx_why``, ``srv_vram_total``,
  ``srv_fa``, ``srv_kv_quant``, ``srv_kv`` (the cache type as read, "" unknown),
  ``srv_fit_target``, ``srv_gpu_overhead`` (server)
- ``log_backoff_old``, ``log_backoff_new``, ``log_runtime_oom``, ``log_kv_needs_fa`` (log)
- ``found_<finding>``: the finding is recorded once
- ``setup_problem``: ``"engine_missing"`` (no engine binary) or ``"setting_refused"``
  (the engine exited on a setting): not memory
- ``findings``: ``[{key, en, zh}]`` the user must see (``Advisor.diagnosis``)

Findings do not change the next step; they are recorded by interpreting rules
that fire before the tree's own (priorities 104-109) and hand back to it
(``again``). Their words are in common/messages/rules/sentences.yaml under
``finding.<rule>``.
"""
from __future__ import annotations

from common.catalog import pair, t
from rules import steps
from rules.moves import record_finding
from rules.interpreting import CTX_DONE
from rules.readings import AT_CONTEXT, LOAD, TIER
from rules.sizes import format_size
from rules.rulebook import TREE, Reading, deciding_rule, fact, register_readings, state

_QUANT_KV = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


# --- what the readings record ---------------------------------------------------

def note_server(st: dict, f: dict) -> None:
    kv = (f.get("kv_cache_type") or "").lower()
    st.update(srv_seen=True, srv_version=f.get("version") or "", srv_engine=f.get("engine") or "", srv_default_ctx=f.get("default_ctx") or 0,
              srv_default_ctx_why=f.get("default_ctx_why") or "", srv_vram_total=f.get("vram_total") or 0,
              srv_fa=f.get("flash_attention") or "", srv_kv_quant=kv in _QUANT_KV, srv_kv=kv,
              srv_fit_target=f.get("fit_target") or 0, srv_gpu_overhead=f.get("gpu_overhead") or 0)
    for key in ("default_ctx", "kv_needs_fa", "overhead_ignored"):
        st.setdefault("found_" + key, False)


def note_log(st: dict, f: dict) -> None:
    backoff = f.get("auto_backoff") or {}
    st["log_backoff_old"] = backoff.get("old_num_ctx") or st.get("log_backoff_old", 0)
    st["log_backoff_new"] = backoff.get("new_num_ctx") or st.get("log_backoff_new", 0)
    st["log_runtime_oom"] = bool(f.get("runtime_oom")) or st.get("log_runtime_oom", False)
    st["log_kv_needs_fa"] = bool(f.get("kv_needs_fa")) or st.get("log_kv_needs_fa", False)
    for key in ("backoff", "runtime_oom", "kv_needs_fa"):
        st.setdefault("found_" + key, False)


def _setup_problem(problem: str):
    def records(st: dict, f: dict) -> None:
        st["setup_problem"] = problem
    return records


READINGS = (
    Reading("note_server", 13, fact.kind == "server", records=note_server),
    Reading("note_log", 13, fact.kind == "log", records=note_log),
    Reading("load_engine_missing", 19, LOAD & (fact.failure == "engine_missing"),
            records=_setup_problem("engine_missing")),
    Reading("load_setting_refused", 19, LOAD & (fact.failure == "config"), records=_setup_problem("setting_refused")),
    Reading("tier_engine_missing", 29, TIER & (fact.failure == "engine_missing"), AT_CONTEXT,
            _setup_problem("engine_missing")),
)


# --- the words of the findings ----------------------------------------------------

def _gib(n: int) -> str:
    return f"{n / (1 << 30):.0f} GiB" if n >= (1 << 30) else format_size(n)


def _words(rule: str, part: str | None = None, **fields) -> tuple[str, str]:
    return pair(f"finding.{rule}" if part is None else f"finding.{rule}.{part}", **fields)


def _default_ctx_finding(st: dict) -> tuple[str, str]:
    """The words for "the server's default context is a cause", from the tiers measured."""
    rule = "default_context_is_a_cause"
    default, fail = st["srv_default_ctx"], st["tier_fail_ctx"]
    failed = next((t for t in st["tiers"] if t["num_ctx"] == fail), {})
    need = (_words(rule, "need_peak", peak=format_size(failed["peak"])) if failed.get("peak")
            else _words(rule, "need_no_peak"))
    source = st["srv_default_ctx_why"]
    part = "why_" + source if source in ("vram_tier", "env", "modelfile", "legacy_default") else "why_unknown"
    if part == "why_vram_tier" and not st.get("srv_vram_total"):
        part = "why_vram_tier_none"  # a host with no GPU: the lowest tier, not "? of VRAM"
    why = _words(rule, part, default=default, vram=_gib(st.get("srv_vram_total") or 0))
    fields = {"default": default, "limit": format_size(st["limit"]), "fail": fail,
              "suggest": st["tier_best_ctx"] or fail // 2}
    key = f"finding.{rule}"
    return (t(key, "en", why=why[0], need=need[0], **fields), t(key, "zh", why=why[1], need=need[1], **fields))


def _fit_target(st: dict, rule: str) -> tuple[str, str]:
    if st["srv_fit_target"]:
        return format_size(st["srv_fit_target"]), format_size(st["srv_fit_target"])
    return _words(rule, "fit_target_default")


with TREE:

    register_readings(READINGS)

    # after the guards (100-103): fires once no probe is running and no question is open
    @deciding_rule(104, (state.stage != "done") & (state.setup_problem == "engine_missing"))
    def engine_missing_is_a_setup_problem(st):
        return steps.done(st, False, "engine_missing")

    @deciding_rule(104, (state.stage != "done") & (state.setup_problem == "setting_refused"))
    def refused_setting_is_a_setup_problem(st):
        return steps.done(st, False, "setting_refused")

    @deciding_rule(105, CTX_DONE & (state.found_default_ctx == False) & (state.srv_default_ctx > 0)  # noqa: E712
                   & (state.tier_mem_fail == True) & (state.tier_fail_ctx > 0))  # noqa: E712
    def default_context_is_a_cause(st):
        if st["tier_fail_ctx"] <= st["srv_default_ctx"]:
            record_finding(st, "default_ctx", *_default_ctx_finding(st))
        else:  # the default fits: measured below the first failure
            st["found_default_ctx"] = True
            st["again"] = True

    @deciding_rule(106, (state.found_backoff == False) & (state.log_backoff_new > 0))  # noqa: E712
    def ollama_backed_off_the_context(st):
        record_finding(st, "backoff", *_words("ollama_backed_off_the_context",
                                      old=st["log_backoff_old"], new=st["log_backoff_new"]))

    @deciding_rule(107, (state.found_kv_needs_fa == False)  # noqa: E712
                   & ((state.log_kv_needs_fa == True)  # noqa: E712
                      | ((state.srv_engine == "llama-server") & (state.srv_kv_quant == True)  # noqa: E712
                         & (state.srv_fa == "off"))))
    def kv_quantization_needs_flash_attention(st):
        record_finding(st, "kv_needs_fa", *_words("kv_quantization_needs_flash_attention"))

    @deciding_rule(108, (state.found_overhead_ignored == False) & (state.srv_engine == "llama-server")  # noqa: E712
                   & (state.srv_gpu_overhead > 0))
    def fit_target_is_the_margin_knob(st):
        rule = "fit_target_is_the_margin_knob"
        target_en, target_zh = _fit_target(st, rule)
        key = f"finding.{rule}"
        record_finding(st, "overhead_ignored", t(key, "en", overhead=st["srv_gpu_overhead"], fit_target=target_en),
               t(key, "zh", overhead=st["srv_gpu_overhead"], fit_target=target_zh))

    @deciding_rule(109, (state.found_runtime_oom == False) & (state.log_runtime_oom == True))  # noqa: E712
    def runtime_oom_expires_every_model(st):
        rule = "runtime_oom_expires_every_model"
        margin = ("", "")
        if st.get("srv_engine") == "llama-server" and st.get("srv_fit_target"):
            margin = _words(rule, "margin", fit_target=format_size(st["srv_fit_target"]))
        key = f"finding.{rule}"
        record_finding(st, "runtime_oom", t(key, "en", margin=margin[0]), t(key, "zh", margin=margin[1]))
