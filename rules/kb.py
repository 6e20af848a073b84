"""The method's decision tree as one durable_rules ruleset, defined once at import.

Every posted fact reaches the engine as an event joined with the session's
state, and is consumed by exactly one *reading* rule: the first, by priority,
whose conditions hold (a failed load before a spilled one before a fitting
one). Reading rules record what a measurement means. After each post the
Advisor asks for a decision (a ``_decide`` event), and exactly one *deciding*
rule answers it: either an interpreting rule that turns a finished probe's
readings into a diagnosis and hands over to planning, or a planning rule that
issues the next step (ask / probe / change / done), or a waiting rule when the
session is still waiting for an answer or a measurement. The priorities of the
planning rules are the method's order of remedies: context, then quantization,
then backend. Every rule is named, and every firing is recorded, so the why
chain cites rules and facts, not code paths. ``rules/README.md`` draws the tree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rules import steps as S
from rules import thresholds as T
from rules.engine import RULESET, load_durable

lang = load_durable()
ruleset, when_all, pri = lang.ruleset, lang.when_all, lang.pri
m, s, c = lang.m, lang.s, lang.c

__all__ = ["RULES", "RULESET", "Rule", "lang"]


@dataclass(frozen=True)
class Rule:
    """A rule as the why chain cites it."""

    name: str
    layer: str  # "read" / "decide" / "wait"
    priority: int
    reason: str
    reason_zh: str


RULES: dict[str, Rule] = {}

DECIDE = m.kind == "_decide"

#: failure kinds (rules/facts.py FAILURES) that mean memory ran out; the probes
#: classify error texts and log lines with probes/oomtext.py and post the kind
#: as ``failure``, so no rule reads an error text itself
OOM_FAILURE = (m.failure == "startup_oom") | (m.failure == "runtime_oom") | (m.failure == "killed")


#: size fields a reading note shows in GiB/MiB as ``<field>_h``
_SIZES = ("peak", "total", "limit", "used_after", "used_settled", "size", "size_vram", "drift_per_min")


class _Loose(dict):
    """Format fields for reading notes: a fact may lack an optional field."""

    def __missing__(self, key: str) -> str:
        return "?"


def _size(n: int | float | None) -> str:
    if not n:
        return "?"
    n = int(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _reads(priority: int, event, state=None, en: str = "", zh: str = ""):
    """A reading rule: consumes one posted fact and records what it means."""
    def wrap(body: Callable[[dict, dict], Any]):
        name = body.__name__

        def action(c):
            st, fact = c.s._d, c.f._d
            body(st, fact)
            S.note_unmeasured(st, fact)
            fields = _Loose(fact)
            fields.update({k + "_h": _size(fact.get(k)) for k in _SIZES})
            fields["fit_limit_h"] = _size(st["fit_limit"])
            st["trail"].append({"rule": name, "seq": fact.get("_seq"),
                                "note": en.format_map(fields), "note_zh": zh.format_map(fields)})
            S.settle(st)

        action.__name__ = name
        patterns = ([c.st << state] if state is not None else []) + [c.f << event]
        when_all(pri(priority), *patterns)(action)
        RULES[name] = Rule(name, "read", priority, en, zh)
        return body
    return wrap


def _decides(priority: int, state, en: str, zh: str):
    """A deciding rule: answers one ``_decide`` when the state matches. Its body
    returns the next step, or ``None`` when it only interprets (and hands over
    to planning); either way the sentence goes into the why chain."""
    def wrap(body: Callable[[dict], dict | None]):
        name = body.__name__

        def action(c):
            st = c.s._d
            step = body(st)
            S.settle(st)
            if step is not None:
                fields = _fields(st, step)
                S.issue(st, name, step, en.format_map(fields), zh.format_map(fields))
            else:
                fields = _fields(st, {})
                st["trail"].append({"rule": name, "note": en.format_map(fields),
                                    "note_zh": zh.format_map(fields)})
            S.settle(st)

        action.__name__ = name
        when_all(pri(priority), c.st << state, c.f << DECIDE)(action)
        RULES[name] = Rule(name, "decide", priority, en, zh)
        return body
    return wrap


def _waits(priority: int, state, why: str, why_zh: str):
    """A waiting rule: the session is not ready to decide; the step stands."""
    def wrap(body):
        name = body.__name__

        def action(c):
            c.s._d["again"] = False

        action.__name__ = name
        when_all(pri(priority), c.st << state, c.f << DECIDE)(action)
        RULES[name] = Rule(name, "wait", priority, why, why_zh)
        return body
    return wrap


def _fields(st: dict, step: dict) -> dict:
    args = step.get("args") or {}
    config = step.get("config") or {}
    verified = st["config_verified"]
    return {
        "model": st["model"] or "?",
        "tag": st["tag"] or "?",
        "tag_to": config.get("model") or "?",
        "want_ctx": st["want_ctx"] or "?",
        "want_parallel": st["want_parallel"] or "?",
        "best_ctx": st["tier_best_ctx"],
        "fail_ctx": st["tier_fail_ctx"],
        "num_ctx": args.get("num_ctx", S.current_ctx(st)),
        "batch": args.get("num_batch", T.CONSERVATIVE_NUM_BATCH),
        "limit": _size(st["limit"]),
        "fit_limit": _size(st["fit_limit"]),
        "knob": step.get("knob") or args.get("knob") or "?",
        "from": step.get("from", "?"),
        "to": step.get("to", args.get("value", "?")),
        "error": st["tier_crash_error"] or st["probe_error"] or "?",
        "options": len(st["quant_options"]),
        "trials": len(st["quant_options"]) + len(st["quant_rejected"]),
        "verified": "passed" if verified else "did not pass",
        "verified_zh": "通过" if verified else "未通过",
    }


AT_BASELINE = s.awaiting == "baseline"
AT_CONTEXT = s.awaiting == "context"
AT_QUANT = s.awaiting == "quant"
AT_BACKEND = s.awaiting == "backend"
AT_STABILITY = s.awaiting == "stability"


def _finished(stage: str):
    return (s.stage == stage) & (s.finished == True)  # noqa: E712 - a rule condition, not Python truth


PLAN = s.stage == "plan"
WEIGHTS_OR_KV = (s.problem == "weights") | (s.problem == "kv_cache")


with ruleset(RULESET):

    # ===================================================================== #
    # 0. Self-test: the only way to make an action raise on purpose, so the  #
    #    test suite can prove an action's exception fails the post.          #
    # ===================================================================== #

    @_reads(1, (m.kind == "answer") & (m.question == "_selftest_raise"),
            en="self-test", zh="自检")
    def selftest_raise(st, f):
        raise RuntimeError(f"self-test failure requested: {f.get('value')}")

    # every session opens with this event: durable_rules 2.0.28 crashes in
    # delete_state (munmap_chunk: invalid pointer) for a session whose state
    # was set but never saw an event
    @when_all(pri(0), c.f << (m.kind == "_open"))
    def session_opened(c):
        pass

    RULES["session_opened"] = Rule("session_opened", "read", 0, "session opened", "会话开始")

    # ===================================================================== #
    # 1. Reading what the user and the device say (any stage)               #
    # ===================================================================== #

    @_reads(10, m.kind == "symptom", en="symptom: {phase} ({text})", zh="症状：{phase}（{text}）")
    def note_symptom(st, f):
        S.note_symptom(st, f)

    @_reads(10, m.kind == "target", en="target: model {model}, context {want_ctx}, concurrency {want_parallel}",
            zh="目标：模型 {model}，上下文 {want_ctx}，并发 {want_parallel}")
    def note_target(st, f):
        S.note_target(st, f)

    @_reads(10, m.kind == "device", en="device {name} ({vendor}): total {total_h}, limit {limit_h}",
            zh="设备 {name}（{vendor}）：总量 {total_h}，上限 {limit_h}")
    def note_device(st, f):
        S.note_device(st, f)

    @_reads(11, (m.kind == "answer") & +m.value, en="answer: {question} = {value}", zh="回答：{question} = {value}")
    def note_answer(st, f):
        S.note_answer(st, f)

    @_reads(12, m.kind == "answer", en="no answer to {question}: not asked again",
            zh="{question} 未回答：不再追问")
    def note_skipped_answer(st, f):
        S.note_skipped_answer(st, f)

    @_reads(10, m.kind == "refusal", en="the user refuses the {remedy} remedy", zh="用户拒绝 {remedy} 方案")
    def note_refusal(st, f):
        S.note_refusal(st, f)

    @_reads(10, m.kind == "stop", en="the session must stop: {reason}", zh="会话必须停止：{reason}")
    def note_stop(st, f):
        st["stop_reason"] = f["reason"]

    @_reads(10, (m.kind == "probe_done") & (m.probe == c.st.awaiting) & (m.ok == False),  # noqa: E712
            state=s.awaiting != "none", en="probe {probe} broke off: {error}", zh="探针 {probe} 中途失败：{error}")
    def probe_broke_off(st, f):
        S.finish_probe(st, f)

    @_reads(11, (m.kind == "probe_done") & (m.probe == c.st.awaiting), state=s.awaiting != "none",
            en="probe {probe} finished", zh="探针 {probe} 完成")
    def probe_finished(st, f):
        S.finish_probe(st, f)

    # ===================================================================== #
    # 2. Reading the baseline load (method step 2)                          #
    # ===================================================================== #

    LOAD = m.kind == "load"

    @_reads(20, LOAD & (m.ok == False), state=AT_BASELINE,  # noqa: E712
            en="load of {model} failed: {error}", zh="{model} 加载失败：{error}")
    def load_failed(st, f):
        S.read_load(st, f, "no_fit")

    @_reads(21, LOAD & (m.over_limit == True), state=AT_BASELINE,  # noqa: E712
            en="load of {model} went over the limit", zh="{model} 加载超出上限")
    def load_over_limit(st, f):
        S.read_load(st, f, "no_fit")

    @_reads(22, LOAD & ((m.placement == "partial") | (m.placement == "cpu")),
            state=AT_BASELINE & (s.gpu == True),  # noqa: E712
            en="{model} spilled to CPU ({placement}): size {size_h}, in VRAM {size_vram_h}",
            zh="{model} 溢出到 CPU（{placement}）：大小 {size_h}，显存中 {size_vram_h}")
    def load_spilled_to_cpu(st, f):
        S.read_load(st, f, "no_fit")

    @_reads(23, LOAD & (m.used_settled > c.st.fit_limit), state=AT_BASELINE,
            en="{model} settled at {used_settled_h}, above the limit with margin ({fit_limit_h})",
            zh="{model} 稳定后占用 {used_settled_h}，超过留余量后的上限（{fit_limit_h}）")
    def load_settled_above_limit(st, f):
        S.read_load(st, f, "no_fit")

    @_reads(24, LOAD & (m.used_after > c.st.fit_limit), state=AT_BASELINE,
            en="{model} used {used_after_h} after load, above the limit with margin ({fit_limit_h})",
            zh="{model} 加载后占用 {used_after_h}，超过留余量后的上限（{fit_limit_h}）")
    def load_above_limit(st, f):
        S.read_load(st, f, "no_fit")

    @_reads(25, LOAD & (m.ok == True) & (m.drift_per_min > T.SETTLE_DRIFT_BYTES_PER_MIN),  # noqa: E712
            state=AT_BASELINE,
            en="{model} keeps growing while idle: {drift_per_min_h}/min",
            zh="{model} 空闲时内存持续增长：每分钟 {drift_per_min_h}")
    def load_keeps_creeping(st, f):
        S.read_load(st, f, "creeping")

    @_reads(26, LOAD & (m.ok == True) & (m.used_after <= c.st.fit_limit), state=AT_BASELINE,  # noqa: E712
            en="{model} loaded within the limit with margin ({fit_limit_h})",
            zh="{model} 在留余量后的上限（{fit_limit_h}）内加载成功")
    def load_fits(st, f):
        S.read_load(st, f, "fits")

    @_reads(27, LOAD, state=AT_BASELINE,
            en="{model} loaded, but no usage was read: not counted", zh="{model} 已加载，但没有读到内存占用：不计入")
    def load_unmeasured(st, f):
        pass

    # ===================================================================== #
    # 3. Reading context tiers (method step 3)                              #
    # ===================================================================== #

    TIER = m.kind == "tier"

    @_reads(30, TIER & (m.ok == False) & (m.oom == True), state=AT_CONTEXT,  # noqa: E712
            en="tier {name} ({num_ctx} tokens): out of memory", zh="档位 {name}（{num_ctx} token）：内存不足")
    def tier_out_of_memory(st, f):
        S.read_tier(st, f, "oom")

    @_reads(31, TIER & (m.ok == False) & OOM_FAILURE, state=AT_CONTEXT,  # noqa: E712
            en="tier {name} ({num_ctx} tokens): the failure is out of memory ({failure}, {oom_marker}): {error}",
            zh="档位 {name}（{num_ctx} token）：失败属于内存不足（{failure}，{oom_marker}）：{error}")
    def tier_error_says_out_of_memory(st, f):
        S.read_tier(st, f, "oom")

    @_reads(32, TIER & ((m.placement == "partial") | (m.placement == "cpu")),
            state=AT_CONTEXT & (s.gpu == True),  # noqa: E712
            en="tier {name} ({num_ctx} tokens): spilled to CPU ({placement})",
            zh="档位 {name}（{num_ctx} token）：溢出到 CPU（{placement}）")
    def tier_spilled_to_cpu(st, f):
        S.read_tier(st, f, "over")

    @_reads(33, TIER & (m.truncated == True), state=AT_CONTEXT,  # noqa: E712
            en="tier {name} ({num_ctx} tokens): the prompt was truncated at num_ctx",
            zh="档位 {name}（{num_ctx} token）：提示在 num_ctx 处被截断")
    def tier_truncated(st, f):
        S.read_tier(st, f, "truncated")

    @_reads(34, TIER & (m.ok == False), state=AT_CONTEXT,  # noqa: E712
            en="tier {name} ({num_ctx} tokens) failed without an out-of-memory error: {error}",
            zh="档位 {name}（{num_ctx} token）失败，但不是内存不足：{error}")
    def tier_failed_without_oom(st, f):
        S.read_tier(st, f, "crash")

    @_reads(35, TIER & (m.ok == True) & (m.peak > c.st.fit_limit), state=AT_CONTEXT,  # noqa: E712
            en="tier {name} ({num_ctx} tokens): peak {peak_h} is above the limit with margin ({fit_limit_h})",
            zh="档位 {name}（{num_ctx} token）：峰值 {peak_h} 超过留余量后的上限（{fit_limit_h}）")
    def tier_above_limit(st, f):
        S.read_tier(st, f, "over")

    @_reads(36, TIER & (m.ok == True) & (m.peak <= c.st.fit_limit), state=AT_CONTEXT,  # noqa: E712
            en="tier {name} ({num_ctx} tokens): peak {peak_h} fits", zh="档位 {name}（{num_ctx} token）：峰值 {peak_h}，在上限内")
    def tier_fits(st, f):
        S.read_tier(st, f, "fits")

    @_reads(37, TIER, state=AT_CONTEXT,
            en="tier {name} ({num_ctx} tokens): no peak reading, not counted",
            zh="档位 {name}（{num_ctx} token）：没有峰值读数，不计入")
    def tier_unmeasured(st, f):
        S.read_tier(st, f, "unmeasured")

    # ===================================================================== #
    # 4. Reading lower-bit quantizations (method step 4)                    #
    # ===================================================================== #

    TRIAL = m.kind == "quant_trial"

    @_reads(40, TRIAL & (m.ok == False), state=AT_QUANT,  # noqa: E712
            en="{tag} ({level}) did not load", zh="{tag}（{level}）无法加载")
    def quant_load_failed(st, f):
        S.read_quant(st, f, "failed")

    @_reads(41, TRIAL & ((m.placement == "partial") | (m.placement == "cpu")),
            state=AT_QUANT & (s.gpu == True),  # noqa: E712
            en="{tag} ({level}) spilled to CPU ({placement})", zh="{tag}（{level}）溢出到 CPU（{placement}）")
    def quant_spilled_to_cpu(st, f):
        S.read_quant(st, f, "spilled")

    @_reads(42, TRIAL & (m.coherent == False), state=AT_QUANT,  # noqa: E712
            en="{tag} ({level}) is not coherent: {issues}", zh="{tag}（{level}）输出不连贯：{issues}")
    def quant_incoherent(st, f):
        S.read_quant(st, f, "incoherent")

    @_reads(43, TRIAL & (m.peak > c.st.fit_limit), state=AT_QUANT,
            en="{tag} ({level}): peak {peak_h} is above the limit with margin",
            zh="{tag}（{level}）：峰值 {peak_h} 超过留余量后的上限")
    def quant_above_limit(st, f):
        S.read_quant(st, f, "over")

    @_reads(44, TRIAL & (m.ok == True) & (m.coherent == True) & (m.peak <= c.st.fit_limit),  # noqa: E712
            state=AT_QUANT,
            en="{tag} ({level}) loads within the limit (peak {peak_h}) and stays coherent",
            zh="{tag}（{level}）在上限内加载（峰值 {peak_h}）且输出连贯")
    def quant_usable(st, f):
        S.read_quant(st, f, "usable")

    @_reads(45, TRIAL, state=AT_QUANT,
            en="{tag} ({level}): coherence or peak not measured, not used",
            zh="{tag}（{level}）：未测得连贯性或峰值，不采用")
    def quant_unmeasured(st, f):
        S.read_quant(st, f, "unmeasured")

    # ===================================================================== #
    # 5. Reading backend knob trials (method step 5)                        #
    # ===================================================================== #

    KNOB = m.kind == "knob_trial"

    @_reads(50, KNOB & (m.applied == False), state=AT_BACKEND,  # noqa: E712
            en="{knob} could not be changed by the probe (server setting)", zh="探针无法修改 {knob}（服务器设置）")
    def knob_not_applied(st, f):
        S.read_knob(st, f, "not_applied")

    @_reads(51, KNOB & (m.ok == False), state=AT_BACKEND,  # noqa: E712
            en="{knob} = {new}: failed", zh="{knob} = {new}：失败")
    def knob_failed(st, f):
        S.read_knob(st, f, "over")

    @_reads(52, KNOB & ((m.placement == "partial") | (m.placement == "cpu")),
            state=AT_BACKEND & (s.gpu == True),  # noqa: E712
            en="{knob} = {new}: spilled to CPU ({placement})", zh="{knob} = {new}：溢出到 CPU（{placement}）")
    def knob_spilled_to_cpu(st, f):
        S.read_knob(st, f, "over")

    @_reads(53, KNOB & (m.peak > c.st.fit_limit), state=AT_BACKEND,
            en="{knob} = {new}: peak {peak_h} is above the limit with margin",
            zh="{knob} = {new}：峰值 {peak_h} 超过留余量后的上限")
    def knob_above_limit(st, f):
        S.read_knob(st, f, "over")

    @_reads(54, KNOB & (m.ok == True) & (m.peak <= c.st.fit_limit), state=AT_BACKEND,  # noqa: E712
            en="{knob} = {new}: peak {peak_h} fits", zh="{knob} = {new}：峰值 {peak_h}，在上限内")
    def knob_fits(st, f):
        S.read_knob(st, f, "fits")

    @_reads(55, KNOB, state=AT_BACKEND, en="{knob} = {new}: no peak reading", zh="{knob} = {new}：没有峰值读数")
    def knob_unmeasured(st, f):
        S.read_knob(st, f, "unmeasured")

    # ===================================================================== #
    # 6. Reading stability retests (method step 6)                          #
    # ===================================================================== #

    STAB = m.kind == "stability"

    @_reads(60, STAB & (m._config_key != c.st.candidate_key), state=AT_STABILITY,
            en="the retest ran another config than the one proposed: not counted",
            zh="复测运行的配置与建议的不同：不计入")
    def retest_on_another_config(st, f):
        S.read_retest(st, f, "mismatch")

    @_reads(61, STAB & (m.ok == False), state=AT_STABILITY,  # noqa: E712
            en="the retest failed ({done_reason}): {errors}", zh="复测失败（{done_reason}）：{errors}")
    def retest_failed(st, f):
        S.read_retest(st, f, "fail")

    @_reads(62, STAB & (m.measured == False) & -m.peak, state=AT_STABILITY,  # noqa: E712
            en="the retest's memory was not measured ({unmeasured}): it cannot verify the config",
            zh="复测的内存没有测得（{unmeasured}）：无法验证该配置")
    def retest_unmeasured(st, f):
        S.read_retest(st, f, "unmeasured")

    @_reads(63, STAB & (m.truncated == True), state=AT_STABILITY,  # noqa: E712
            en="the retest's input was truncated", zh="复测的输入被截断")
    def retest_truncated(st, f):
        S.read_retest(st, f, "fail")

    @_reads(64, STAB & (m.repeat_share > T.COHERENCE.max_repeated_4gram_ratio), state=AT_STABILITY,
            en="the retest's output repeats itself ({repeat_share} of its 4-grams)",
            zh="复测的输出在重复（4-gram 重复比例 {repeat_share}）")
    def retest_repeated(st, f):
        S.read_retest(st, f, "fail")

    @_reads(65, STAB & (m.peak > c.st.fit_limit), state=AT_STABILITY,
            en="the retest peaked at {peak_h}, above the limit with margin",
            zh="复测峰值 {peak_h} 超过留余量后的上限")
    def retest_above_limit(st, f):
        S.read_retest(st, f, "fail")

    @_reads(66, STAB & (m.ok == True) & +m.peak, state=AT_STABILITY,  # noqa: E712
            en="the retest ran: {eval_count} tokens, {done_reason}, peak {peak_h} (compared with the previous "
               "retest next)",
            zh="复测完成：{eval_count} 个 token，{done_reason}，峰值 {peak_h}（接着与上一次复测比较）")
    def retest_passed(st, f):
        S.read_retest(st, f, "pass")

    @_reads(67, STAB, state=AT_STABILITY,
            en="the retest has no peak reading: it cannot verify the config",
            zh="复测没有峰值读数：无法验证该配置")
    def retest_without_peak(st, f):
        S.read_retest(st, f, "unmeasured")

    # everything the tree has no use for right now: kept in facts(), not used
    @_reads(300, +m.kind, en="{kind} fact kept, not used at this point", zh="{kind} 事实已记录，此时不使用")
    def fact_out_of_turn(st, f):
        pass

    # ===================================================================== #
    # 7. Deciding: guards and waiting                                       #
    # ===================================================================== #

    @_decides(100, (s.stage != "done") & (s.step_limit_reached == True),  # noqa: E712
              en="Too many steps: stopping with what was measured.", zh="步骤过多：按已测得的结果停止。")
    def step_limit_reached(st):
        return S.done(st, False, "step_limit")

    @_decides(99, (s.stage != "done") & (s.stop_reason != ""),
              en="The session cannot go on; it ends with what was measured so far.",
              zh="会话无法继续；以迄今测得的结果结束。")
    def stop_with_what_was_measured(st):
        st["awaiting"] = "none"
        st["waiting_answer"] = False
        return S.done(st, st["has_config"], "broken_off")

    @_waits(101, s.stage == "done", why="the session is done", why_zh="会话已结束")
    def session_finished(st):
        pass

    @_waits(102, s.waiting_answer == True, why="a question is open", why_zh="有问题待回答")  # noqa: E712
    def awaiting_answer(st):
        pass

    @_waits(103, (s.awaiting != "none") & (s.finished == False),  # noqa: E712
            why="a probe or retest is running", why_zh="探针或复测正在进行")
    def awaiting_measurements(st):
        pass

    # ===================================================================== #
    # 8. Start: what do we know, what is missing and matters                #
    # ===================================================================== #

    INTAKE = s.stage == "intake"

    @_decides(110, INTAKE & (s.q_symptom == "missing"),
              en="What goes wrong, and when: at load, with long input, with concurrent requests, slowly, "
                 "creeping while idle, or a crash? The branch to follow depends on it.",
              zh="出了什么问题、在什么时候：加载时、长输入时、并发请求时、变慢、空闲时内存上涨，还是崩溃？诊断路径取决于此。")
    def ask_symptom(st):
        return S.ask(st, "symptom")

    @_decides(111, INTAKE & (s.q_model == "missing"),
              en="Which model (Ollama tag) runs out of memory? Nothing can be measured without it.",
              zh="哪个模型（Ollama 标签）出现内存不足？没有它就无法测量。")
    def ask_model(st):
        return S.ask(st, "model")

    @_decides(112, INTAKE & (s.q_model != "known"),
              en="No model was named, so there is nothing to measure.", zh="没有指定模型，无从测量。")
    def stop_without_model(st):
        return S.done(st, False, "need_model")

    @_decides(113, INTAKE & (s.q_want_ctx == "missing"),
              en="How long a context (tokens) do you need? The context tiers are probed up to it; without an "
                 "answer they go up to the model's maximum.",
              zh="你需要多长的上下文（token 数）？上下文分档会测到这个长度；不回答则测到模型的最大长度。")
    def ask_wanted_context(st):
        return S.ask(st, "want_ctx")

    @_decides(114, INTAKE & (s.q_want_parallel == "missing") & (s.phase == "concurrent"),
              en="How many requests must run at once? Concurrency multiplies the KV cache.",
              zh="需要同时处理多少个请求？并发数会成倍放大 KV 缓存。")
    def ask_wanted_concurrency(st):
        return S.ask(st, "want_parallel")

    @_decides(115, INTAKE & (s.q_budget == "missing") & (s.has_limit == False),  # noqa: E712
              en="No device reading gives a memory limit: how much memory (bytes) may the model use?",
              zh="没有设备读数给出内存上限：模型最多可以使用多少内存（字节）？")
    def ask_budget(st):
        return S.ask(st, "budget")

    @_decides(116, INTAKE & (s.has_limit == False),  # noqa: E712
              en="Without a device reading or a budget there is no limit to measure against.",
              zh="没有设备读数也没有预算，就没有可以对照的上限。")
    def stop_without_limit(st):
        return S.done(st, False, "need_limit")

    @_decides(117, INTAKE,
              en="Start from conservative settings (context {num_ctx}, batch {batch}, one request) and read memory "
                 "idle, after load and after settling, against a limit of {limit}.",
              zh="先用保守设置（上下文 {num_ctx}、批大小 {batch}、单个请求）加载，读取空闲、加载后和稳定后的内存，"
                 "对照上限 {limit}。")
    def start_with_baseline(st):
        return S.probe(st, "baseline")

    # ===================================================================== #
    # 9. Interpreting the baseline                                          #
    # ===================================================================== #

    @_decides(120, _finished("baseline") & (s.load == "no_fit"),
              en="At conservative settings the model failed, spilled to CPU or went over the limit at load: "
                 "the weights do not fit.",
              zh="在保守设置下，模型加载失败、溢出到 CPU 或超出上限：是权重放不下。")
    def weights_do_not_fit_at_load(st):
        S.refer_to_baseline(st)
        S.diagnose(st, "weights")
        S.to_plan(st)

    @_decides(121, _finished("baseline") & (s.load == "creeping"),
              en="Usage kept rising after the load settled: memory is not released between requests.",
              zh="加载稳定后内存仍在上涨：请求之间没有释放内存。")
    def memory_creeps_while_idle(st):
        S.establish_baseline(st)
        S.diagnose(st, "not_released", "not_released")
        st["recheck_context"] = True  # the remedy is outside the config; the config still needs its context
        S.to_plan(st)

    @_decides(122, _finished("baseline") & (s.load == "fits"),
              en="The model loaded within the limit at conservative settings.",
              zh="模型在保守设置下能在上限内加载。")
    def loaded_within_limit(st):
        S.establish_baseline(st)
        st["recheck_context"] = True
        S.to_plan(st)

    @_decides(123, _finished("baseline"),
              en="The baseline probe posted no usable load reading.", zh="基线探针没有给出可用的加载读数。")
    def baseline_without_reading(st):
        st["problem"] = "unmeasured"  # not a cause: nothing was measured
        S.to_plan(st)

    # ===================================================================== #
    # 10. Interpreting the context tiers                                    #
    # ===================================================================== #

    CTX_DONE = _finished("context")

    @_decides(130, CTX_DONE & (s.tier_crash == True),  # noqa: E712
              en="A tier failed with an error that is not out-of-memory ({error}): not a memory problem.",
              zh="某一档位因非内存不足的错误失败（{error}）：不是内存问题。")
    def crash_without_oom_means_not_memory(st):
        S.diagnose(st, "not_memory", "crash")
        S.to_plan(st)

    @_decides(131, CTX_DONE & (s.tier_mem_fail == True) & (s.first_tier_failed == True),  # noqa: E712
              en="The shortest tier already ran out of memory: the weights, not the KV cache, are the problem.",
              zh="最短的档位就已内存不足：问题在权重，而不是 KV 缓存。")
    def short_tier_fails_means_weights(st):
        S.diagnose(st, "weights")
        S.to_plan(st)

    @_decides(132, CTX_DONE & (s.tier_mem_fail == True) & (s.short_of_want == True),  # noqa: E712
              en="The short tier fit but {fail_ctx} tokens did not: the KV cache growth runs out of memory.",
              zh="短档位通过，但 {fail_ctx} 个 token 的档位失败：是 KV 缓存增长耗尽了内存。")
    def long_tier_fails_means_kv_cache(st):
        S.diagnose(st, "kv_cache")
        S.refer_to_wanted_context(st)
        S.to_plan(st)

    @_decides(133, CTX_DONE & (s.tier_mem_fail == True),  # noqa: E712
              en="Only a tier beyond the wanted context ({want_ctx} tokens) failed; the wanted context fits.",
              zh="只有超出所需上下文（{want_ctx} token）的档位失败；所需上下文放得下。")
    def wanted_context_fits(st):
        S.adopt_largest_fit(st)
        S.to_plan(st)

    @_decides(134, CTX_DONE & (s.tier_truncated == True) & (s.cause == "none"),  # noqa: E712
              en="A prompt was cut at num_ctx without any memory error: truncation, not memory.",
              zh="提示在 num_ctx 处被截断且没有内存错误：是截断，不是内存。")
    def truncation_means_not_memory(st):
        S.diagnose(st, "not_memory", "truncation")
        S.adopt_largest_fit(st)  # the fix for truncation: an explicit, measured context
        S.to_plan(st)

    @_decides(135, CTX_DONE & (s.tier_not_back == True),  # noqa: E712
              en="Every tier fit, but usage did not fall back to the baseline after a request: memory is not released.",
              zh="所有档位都通过，但请求结束后内存没有回落到基线：内存没有释放。")
    def memory_not_back_means_not_released(st):
        S.diagnose(st, "not_released", "not_released")
        S.adopt_largest_fit(st)
        S.to_plan(st)

    @_decides(136, CTX_DONE & (s.tier_fit_count > 0) & (s.tier_mem_fail == False) & (s.cause == "none")  # noqa: E712
              & (s.want_beyond_trained == True),  # noqa: E712
              en="Every tier fits up to the model's trained context, and the wanted {want_ctx} tokens are beyond it: "
                 "Ollama clamps num_ctx there silently. Not a memory problem.",
              zh="直到模型训练上下文的各档位都放得下，而所需的 {want_ctx} 个 token 超出了它：Ollama 会静默截到训练长度。"
                 "不是内存问题。")
    def wanted_context_beyond_the_trained_one(st):
        S.diagnose(st, "not_memory", "trained_clamp")
        S.adopt_largest_fit(st)
        S.to_plan(st)

    @_decides(137, CTX_DONE & (s.tier_fit_count > 0) & (s.tier_mem_fail == False) & (s.cause == "none")  # noqa: E712
              & (s.default_cuts_long_input == True),  # noqa: E712
              en="Every tier up to the wanted {want_ctx} tokens fits, but a request without num_ctx gets the server's "
                 "default context, shorter than that: longer input is cut there silently. Not a memory problem.",
              zh="直到所需的 {want_ctx} 个 token 的各档位都放得下，但不带 num_ctx 的请求只得到服务器的默认上下文，"
                 "比这短：更长的输入会在那里被静默截断。不是内存问题。")
    def server_default_cuts_long_input(st):
        S.diagnose(st, "not_memory", "default_truncates")
        S.adopt_largest_fit(st)  # the fix: an explicit, measured context
        S.to_plan(st)

    @_decides(138, CTX_DONE & (s.tier_fit_count > 0),
              en="Every context tier fit within the limit.", zh="所有上下文档位都在上限内通过。")
    def all_tiers_fit(st):
        S.adopt_largest_fit(st)
        S.to_plan(st)

    @_decides(139, CTX_DONE, en="The context probe posted no usable tier.", zh="上下文探针没有给出可用的档位。")
    def context_without_reading(st):
        st["problem"] = "unmeasured"  # not a cause: nothing was measured
        S.to_plan(st)

    # ===================================================================== #
    # 11. Interpreting quant trials, backend trials and retests             #
    # ===================================================================== #

    @_decides(140, _finished("quant"),
              en="{options} lower-bit level(s) usable out of {trials} tried.",
              zh="尝试了 {trials} 个更低位量化，其中 {options} 个可用。")
    def quant_ladder_read(st):
        st["quant_probed_tag"] = st["tag"]
        S.to_plan(st)

    WISH = _finished("backend") & (s.knob_phase == "wish")
    LADDER = _finished("backend") & (s.knob_phase == "ladder")

    @_decides(150, WISH & (s.knob == "over"),
              en="{want_parallel} concurrent requests overflow the limit while one request fits: concurrency "
                 "is the cause.",
              zh="单个请求没有问题，但 {want_parallel} 个并发请求超出上限：原因是并发。")
    def wished_concurrency_overflows(st):
        st["concurrency_checked"] = True
        S.diagnose(st, "concurrency")
        S.start_concurrency_ladder(st)
        S.to_plan(st)

    @_decides(151, WISH & (s.knob == "fits"),
              en="{want_parallel} concurrent requests fit within the limit.",
              zh="{want_parallel} 个并发请求在上限内通过。")
    def wished_concurrency_fits(st):
        st["concurrency_checked"] = True
        S.keep_backend_fit(st)
        S.to_plan(st)

    @_decides(152, WISH,
              en="The concurrency trial could not be measured (a server setting the probe cannot change).",
              zh="并发试验无法测量（探针无法修改的服务器设置）。")
    def wished_concurrency_unmeasured(st):
        st["concurrency_checked"] = True
        st["advice"] = "concurrency_unmeasured"
        S.to_plan(st)

    @_decides(153, LADDER & (s.knob == "fits"),
              en="The backend change fit within the limit in its trial.", zh="该后端调整在试验中通过上限检查。")
    def backend_change_fits(st):
        S.keep_backend_fit(st)
        S.to_plan(st)

    @_decides(154, LADDER,
              en="The backend change did not fit (or could not be measured); the next one is tried.",
              zh="该后端调整未通过（或无法测量）；尝试下一项。")
    def backend_change_does_not_fit(st):
        S.to_plan(st)

    @_decides(160, _finished("retest") & (s.retest == "refused"),
              en="The change was refused; the next remedy is tried.", zh="用户拒绝了该调整；尝试下一种方案。")
    def change_refused(st):
        S.drop_candidate(st, refused=True)
        S.to_plan(st)

    @_decides(161, _finished("retest") & (s.retest == "pass"),
              en="The stability retest passed and did not regress: the change is kept.",
              zh="稳定性复测通过且没有退化：保留该调整。")
    def retest_passed_keeps_change(st):
        S.accept_candidate(st)
        S.to_plan(st)

    @_decides(162, _finished("retest"),
              en="The stability retest did not pass: the change is reverted and the next remedy tried.",
              zh="稳定性复测未通过：撤销该调整，尝试下一种方案。")
    def retest_failed_reverts_change(st):
        S.drop_candidate(st, refused=False)
        S.to_plan(st)

    @_decides(165, _finished("confirm") & (s.retest == "pass"),
              en="The stability retest passed on the config as it is.", zh="当前配置的稳定性复测通过。")
    def confirm_passed(st):
        st["config_verified"] = st["retest_measured"]
        # a pass whose memory was not measured cannot verify; retesting again would not either
        st["confirm_failed"] = not st["retest_measured"]
        S.to_plan(st)

    @_decides(166, _finished("confirm"),
              en="The stability retest did not pass on the config as it is.", zh="当前配置的稳定性复测未通过。")
    def confirm_failed(st):
        st["config_verified"] = False
        st["confirm_failed"] = True
        S.to_plan(st)

    # ===================================================================== #
    # 12. Planning: the remedies, in the method's order                     #
    # ===================================================================== #

    KV = PLAN & (s.problem == "kv_cache")

    @_decides(170, KV & (s.want_ctx > 0) & (s.q_keep_context == "missing")
              & (s.context_blocked == False),  # noqa: E712
              en="Must the context stay at {want_ctx} tokens? Only {best_ctx} fit within the limit (yes: try "
                 "lower-bit weights instead; no: use {best_ctx}).",
              zh="上下文必须保持 {want_ctx} 个 token 吗？在上限内只能容纳 {best_ctx} 个（是：改试更低位的权重量化；"
                 "否：改用 {best_ctx}）。")
    def ask_keep_context(st):
        return S.ask(st, "keep_context")

    @_decides(171, KV & (s.context_blocked == False) & (s.tier_best_ctx > 0),  # noqa: E712
              en="The KV cache is what runs out: use the largest context measured within the limit, {to} tokens "
                 "(from {from}), then retest stability.",
              zh="耗尽内存的是 KV 缓存：改用在上限内实测通过的最大上下文 {to} 个 token（原为 {from}），然后复测稳定性。")
    def reduce_context_to_largest_fit(st):
        return S.change(st, "max_context_len", st["tier_best_ctx"], st["tier_best_peak"], "context")

    @_decides(173, PLAN & WEIGHTS_OR_KV & (s.quant_refused == False) & (s.quant_probed == True)  # noqa: E712
              & (s.quant_left == True),  # noqa: E712
              en="Try the next lower-bit quantization that loaded within the limit and stayed coherent: {to} "
                 "({tag_to}), then retest stability.",
              zh="尝试下一个在上限内加载且输出连贯的更低位量化：{to}（{tag_to}），然后复测稳定性。")
    def try_lower_quant(st):
        option = next(o for o in st["quant_options"] if o["tag"] not in st["quant_tried"])
        return S.change(st, "quant_type", option["level"], option["peak"], "quant", tag=option["tag"])

    @_decides(174, PLAN & WEIGHTS_OR_KV & (s.quant_refused == False) & (s.quant_probed == False),  # noqa: E712
              en="Load the lower-bit quantizations of {tag} at context {num_ctx} and check each for coherence.",
              zh="在上下文 {num_ctx} 下加载 {tag} 的各个更低位量化版本，并逐个检查输出连贯性。")
    def look_for_lower_quant(st):
        return S.probe(st, "quant")

    @_decides(175, PLAN & (s.problem == "weights"),
              en="No lower-bit quantization of {tag} fits and stays coherent: the weights need another device.",
              zh="{tag} 没有可在上限内运行且输出连贯的更低位量化：权重需要换一台设备。")
    def weights_need_another_device(st):
        return S.done(st, False, "another_device")

    @_decides(176, KV,
              en="The wanted context does not fit even at the lower-bit levels tried; the best measured finding "
                 "is reported.",
              zh="即使尝试了更低位的量化，所需上下文仍然放不下；报告实测得到的最佳结果。")
    def wanted_context_does_not_fit(st):
        return S.done(st, False, "context_unmet", config=S.best_tier_config(st))

    @_decides(177, PLAN & (s.recheck_context == True),  # noqa: E712
              en="The model loads within the limit: send the same prompt at growing context lengths, one request "
                 "per tier, on {tag}.",
              zh="模型能在上限内加载：在 {tag} 上用同一提示按递增的上下文长度逐档发送，每档一个请求。")
    def measure_context_tiers(st):
        return S.probe(st, "context")

    CONC = PLAN & (s.problem == "concurrency") & (s.backend_refused == False)  # noqa: E712

    @_decides(178, CONC & (s.want_parallel > 1) & (s.q_keep_concurrency == "missing"),
              en="Must the concurrency stay at {want_parallel}? (yes: only changes that keep every concurrent "
                 "request are tried, the KV cache type and the batch; no: fewer concurrent requests may be "
                 "tried last.)",
              zh="并发数必须保持 {want_parallel} 吗？（是：只尝试保留全部并发的调整，即 KV 缓存类型和批大小；"
                 "否：最后也会尝试减少并发数。）")
    def ask_keep_concurrency(st):
        return S.ask(st, "keep_concurrency")

    @_decides(179, CONC & (s.has_backend_fit == True),  # noqa: E712
              en="Change {knob} from {from} to {to}: the trial with this one change fit within the limit; "
                 "retest stability.",
              zh="把 {knob} 从 {from} 改为 {to}：只改这一项的试验在上限内通过；复测稳定性。")
    def apply_backend_change(st):
        key, value = st["knob_try"]
        return S.change(st, key, value, st["backend_fit"].get("peak"), "backend")

    @_decides(180, CONC & (s.ladder_left == True),  # noqa: E712
              en="Concurrency overflows: try one backend change, {knob} = {to}, against the overflowing config.",
              zh="并发导致溢出：尝试一项后端调整 {knob} = {to}，与溢出的配置对照测量。")
    def try_next_backend_knob(st):
        key, value = S.next_rung(st)
        return S.probe(st, "backend", base=st["reference"], key=key, value=value, phase="ladder")

    @_decides(181, PLAN & ((s.problem == "not_memory") | (s.problem == "not_released") | (s.problem == "concurrency"))
              & (s.has_config == True) & (s.config_verified == False) & (s.confirm_failed == False),  # noqa: E712
              en="Retest stability on the measured config before reporting it.", zh="报告前先在实测配置上复测稳定性。")
    def confirm_before_report(st):
        return S.probe(st, "stability")

    @_decides(182, PLAN & (s.problem == "concurrency"),
              en="No single backend change made {want_parallel} concurrent requests fit within the limit.",
              zh="没有任何单项后端调整能让 {want_parallel} 个并发请求在上限内运行。")
    def concurrency_does_not_fit(st):
        return S.done(st, False, "concurrency_unmet")

    @_decides(183, PLAN & (s.problem == "not_memory"),
              en="The failure is not a memory problem; the measured config and what to do instead are reported.",
              zh="故障不是内存问题；报告实测配置以及应对办法。")
    def report_not_memory(st):
        return S.done(st, True, st["advice"])

    @_decides(184, PLAN & (s.problem == "not_released"),
              en="Memory is not released while idle; the measured config and what to do about it are reported.",
              zh="空闲时内存没有释放；报告实测配置以及处理办法。")
    def report_not_released(st):
        return S.done(st, True, "not_released")

    @_decides(185, PLAN & (s.problem == "unmeasured"),
              en="A probe gave no usable reading; nothing was measured within the limit.",
              zh="探针没有给出可用读数；没有任何配置在上限内测得。")
    def report_unmeasured(st):
        return S.done(st, False, "probe_failed")

    NONE = PLAN & (s.problem == "none")

    @_decides(187, NONE & (s.has_backend_fit == True) & (s.backend_refused == False),  # noqa: E712
              en="{to} concurrent requests fit within the limit in the trial: set max_concurrency to {to} and "
                 "retest stability.",
              zh="试验中 {to} 个并发请求在上限内通过：把 max_concurrency 设为 {to} 并复测稳定性。")
    def apply_wished_concurrency(st):
        key, value = st["knob_try"]
        return S.change(st, key, value, st["backend_fit"].get("peak"), "backend")

    @_decides(188, NONE & (s.wants_concurrency == True) & (s.concurrency_checked == False)  # noqa: E712
              & (s.backend_refused == False),  # noqa: E712
              en="A single request fits: measure {want_parallel} concurrent requests on the current config.",
              zh="单个请求没有问题：在当前配置上测量 {want_parallel} 个并发请求。")
    def check_wished_concurrency(st):
        return S.probe(st, "backend", base=st["config"], key="max_concurrency",
                       value=st["want_parallel"], phase="wish")

    @_decides(189, NONE & (s.has_config == True) & (s.config_verified == False)  # noqa: E712
              & (s.confirm_failed == False),  # noqa: E712
              en="Retest stability once on the final config, so the config written is a verified one.",
              zh="在最终配置上再复测一次稳定性，确保写出的配置经过验证。")
    def confirm_final_config(st):
        return S.probe(st, "stability")

    @_decides(190, NONE & (s.has_config == True),  # noqa: E712
              en="Done: the config was measured within the limit; its stability retest {verified}.",
              zh="完成：该配置在上限内实测通过；稳定性复测{verified_zh}。")
    def finish_with_config(st):
        advice = st["advice"] or ("concurrency_reduced" if st["concurrency_short"] else "") \
            or ("no_oom" if st["cause"] == "none" else "")
        return S.done(st, True, advice)

    @_decides(191, PLAN,
              en="Nothing measured fits within the limit.", zh="没有任何实测配置能在上限内运行。")
    def nothing_fits(st):
        return S.done(st, False, "probe_failed")

    @_waits(250, s.stage != "none", why="nothing new to decide", why_zh="没有新的决定要做")
    def nothing_to_decide(st):
        pass


# ========================================================================= #
# 13. The current engine (Ollama v0.30+, llama-server) and the server log.  #
#     Knowledge from shared/ollama-current.md; the `server` and `log` facts #
#     come from probes/serverinfo.py and probes/serverlog.py. State fields  #
#     added here (all written by the two reading rules below, so a rule     #
#     that names one cannot match before its fact arrived):                 #
#       srv_engine, srv_default_ctx, srv_default_ctx_why, srv_vram_total,   #
#       srv_fa, srv_kv_quant, srv_fit_target, srv_gpu_overhead  (server)    #
#       log_backoff_old, log_backoff_new, log_runtime_oom, log_kv_needs_fa  #
#       found_<finding>: the finding is recorded once                       #
#       setup_problem: "engine_missing" (no engine binary) or              #
#         "setting_refused" (the engine exited on a setting): not memory    #
#       findings: [{key, en, zh}] the user must see (Advisor.diagnosis)     #
#     Findings do not change the next step; they are recorded by            #
#     interpreting rules that fire before the tree's own (priorities        #
#     104-109) and hand back to it (``again``).                             #
# ========================================================================= #

#: what to do instead for the setup problems this section knows (key -> (en, zh))
CURRENT_ADVICE = {
    "engine_missing": ("The Ollama server has no inference engine: its llama-server binary was not found, so every "
                       "load fails. This is a setup problem, not memory: install Ollama's packaged build (or build "
                       "llama/server with its CMake preset) and run the check again.",
                       "Ollama 服务器没有推理引擎：找不到 llama-server 程序，所有加载都会失败。这是安装问题，不是内存问题："
                       "请安装 Ollama 官方打包版本（或用其 CMake 预设构建 llama/server），然后再检查一次。"),
    "setting_refused": ("The model process refused a server setting and exited before loading (for example a "
                        "quantized OLLAMA_KV_CACHE_TYPE with OLLAMA_FLASH_ATTENTION=0, or a LLAMA_ARG_* value it "
                        "cannot read): fix that setting; memory is not the problem.",
                        "模型进程拒绝了一项服务器设置，在加载前就退出了（例如量化的 OLLAMA_KV_CACHE_TYPE 配合 "
                        "OLLAMA_FLASH_ATTENTION=0，或无法解析的 LLAMA_ARG_* 值）：请修正该设置；问题不在内存。"),
}
S.ADVICE.update(CURRENT_ADVICE)  # steps.issue reads advice texts from S.ADVICE

_QUANT_KV = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.0f} GiB" if n >= (1 << 30) else _size(n)


def _found(st: dict, key: str, en: str, zh: str) -> None:
    """Record a finding once, and let the tree decide this round as if nothing happened."""
    st["findings"] = list(st.get("findings") or []) + [{"key": key, "en": en, "zh": zh}]
    st["found_" + key] = True
    st["again"] = True


def _default_ctx_finding(st: dict) -> tuple[str, str]:
    """The words for "the server's default context is a cause", from the tiers measured."""
    default, fail = st["srv_default_ctx"], st["tier_fail_ctx"]
    failed = next((t for t in st["tiers"] if t["num_ctx"] == fail), {})
    need = f"peaked at {_size(failed['peak'])}" if failed.get("peak") else "did not fit"
    need_zh = f"峰值 {_size(failed['peak'])}" if failed.get("peak") else "放不下"
    why = {"vram_tier": (f"the VRAM tier: {_gib(st.get('srv_vram_total') or 0)} of VRAM gets {default} tokens",
                         f"按显存分档：{_gib(st.get('srv_vram_total') or 0)} 显存默认 {default} 个 token"),
           "env": (f"OLLAMA_CONTEXT_LENGTH={default}", f"OLLAMA_CONTEXT_LENGTH={default}"),
           "modelfile": (f"the Modelfile's PARAMETER num_ctx {default}", f"Modelfile 中的 PARAMETER num_ctx {default}"),
           "legacy_default": (f"Ollama's default of {default}", f"Ollama 的默认值 {default}")}
    en_why, zh_why = why.get(st["srv_default_ctx_why"], (f"{default} tokens", f"{default} 个 token"))
    best = st["tier_best_ctx"]
    return (f"A request without num_ctx gets {default} tokens on this server ({en_why}); your model needs more "
            f"than the limit {_size(st['limit'])} there (the {fail}-token tier {need}). Set the context "
            f"explicitly: OLLAMA_CONTEXT_LENGTH={best or fail // 2} for the server, or PARAMETER num_ctx in the "
            f"Modelfile.",
            f"不带 num_ctx 的请求在这台服务器上得到 {default} 个 token（{zh_why}）；你的模型在这个长度下需要超过上限 "
            f"{_size(st['limit'])}（{fail} token 的档位{need_zh}）。请显式设定上下文：服务器设 "
            f"OLLAMA_CONTEXT_LENGTH={best or fail // 2}，或在 Modelfile 中设 PARAMETER num_ctx。")


# the same ruleset object as the tree above (a second ``ruleset(RULESET)`` would
# replace it): durable_rules keeps it in ``_rulesets`` until the first post
_TREE = lang._rulesets[RULESET]

with _TREE:

    @_reads(13, m.kind == "server", en="server: Ollama {version} ({engine}), a request without num_ctx gets "
            "{default_ctx} ({default_ctx_why})", zh="服务器：Ollama {version}（{engine}），不带 num_ctx 的请求得到 "
            "{default_ctx}（{default_ctx_why}）")
    def note_server(st, f):
        kv = (f.get("kv_cache_type") or "").lower()
        st.update(srv_engine=f.get("engine") or "", srv_default_ctx=f.get("default_ctx") or 0,
                  srv_default_ctx_why=f.get("default_ctx_why") or "", srv_vram_total=f.get("vram_total") or 0,
                  srv_fa=f.get("flash_attention") or "", srv_kv_quant=kv in _QUANT_KV,
                  srv_fit_target=f.get("fit_target") or 0, srv_gpu_overhead=f.get("gpu_overhead") or 0)
        for key in ("default_ctx", "kv_needs_fa", "overhead_ignored"):
            st.setdefault("found_" + key, False)

    @_reads(13, m.kind == "log", en="server log ({source}): what the model process did",
            zh="服务器日志（{source}）：模型进程的情况")
    def note_log(st, f):
        backoff = f.get("auto_backoff") or {}
        st["log_backoff_old"] = backoff.get("old_num_ctx") or st.get("log_backoff_old", 0)
        st["log_backoff_new"] = backoff.get("new_num_ctx") or st.get("log_backoff_new", 0)
        st["log_runtime_oom"] = bool(f.get("runtime_oom")) or st.get("log_runtime_oom", False)
        st["log_kv_needs_fa"] = bool(f.get("kv_needs_fa")) or st.get("log_kv_needs_fa", False)
        for key in ("backoff", "runtime_oom", "kv_needs_fa"):
            st.setdefault("found_" + key, False)

    @_reads(19, LOAD & (m.failure == "engine_missing"),
            en="load of {model} failed: the server has no llama-server binary", zh="{model} 加载失败：服务器缺少 llama-server 程序")
    def load_engine_missing(st, f):
        st["setup_problem"] = "engine_missing"

    @_reads(19, LOAD & (m.failure == "config"),
            en="load of {model} failed: the engine refused a setting: {error}", zh="{model} 加载失败：引擎拒绝了一项设置：{error}")
    def load_setting_refused(st, f):
        st["setup_problem"] = "setting_refused"

    @_reads(29, TIER & (m.failure == "engine_missing"), state=AT_CONTEXT,
            en="tier {name}: the server has no llama-server binary", zh="档位 {name}：服务器缺少 llama-server 程序")
    def tier_engine_missing(st, f):
        st["setup_problem"] = "engine_missing"

    # after the guards (100-103): fires once no probe is running and no question is open
    @_decides(104, (s.stage != "done") & (s.setup_problem == "engine_missing"),
              en="The server cannot run any model (no llama-server binary): a setup problem, not memory.",
              zh="服务器无法运行任何模型（缺少 llama-server 程序）：是安装问题，不是内存问题。")
    def engine_missing_is_a_setup_problem(st):
        return S.done(st, False, "engine_missing")

    @_decides(104, (s.stage != "done") & (s.setup_problem == "setting_refused"),
              en="The engine refused a server setting before loading: a setup problem, not memory.",
              zh="引擎在加载前拒绝了一项服务器设置：是设置问题，不是内存问题。")
    def refused_setting_is_a_setup_problem(st):
        return S.done(st, False, "setting_refused")

    @_decides(105, CTX_DONE & (s.found_default_ctx == False) & (s.srv_default_ctx > 0)  # noqa: E712
              & (s.tier_mem_fail == True) & (s.tier_fail_ctx > 0),  # noqa: E712
              en="The server's default context is weighed against the tiers measured.",
              zh="把服务器的默认上下文与实测档位对照。")
    def default_context_is_a_cause(st):
        if st["tier_fail_ctx"] <= st["srv_default_ctx"]:
            _found(st, "default_ctx", *_default_ctx_finding(st))
        else:  # the default fits: measured below the first failure
            st["found_default_ctx"] = True
            st["again"] = True

    @_decides(106, (s.found_backoff == False) & (s.log_backoff_new > 0),  # noqa: E712
              en="Ollama already shrank the context after an out-of-memory load.",
              zh="Ollama 在一次内存不足的加载后已经自动缩小了上下文。")
    def ollama_backed_off_the_context(st):
        old, new = st["log_backoff_old"], st["log_backoff_new"]
        _found(st, "backoff",
               f"Ollama already shrank your context: a load at {old} tokens ran out of memory, and Ollama retried "
               f"it once at {new} tokens (\"reducing automatic context and retrying once\"). Requests without "
               f"num_ctx now run with {new} tokens, not {old}; longer input is cut there silently.",
               f"Ollama 已经自动缩小了你的上下文：{old} 个 token 的加载内存不足，Ollama 以 {new} 个 token 重试了一次"
               f"（\"reducing automatic context and retrying once\"）。不带 num_ctx 的请求现在只有 {new} 个 token，"
               f"而不是 {old}；更长的输入会在那里被静默截断。")

    @_decides(107, (s.found_kv_needs_fa == False) & ((s.log_kv_needs_fa == True)  # noqa: E712
              | ((s.srv_engine == "llama-server") & (s.srv_kv_quant == True) & (s.srv_fa == "off"))),  # noqa: E712
              en="A quantized KV cache needs flash attention on this engine.",
              zh="在这个引擎上，量化的 KV 缓存需要 flash attention。")
    def kv_quantization_needs_flash_attention(st):
        _found(st, "kv_needs_fa",
               "OLLAMA_KV_CACHE_TYPE is quantized while OLLAMA_FLASH_ATTENTION=0: on this Ollama (llama-server "
               "engine) every load then fails (\"quantized V cache requires flash_attn to be enabled\"); older "
               "versions silently kept f16. Unset OLLAMA_FLASH_ATTENTION (auto) or set it to 1, or use "
               "OLLAMA_KV_CACHE_TYPE=f16.",
               "OLLAMA_KV_CACHE_TYPE 设为量化类型，而 OLLAMA_FLASH_ATTENTION=0：在这个版本（llama-server 引擎）上每次加载"
               "都会失败（\"quantized V cache requires flash_attn to be enabled\"），旧版本则静默保持 f16。请取消 "
               "OLLAMA_FLASH_ATTENTION（自动）或设为 1，或改用 OLLAMA_KV_CACHE_TYPE=f16。")

    @_decides(108, (s.found_overhead_ignored == False) & (s.srv_engine == "llama-server")  # noqa: E712
              & (s.srv_gpu_overhead > 0),
              en="OLLAMA_GPU_OVERHEAD does not reserve memory on this engine; the fit target does.",
              zh="在这个引擎上 OLLAMA_GPU_OVERHEAD 不会预留显存；起作用的是 fit 目标。")
    def fit_target_is_the_margin_knob(st):
        _found(st, "overhead_ignored",
               f"OLLAMA_GPU_OVERHEAD={st['srv_gpu_overhead']} does nothing for GGUF models on this Ollama: it is "
               f"not passed to llama-server. The free margin per device is LLAMA_ARG_FIT_TARGET (MiB, now "
               f"{_size(st['srv_fit_target']) if st['srv_fit_target'] else 'the default 1024 MiB'}): raise it to "
               f"keep more memory free, lower it to fit more layers.",
               f"OLLAMA_GPU_OVERHEAD={st['srv_gpu_overhead']} 在这个版本上对 GGUF 模型不起作用：它不会传给 llama-server。"
               f"每个设备的空闲余量由 LLAMA_ARG_FIT_TARGET（MiB，当前 "
               f"{_size(st['srv_fit_target']) if st['srv_fit_target'] else '默认 1024 MiB'}）决定：调大以留出更多空闲内存，"
               f"调小以放下更多层。")

    @_decides(109, (s.found_runtime_oom == False) & (s.log_runtime_oom == True),  # noqa: E712
              en="A runtime out-of-memory made Ollama unload every loaded model.",
              zh="一次运行时内存不足让 Ollama 卸载了所有已加载的模型。")
    def runtime_oom_expires_every_model(st):
        margin = (f" LLAMA_ARG_FIT_TARGET (now {_size(st['srv_fit_target'])}) is the margin llama.cpp's fit "
                  f"leaves at load; raise it so a request's peak has room."
                  if st.get("srv_engine") == "llama-server" and st.get("srv_fit_target") else "")
        margin_zh = (f" LLAMA_ARG_FIT_TARGET（当前 {_size(st['srv_fit_target'])}）是加载时 llama.cpp 的 fit 留出的余量；"
                     f"调大它，给请求的峰值留出空间。"
                     if st.get("srv_engine") == "llama-server" and st.get("srv_fit_target") else "")
        _found(st, "runtime_oom",
               "A request ran out of memory after the model had loaded, and Ollama then unloaded every loaded model "
               "(\"runtime OOM detected; expiring loaded models\"): other models disappearing is a consequence of "
               "that one failure, not a second problem." + margin,
               "模型加载后，一个请求内存不足，Ollama 随即卸载了所有已加载的模型（\"runtime OOM detected; expiring loaded "
               "models\"）：其他模型消失是这一次失败的结果，不是另一个问题。" + margin_zh)
