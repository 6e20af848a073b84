"""Probe results, notes, the server's state and the why-chain, drawn for the
terminal in the session's language.

Probes hand back plain rows (``ProbeResult.rows``, keyed by English row
keys such as ``"after load"``) and notes; this module is the one place that
turns them into text a person reads: every label through the en/zh catalog,
every size formatted, no empty header row, and a compact layout (one line per
row) below 100 columns, where a wide table would wrap into one-letter
columns. Notes the probes write in English are matched to catalog messages;
one this module does not know is shown as the probe wrote it.
"""
from __future__ import annotations

import re
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from assistant.i18n import catalog, t
from probes.base import SIZE_KEYS
from probes.units import fmt_size

COMPACT_BELOW = 100  # columns

_ROWS = {
    "model": ("model", "模型"), "num_ctx": ("num_ctx", "num_ctx"), "loaded": ("loaded", "已加载"),
    "where": ("where", "位置"), "idle": ("idle", "空闲"), "after load": ("after load", "加载后"),
    "settled": ("settled", "稳定后"), "peak": ("peak", "峰值"), "drift/min": ("drift/min", "每分钟漂移"),
    "ollama size": ("ollama size", "ollama 大小"), "limit": ("limit", "上限"), "tier": ("tier", "档位"),
    "sent tokens": ("sent tokens", "发送 token"), "evaluated": ("evaluated", "已处理 token"),
    "truncated": ("truncated", "被截断"), "ok": ("ok", "通过"), "error": ("error", "错误"),
    "setting": ("setting", "设置"), "requests": ("requests", "请求数"), "tag": ("tag", "标签"),
    "level": ("level", "量化级别"), "bits": ("bits", "位数"), "weights": ("weights", "权重"),
    "coherent": ("coherent", "连贯"), "issues": ("issues", "问题"), "parallel": ("parallel", "并发"),
    "tokens": ("tokens", "生成 token"), "done": ("done", "结束原因"), "status": ("status", "状态"),
    "prompt tokens": ("prompt tokens", "提示 token"), "of": ("of", "共"), "seconds": ("seconds", "秒"),
    "errors": ("errors", "错误数"), "released": ("released", "已释放"), "predicted": ("predicted", "预测"),
    "agreement": ("agreement", "首选词一致率"), "kl": ("kl", "KL 散度"),
}

MSG = catalog({
    **{f"row.{key}": {"en": en, "zh": zh} for key, (en, zh) in _ROWS.items()},
    "render.title": {"en": "probe {name} — {verdict} ({secs:.1f} s)", "zh": "探测 {name} — {verdict}（{secs:.1f} 秒）"},
    "render.ok": {"en": "ok", "zh": "通过"},
    "render.failed": {"en": "failed", "zh": "未通过"},
    "render.yes": {"en": "yes", "zh": "是"},
    "render.no": {"en": "no", "zh": "否"},
    "render.per_min": {"en": "{size}/min", "zh": "{size}/分钟"},
    "render.where.gpu": {"en": "GPU", "zh": "GPU"},
    "render.where.partial": {"en": "partly CPU", "zh": "部分在 CPU"},
    "render.where.cpu": {"en": "CPU", "zh": "CPU"},
    "render.error": {"en": "error: {text}", "zh": "错误：{text}"},
    "render.note": {"en": "  • {text}", "zh": "  • {text}"},
    "note.unmeasured": {"en": "not measured: {why}", "zh": "未测得：{why}"},
    "note.placement": {"en": "{model} runs {where}: Ollama put only part of it on the GPU",
                       "zh": "{model} 运行在 {where}：Ollama 只把一部分放到了 GPU 上"},
    "note.stopped_oom": {"en": "stopped at tier {tier} (num_ctx {ctx}): out of memory",
                         "zh": "在档位 {tier}（num_ctx {ctx}）停止：显存不足"},
    "note.not_counted": {"en": "{what}: not counted: {why}", "zh": "{what}：不计入：{why}"},
    "note.measured_again": {"en": "{what}: measured again because {why}", "zh": "{what}：重新测量，因为 {why}"},
    "note.own_parallel": {"en": "the server runs with its own OLLAMA_NUM_PARALLEL; measured as it is",
                          "zh": "服务器使用它自己的 OLLAMA_NUM_PARALLEL；按现状测量"},
    # probes/notes.py, by key (the English must say what probes/notes.py says)
    "search.best": {"en": "largest num_ctx measured to fit under {limit}: {best} ({why}; {loads} loads)",
                    "zh": "在 {limit} 以内实测可行的最大 num_ctx：{best}（{why}；共 {loads} 次加载）"},
    "search.none": {"en": "no context fits under {limit}: the first rung (num_ctx {first}) did not ({stop})",
                    "zh": "在 {limit} 以内没有可行的上下文：第一档（num_ctx {first}）就不行（{stop}）"},
    "search.why.cap_want": {"en": "the wanted context fits", "zh": "所需上下文放得下"},
    "search.why.cap_trained": {"en": "the trained context fits", "zh": "训练上下文长度放得下"},
    "search.why.cap_top": {"en": "the top fits", "zh": "上限值放得下"},
    "search.why.converged": {"en": "num_ctx {fail} measured over", "zh": "num_ctx {fail} 实测超出"},
    "search.why.trials": {"en": "stopped after {loads} loads", "zh": "{loads} 次加载后停止"},
    "search.why.unmeasured": {"en": "a peak could not be measured", "zh": "有一个峰值没能测得"},
    "search.why.error": {"en": "a load failed for a reason other than memory", "zh": "有一次加载因内存以外的原因失败"},
    "ctx.clamped": {"en": "the model was trained for {trained} tokens: Ollama clamps a larger num_ctx ({want}) to it "
                          "without an error",
                    "zh": "该模型的训练上下文为 {trained} 个 token：更大的 num_ctx（{want}）会被 Ollama 静默截到这个值"},
    "ctx.default": {"en": "a request without num_ctx gets the server default of {default} tokens ({engine} engine, "
                          "v{version}); longer input is cut there",
                    "zh": "不带 num_ctx 的请求得到服务器默认的 {default} 个 token（{engine} 引擎，v{version}）；"
                          "更长的输入会在那里被截断"},
    "ctx.calibrated": {"en": "calibrated: peak = {intercept} + {slope} x KV cache; residual {residual}",
                       "zh": "已校准：峰值 = {intercept} + {slope} × KV 缓存；残差 {residual}"},
    "ctx.calibrated_model": {"en": "calibrated: peak = {intercept} + {slope} x (KV + compute); residual {residual}",
                             "zh": "已校准：峰值 = {intercept} + {slope} ×（KV + 计算缓冲）；残差 {residual}"},
    "ctx.no_prediction": {"en": "no prediction for {model}: {error}", "zh": "无法预测 {model}：{error}"},
    "quant.no_sibling": {"en": "no lower-bit sibling of {model} on the server (levels are read from `ollama show`, "
                               "not from tag names)",
                         "zh": "服务器上没有 {model} 的更低位版本（量化级别读自 `ollama show`，而不是标签名）"},
    "quant.no_logprobs": {"en": "the server returns no token log-probabilities: coherence is judged on the text",
                          "zh": "服务器不返回 token 对数概率：连贯性按文本判断"},
    "quant.predicted_over": {"en": "{tag}: not loaded: predicted to peak at {peak}, over the limit with margin "
                                   "({limit})",
                             "zh": "{tag}：未加载：预测峰值 {peak}，超过留余量后的上限（{limit}）"},
    "probe.spilled": {"en": "spilled to the CPU: only {vram} of {size} on the GPU",
                      "zh": "溢出到 CPU：{size} 中只有 {vram} 在 GPU 上"},
    "backend.weights_alone": {"en": "weights alone (num_ctx {ctx}): {peak} — a diagnostic, not a setting to use",
                              "zh": "仅权重（num_ctx {ctx}）：{peak} —— 仅作诊断，不是可用的设置"},
    "backend.restart": {"en": "{assigns} ollama serve   (systemd: `systemctl edit ollama` -> [Service] "
                              "Environment=...; then restart)",
                        "zh": "{assigns} ollama serve   （systemd：`systemctl edit ollama` -> [Service] "
                              "Environment=...；然后重启）"},
    "ps.none": {"en": "ollama ps: nothing loaded", "zh": "ollama ps：没有加载任何模型"},
    "ps.one": {"en": "{name} {size} {where} ctx {ctx}", "zh": "{name} {size} {where} 上下文 {ctx}"},
    "ps.line": {"en": "ollama ps: {models}", "zh": "ollama ps：{models}"},
    "ps.split": {"en": "{cpu}%/{gpu}% CPU/GPU", "zh": "{cpu}%/{gpu}% CPU/GPU"},
    "ps.failed": {"en": "ollama ps: could not ask the server ({error})", "zh": "ollama ps：无法询问服务器（{error}）"},
    "why.rule": {"en": "#{n} {rule} → {next}", "zh": "#{n} {rule} → {next}"},
    "why.because": {"en": "   because: {facts}", "zh": "   依据：{facts}"},
    "why.chain": {"en": "   chain: {steps}", "zh": "   推理链：{steps}"},
    "why.sentence": {"en": "   {text}", "zh": "   {text}"},
})

_NOTES = [
    (re.compile(r"^not measured: (?P<why>.+)$"), "note.unmeasured"),
    (re.compile(r"^(?P<model>\S+) runs (?P<where>gpu|partial|cpu): Ollama put only part of it on the GPU$"),
     "note.placement"),
    (re.compile(r"^stopped at tier (?P<tier>\S+) \(num_ctx (?P<ctx>\d+)\): out of memory$"), "note.stopped_oom"),
    (re.compile(r"^(?P<what>.+?): not counted: (?P<why>.+)$"), "note.not_counted"),
    (re.compile(r"^(?P<what>.+?): measured again because (?P<why>.+)$"), "note.measured_again"),
    (re.compile(r"^the server runs with its own OLLAMA_NUM_PARALLEL; measured as it is$"), "note.own_parallel"),
]


def cell(key: str, value: Any) -> str:
    """One value of a probe row as text: sizes formatted, yes/no and places in the language."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return t("render.yes" if value else "render.no")
    if isinstance(value, (list, tuple)):  # a probe's issues: notes, each in the language
        return "; ".join(note(v) if isinstance(v, str) else str(v) for v in value) or "—"
    if isinstance(value, str) and getattr(value, "key", None) is not None:
        return note(value)
    if key == "drift/min" and isinstance(value, (int, float)):
        return t("render.per_min", size=fmt_size(value))
    if key in SIZE_KEYS and isinstance(value, (int, float)):  # the probes' own list of byte columns
        return fmt_size(value)
    if key == "where" and value in ("gpu", "partial", "cpu"):
        return t(f"render.where.{value}")
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, int) and abs(value) >= 1 << 20:
        return fmt_size(value)  # an unlisted byte count still never shows raw
    return str(value)


def label(key: str) -> str:
    try:
        return t(f"row.{key}")
    except KeyError:
        return key


def note(text: str) -> str:
    """A probe note in the session's language (as written when not known)."""
    key = getattr(text, "key", None)
    if key is not None:  # a probes.notes.Note: its values may be notes too
        return t(key, **{k: note(v) if isinstance(v, str) else v for k, v in text.values.items()})
    for rx, key in _NOTES:
        m = rx.match(text)
        if m:
            values = m.groupdict()
            if "where" in values:
                values["where"] = t(f"render.where.{values['where']}")
            return t(key, **values)
    return text


def probe_result(result, width: int) -> RenderableType:
    """A probe result as a table (or, below 100 columns, one line per row)."""
    title = Text(t("render.title", name=result.name, verdict=t("render.ok" if result.ok else "render.failed"),
                   secs=result.wall_s or 0.0), style="bold")
    parts: list[RenderableType] = [title]
    columns = list(dict.fromkeys(k for row in result.rows for k in row))
    if len(result.rows) == 1 or width < COMPACT_BELOW:
        for row in result.rows:
            if len(result.rows) == 1:
                table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 1))
                table.add_column(style="dim")
                table.add_column()
                for key in columns:
                    table.add_row(label(key), cell(key, row.get(key)))
                parts.append(table)
            else:
                parts.append(Text(" · ".join(f"{label(k)} {cell(k, row.get(k))}" for k in columns
                                             if row.get(k) not in (None, "")), overflow="fold"))
    elif result.rows:
        table = Table(show_header=True, header_style="bold")
        for key in columns:
            table.add_column(label(key), overflow="fold")
        for row in result.rows:
            table.add_row(*(cell(k, row.get(k)) for k in columns))
        parts.append(table)
    if result.error:
        parts.append(Text(t("render.error", text=note(result.error)), style="red"))
    for text in result.notes:
        parts.append(Text(t("render.note", text=note(text))))
    return Group(*parts)


def ps_line(loaded: list) -> str:
    """``ollama ps`` in one line: what is loaded, its size, the CPU/GPU split and the context."""
    if not loaded:
        return t("ps.none")
    items = []
    for m in loaded:
        if m.size_bytes and 0 < m.size_vram_bytes < m.size_bytes:
            gpu = round(100 * m.size_vram_bytes / m.size_bytes)
            where = t("ps.split", cpu=100 - gpu, gpu=gpu)
        else:
            where = "100% GPU" if m.size_vram_bytes > 0 else "100% CPU"
        items.append(t("ps.one", name=m.name, size=fmt_size(m.size_bytes), where=where,
                       ctx=m.context_length if m.context_length else "—"))
    return t("ps.line", models="; ".join(items))


def why_lines(chain: list[dict], lang: str) -> list[str]:
    """``Advisor.why()`` as lines: each step's rule and next step, the facts it
    rested on, the chain of readings that fired on the way, and its sentence."""
    lines = []
    for entry in chain:
        nxt = entry.get("next") or {}
        what = nxt.get("probe") or nxt.get("question") or nxt.get("knob") or nxt.get("cause") or ""
        lines.append(t("why.rule", n=entry.get("n"), rule=entry.get("rule"), next=f"{nxt.get('action')} {what}".strip()))
        facts = [_fact(f) for f in entry.get("because") or []]
        if facts:
            lines.append(t("why.because", facts="; ".join(facts)))
        chain_steps = [c.get("rule") for c in entry.get("chain") or [] if isinstance(c, dict) and c.get("rule")]
        if chain_steps:
            lines.append(t("why.chain", steps=" → ".join(chain_steps)))
        sentence = entry.get("reason_zh") if lang == "zh" else entry.get("reason")
        if sentence:
            lines.append(t("why.sentence", text=sentence))
    return lines


def _fact(f: dict) -> str:
    shown = []
    for key, value in f.items():
        if key in ("kind", "_seq", "text", "timeline") or value is None or isinstance(value, (list, dict)):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and (key in ("total", "limit", "budget", "peak")
                                                                      or key.endswith("_bytes") or abs(value) >= 1 << 20):
            value = fmt_size(value)
        shown.append(f"{key}={value}")
    return f"{f.get('kind')}({', '.join(shown[:8])})"
