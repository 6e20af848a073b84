"""The session report: ``report.md`` and a self-contained ``report.html`` with charts.

One description of the report (a list of small blocks: headings, paragraphs,
tables, charts, code) is rendered twice, as Markdown that references the chart
PNGs beside it and as HTML with the same PNGs inline (base64), so the HTML
opens anywhere with nothing else. Each probe gets a chart of memory over time
with its baseline, peak and limit lines, drawn by matplotlib's Agg canvas
(no display, no global backend switch). Then come the tables of tiers,
quantization trials and knob trials, the why-chain and the final config.
"""
from __future__ import annotations

import base64
import html
import io
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from assistant.atomic import write_files
from assistant.config import VOCAB
from assistant.outputs import modelfile_text, server_env
from assistant.i18n import catalog, t
from probes.units import fmt_size

REPORT_MD = "report.md"
REPORT_HTML = "report.html"

MSG = catalog("report")

_CJK_FONTS = ("Noto Sans CJK", "Noto Serif CJK", "Source Han", "WenQuanYi", "Droid Sans Fallback",
              "AR PL", "Noto Sans SC", "SimHei", "Microsoft YaHei", "PingFang", "Heiti")


# ---------------------------------------------------------------- blocks

@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Table:
    headers: tuple
    rows: tuple


@dataclass(frozen=True)
class Chart:
    file_name: str
    png: bytes
    alt: str
    caption: str


@dataclass(frozen=True)
class Code:
    text: str
    lang: str = ""


@dataclass(frozen=True)
class Items:
    items: tuple
    ordered: bool = True


@dataclass(frozen=True)
class Details:
    summary: str
    items: tuple


# ---------------------------------------------------------------- entry points

def write_report(out_dir: os.PathLike | str, result: Mapping[str, Any], doc: Mapping[str, Any]) -> list[Path]:
    """Write report.md, report.html and the chart PNGs (all or nothing); returns the paths written."""
    lang = _lang(result)
    return write_files(out_dir, report_files(result, doc), lang=lang)


def report_files(result: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, str | bytes]:
    """``{file name: content}`` of the report: report.md, report.html and one PNG per probe."""
    blocks = report_blocks(result, doc)
    files: dict[str, str | bytes] = {}
    for block in blocks:
        if isinstance(block, Chart):
            files[block.file_name] = block.png
    files[REPORT_MD] = render_markdown(blocks)
    files[REPORT_HTML] = render_html(blocks, title=_title(result, doc), lang=_lang(result))
    return files


#: a limit more than this many times the chart's highest value is written, not drawn
LIMIT_OFF_CHART_RATIO = 2.0


def chart_top(data_top: float, limit: float | None) -> tuple[float, bool]:
    """The y axis's top, and whether the limit is off the chart. A limit far
    above the data (a 22 GiB card under a 400 MiB curve) would flatten the
    curve to a line: the axis then follows the data and the limit is written
    at the top edge instead of drawn."""
    limit_off = limit is not None and data_top > 0 and limit > data_top * LIMIT_OFF_CHART_RATIO
    if limit is None or limit_off:
        return (data_top or 1), limit_off
    return max(data_top, limit), False


def chart_png(probe: Mapping[str, Any], lang: str = "en") -> bytes:
    """A PNG of memory over time for one probe, with baseline, peak and limit lines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    font = _cjk_font() if lang == "zh" else None
    if lang == "zh" and font is None:
        lang = "en"  # no CJK glyphs here: English labels beat empty boxes
    timeline = [(float(p[0]), float(p[1])) for p in (probe.get("timeline") or []) if p and len(p) >= 2]
    baseline, peak, limit = probe.get("baseline"), probe.get("peak"), probe.get("limit")
    if peak is None and timeline:
        peak = max(v for _, v in timeline)
    data = [v for _, v in timeline] + [x for x in (baseline, peak) if x is not None]
    top, limit_off = chart_top(max(data) if data else 0, limit)
    unit, scale = ("GiB", float(1 << 30)) if top >= 2 * (1 << 30) else ("MiB", float(1 << 20))

    fig = Figure(figsize=(9.5, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    text_kw = {"fontfamily": font} if font else {}
    if timeline:
        xs = [x for x, _ in timeline]
        ys = [y / scale for _, y in timeline]
        ax.plot(xs, ys, color="#1f77b4", linewidth=1.6, label=t("chart.used", lang))
        ax.fill_between(xs, ys, color="#1f77b4", alpha=0.12)
        if limit is not None:  # the part over the limit is the finding: make it red
            ax.fill_between(xs, ys, limit / scale, where=[y > limit / scale for y in ys],
                            color="#d62728", alpha=0.25, interpolate=True)
        i_peak = max(range(len(timeline)), key=lambda i: timeline[i][1])
        ax.plot([xs[i_peak]], [ys[i_peak]], marker="o", color="#ff7f0e", markersize=6)
        x_end = xs[-1] if xs[-1] > xs[0] else xs[0] + 1.0
        ax.set_xlim(xs[0], x_end)
    else:
        ax.text(0.5, 0.5, t("chart.no_samples", lang), transform=ax.transAxes, ha="center",
                va="center", color="#777777", **text_kw)
        ax.set_xlim(0, 1)
    if baseline is not None:
        ax.axhline(baseline / scale, color="#555555", linestyle="--", linewidth=1.1,
                   label=t("chart.baseline", lang, size=fmt_size(baseline)))
    if peak is not None:
        ax.axhline(peak / scale, color="#ff7f0e", linestyle=":", linewidth=1.6,
                   label=t("chart.peak", lang, size=fmt_size(peak)))
    if limit is not None and not limit_off:
        ax.axhline(limit / scale, color="#d62728", linestyle="-", linewidth=1.6,
                   label=t("chart.limit", lang, size=fmt_size(limit)))
    elif limit_off:
        ax.annotate(t("chart.limit_above", lang, size=fmt_size(limit)), xy=(0.99, 0.985), xycoords="axes fraction",
                    ha="right", va="top", fontsize=8, color="#d62728", **text_kw)
    x_lo, x_hi = ax.get_xlim()
    span = (x_hi - x_lo) or 1.0
    last_x, level = None, 0
    for mark in sorted((m for m in probe.get("marks") or [] if m and len(m) >= 2), key=lambda m: float(m[0])):
        x = float(mark[0])
        ax.axvline(x, color="#999999", linewidth=0.8, alpha=0.8)
        # marks close together (load, then request) get their labels on separate rows
        level = level + 1 if last_x is not None and (x - last_x) < 0.08 * span else 0
        last_x = x
        near_right = (x - x_lo) > 0.92 * span
        ax.annotate(str(mark[1]), xy=(x, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(-2 if near_right else 2, -10 - 10 * (level % 3)), textcoords="offset points",
                    ha="right" if near_right else "left", fontsize=8, color="#444444", **text_kw)
    ax.set_ylim(0, (top / scale) * 1.12 if top else 1)
    ax.set_xlabel(t("chart.time", lang), **text_kw)
    # probes chart the model's own usage (reading minus the idle one): baseline 0
    ylabel = "chart.memory_above_idle" if baseline == 0 else "chart.memory"
    ax.set_ylabel(t(ylabel, lang, unit=unit), **text_kw)
    ax.set_title(str(probe.get("name") or "probe"), fontsize=11, **text_kw)
    ax.grid(True, alpha=0.25)
    legend_kw = {"prop": {"family": font}} if font else {}
    # beside the plot, so it never hides the curve
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9, **legend_kw)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


# ---------------------------------------------------------------- the report, as blocks

def report_blocks(result: Mapping[str, Any], doc: Mapping[str, Any]) -> list:
    """The report as a list of blocks, in reading order."""
    lang = _lang(result)
    yes_no = {True: t("report.yes", lang), False: t("report.no", lang)}

    def cell(value: Any) -> str:
        if value is None:
            return "—"
        if isinstance(value, bool):
            return yes_no[value]
        if isinstance(value, (list, tuple)):
            return ", ".join(cell(v) for v in value) if value else "—"
        if isinstance(value, Mapping):
            return ", ".join(f"{k}={cell(v)}" for k, v in value.items()) if value else "—"
        return str(value)

    def size(value: Any) -> str:
        return fmt_size(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else cell(value)

    gen = doc.get("generated") or {}
    blocks: list = [Heading(_title(result, doc), 1),
                    Para(t("report.produced", lang, by=gen.get("by") or result.get("tool") or "oomvet",
                           at=gen.get("at") or result.get("created") or "?",
                           host=gen.get("host") or result.get("host") or "?"))]
    if doc.get("verified"):
        blocks.append(Para(t("report.verdict_verified", lang)))
    elif doc.get("fits") and doc.get("model"):
        blocks.append(Para(t("report.verdict_unverified", lang)))
    else:
        blocks.append(Para(t("report.verdict_nofit", lang)))

    diagnosis = doc.get("diagnosis") or result.get("diagnosis") or {}
    cause = diagnosis.get("cause")
    blocks.append(Heading(t("report.diagnosis", lang)))
    cause_text = t(f"report.cause_{cause}", lang) if cause else t("report.cause_unknown", lang)
    blocks.append(Para(t("report.cause", lang, cause=f"{cause_text} ({cause or '?'})")))
    if diagnosis.get("summary"):
        blocks.append(Para(str(diagnosis["summary"])))
    if diagnosis.get("advice"):
        blocks.append(Para(t("report.advice", lang, advice=diagnosis["advice"])))

    blocks.append(Heading(t("report.final_config", lang)))
    if doc.get("model"):
        values = {k: doc.get(k) for k in VOCAB}
        values["verified"] = doc.get("verified")
        blocks.append(Code(_values_yaml(values), "yaml"))
        blocks.append(Code(modelfile_text(doc), "dockerfile"))
        env, _ = server_env(doc)
        if env:
            blocks.append(Code("\n".join(f"{k}={v}" for k, v in env.items()), "sh"))
        blocks.append(Para(t("report.final_files", lang)))
    else:
        blocks.append(Para(t("report.no_config", lang)))

    steps = doc.get("steps") or result.get("steps") or []
    blocks.append(Heading(t("report.steps", lang)))
    if steps:
        rows = []
        for step in steps:
            what = step.get("probe") or step.get("knob") or ""
            if step.get("knob") is not None and ("from" in step or "to" in step):
                what = f"{step.get('knob')}: {cell(step.get('from'))} -> {cell(step.get('to'))}"
            effect = step.get("effect") or step.get("summary") or (
                t("chart.peak", lang, size=size(step["peak"])) if step.get("peak") is not None else "")
            rows.append((cell(step.get("n")), cell(step.get("action")), what, effect, cell(step.get("ok"))))
        blocks.append(Table(tuple(t(f"report.col_{c}", lang) for c in ("n", "action", "what", "effect", "ok")),
                            tuple(rows)))
    else:
        blocks.append(Para(t("report.none", lang)))

    evidence = doc.get("evidence") or result.get("evidence") or {}
    blocks.append(Heading(t("report.evidence", lang)))
    device = evidence.get("device") or {}
    if device:
        blocks.append(Para(t("report.device", lang, name=cell(device.get("name")), vendor=cell(device.get("vendor")),
                             total=size(device.get("total")), source=cell(device.get("source")))))
    if evidence.get("limit") is not None:
        note = f" ({evidence['limit_note']})" if evidence.get("limit_note") else ""
        blocks.append(Para(t("report.limit", lang, limit=size(evidence["limit"]), note=note)))
    readings = evidence.get("readings") or {}
    if readings:
        rows = tuple((_label(f"report.reading_{k}", lang, str(k)), size(v)) for k, v in readings.items())
        blocks.append(Heading(t("report.readings", lang), 3))
        blocks.append(Table((t("report.col_name", lang), t("report.col_value", lang)), rows))
    stability = evidence.get("stability") or {}
    if stability:
        blocks.append(Heading(t("report.stability", lang), 3))
        blocks.append(Para(t("report.stab_line", lang, eval_count=cell(stability.get("eval_count")),
                             done_reason=cell(stability.get("done_reason")), ok=cell(stability.get("ok")),
                             truncated=cell(stability.get("truncated")), repeated=cell(stability.get("repeated")),
                             errors=cell(stability.get("errors")))))
        if stability.get("config"):
            blocks.append(Para(cell(stability["config"])))

    probes = list(result.get("probes") or [])
    blocks.append(Heading(t("report.charts", lang)))
    if probes:
        for i, probe in enumerate(probes, 1):
            name = str(probe.get("name") or f"probe {i}")
            baseline, peak = probe.get("baseline"), probe.get("peak")
            delta = (peak - baseline) if isinstance(peak, (int, float)) and isinstance(baseline, (int, float)) else None
            caption = t("report.chart_caption", lang, baseline=size(baseline), peak=size(peak),
                        limit=size(probe.get("limit")), delta=size(delta))
            blocks.append(Heading(name, 3))
            blocks.append(Chart(f"chart-{i:02d}-{_slug(name)}.png", chart_png(probe, lang), name, caption))
    else:
        blocks.append(Para(t("report.not_run", lang)))

    facts = [f for f in (result.get("facts") or []) if isinstance(f, Mapping)]

    def of_kind(kind: str) -> list[Mapping]:
        return [f for f in facts if f.get("kind") == kind]

    loads = of_kind("load")
    if loads:
        blocks.append(Heading(t("report.loads", lang)))
        blocks.append(Table(
            tuple(t(f"report.col_{c}", lang) for c in ("model", "options", "placement", "size", "used", "drift", "ok", "error")),
            tuple((cell(f.get("model")), cell(f.get("options")), cell(f.get("placement")),
                   f"{size(f.get('size'))} / {size(f.get('size_vram'))}",
                   f"{size(f.get('used_after'))} / {size(f.get('used_settled'))}",
                   _per_min(f.get("drift_per_min")), cell(f.get("ok")), cell(f.get("error"))) for f in loads)))

    blocks.append(Heading(t("report.tiers", lang)))
    tiers = of_kind("tier")
    if tiers:
        blocks.append(Table(
            tuple(t(f"report.col_{c}", lang) for c in ("tier", "num_ctx", "prompt_tokens", "peak", "back", "truncated", "ok", "error")),
            tuple((cell(f.get("name")), cell(f.get("num_ctx")), cell(f.get("prompt_tokens")), size(f.get("peak")),
                   cell(f.get("back_to_baseline")), cell(f.get("truncated")), cell(f.get("ok")), cell(f.get("error")))
                  for f in tiers)))
    else:
        blocks.append(Para(t("report.not_run", lang)))

    blocks.append(Heading(t("report.quant", lang)))
    quants = of_kind("quant_trial")
    if quants:
        blocks.append(Table(
            tuple(t(f"report.col_{c}", lang) for c in ("tag", "level", "weights", "peak", "coherent", "issues", "ok")),
            tuple((cell(f.get("tag")), cell(f.get("level")), size(f.get("weights")), size(f.get("peak")),
                   cell(f.get("coherent")), cell(f.get("issues")), cell(f.get("ok"))) for f in quants)))
    else:
        blocks.append(Para(t("report.not_run", lang)))

    blocks.append(Heading(t("report.knobs", lang)))
    knobs = of_kind("knob_trial")
    if knobs:
        blocks.append(Table(
            tuple(t(f"report.col_{c}", lang) for c in ("knob", "change", "peak", "applied", "ok", "error")),
            tuple((cell(f.get("knob")), f"{cell(f.get('old'))} -> {cell(f.get('new'))}", size(f.get("peak")),
                   cell(f.get("applied", True)), cell(f.get("ok")), cell(f.get("error"))) for f in knobs)))
    else:
        blocks.append(Para(t("report.not_run", lang)))

    blocks.append(Heading(t("report.why", lang)))
    why = list(result.get("why") or [])
    if why:
        items = []
        for link in why:
            because = "; ".join(_brief(b) for b in (link.get("because") or [])) or "—"
            nxt = _brief(link.get("next")) if link.get("next") else "—"
            line = t("report.why_item", lang, rule=link.get("rule") or "?", because=because, next=nxt)
            reason = link.get("reason_zh") if lang == "zh" and link.get("reason_zh") else link.get("reason")
            items.append(f"{line}. {reason}" if reason else line)
        blocks.append(Items(tuple(items)))
    else:
        blocks.append(Para(t("report.none", lang)))

    transcript = [m for m in (result.get("transcript") or []) if isinstance(m, Mapping)]
    if transcript:
        blocks.append(Heading(t("report.transcript", lang)))
        blocks.append(Details(t("report.transcript", lang),
                              tuple(f"{m.get('role', '?')}: {m.get('content', '')}" for m in transcript)))
    return blocks


# ---------------------------------------------------------------- renderers

def render_markdown(blocks: Iterable) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {_md_inline(block.text)}")
        elif isinstance(block, Para):
            out.append(_md_inline(block.text))
        elif isinstance(block, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
            out[-1] += "\n|" + "|".join("---" for _ in block.headers) + "|"
            for row in block.rows:
                out[-1] += "\n| " + " | ".join(_md_cell(c) for c in row) + " |"
        elif isinstance(block, Chart):
            out.append(f"![{_md_inline(block.alt)}]({block.file_name})\n\n*{_md_inline(block.caption)}*")
        elif isinstance(block, Code):
            fence = "````" if "```" in block.text else "```"
            out.append(f"{fence}{block.lang}\n{block.text.rstrip()}\n{fence}")
        elif isinstance(block, Items):
            out.append("\n".join(f"{i}. {_md_inline(x)}" if block.ordered else f"- {_md_inline(x)}"
                                 for i, x in enumerate(block.items, 1)))
        elif isinstance(block, Details):
            out.append("\n".join(f"> {_md_inline(x)}  " for x in block.items))
    return "\n\n".join(out) + "\n"


def render_html(blocks: Iterable, title: str, lang: str = "en") -> str:
    esc = html.escape
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{esc(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            body.append(f"<p>{esc(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{esc(str(h))}</th>" for h in block.headers)
            rows = "".join("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in block.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Chart):
            data = base64.b64encode(block.png).decode("ascii")
            body.append(f'<figure><img alt="{esc(block.alt)}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{esc(block.caption)}</figcaption></figure>")
        elif isinstance(block, Code):
            body.append(f"<pre><code>{esc(block.text.rstrip())}</code></pre>")
        elif isinstance(block, Items):
            tag = "ol" if block.ordered else "ul"
            body.append(f"<{tag}>" + "".join(f"<li>{esc(x)}</li>" for x in block.items) + f"</{tag}>")
        elif isinstance(block, Details):
            body.append(f"<details><summary>{esc(block.summary)}</summary>"
                        + "".join(f"<p>{esc(x)}</p>" for x in block.items) + "</details>")
    html_lang = "zh-CN" if lang == "zh" else "en"
    return (f'<!DOCTYPE html>\n<html lang="{html_lang}">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", "Noto Sans", "Noto Sans CJK SC", sans-serif;
       max-width: 1040px; margin: 2em auto; padding: 0 1em; color: #1b1b1b; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: .92em; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f3f4f6; }
tr:nth-child(even) td { background: #fafafa; }
pre { background: #f6f8fa; padding: .8em 1em; overflow-x: auto; border-radius: 4px; }
figure { margin: .5em 0 1.5em; }
figure img { max-width: 100%; border: 1px solid #e5e5e5; }
figcaption { color: #555; font-size: .9em; }
""".strip()


# ---------------------------------------------------------------- helpers

def _lang(result: Mapping[str, Any]) -> str:
    lang = result.get("lang")
    return lang if lang in ("en", "zh") else "en"


def _title(result: Mapping[str, Any], doc: Mapping[str, Any]) -> str:
    lang = _lang(result)
    return t("report.title", lang, model=doc["model"]) if doc.get("model") else t("report.title_none", lang)


def _values_yaml(values: Mapping[str, Any]) -> str:
    """The final values as YAML, as oomvet.yaml writes them."""
    return yaml.safe_dump(dict(values), sort_keys=False, allow_unicode=True, default_flow_style=False)


def _per_min(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{fmt_size(value)}/min"
    return "—"


# sizes in facts are bytes: shown as sizes. Fields that repeat the obvious
# (the model, the tokens we sent) are left out of the one-line summary.
_SIZE_FIELDS = ("peak", "size", "size_vram", "weights", "used_after", "used_settled", "used_idle", "limit",
                "total", "budget")
_QUIET_FIELDS = ("model", "sent_tokens", "options", "config")


def _brief(value: Any, limit: int = 140) -> str:
    """One short line for a fact or a next step in the why-chain."""
    if isinstance(value, Mapping):
        head_key = "kind" if value.get("kind") else "action" if value.get("action") else None
        head = value.get(head_key) if head_key else ""
        rest = ", ".join(f"{k}={_short(fmt_size(v) if k in _SIZE_FIELDS and _is_num(v) else v)}"
                         for k, v in value.items()
                         if k != head_key and k not in _QUIET_FIELDS and v is not None)
        text = f"{head}({rest})" if head else rest
    else:
        text = _short(value)
    return text if len(text) <= limit else text[: limit - 4] + "...)"


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 48 else text[:45] + "..."


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "probe"


def _md_inline(text: str) -> str:
    return str(text).replace("\n", " ").replace("<", "&lt;")


def _md_cell(value: Any) -> str:
    return _md_inline(str(value)).replace("|", "\\|")


def _label(key: str, lang: str, default: str) -> str:
    try:
        return t(key, lang)
    except KeyError:  # a reading the catalog has no name for: show its key
        return default


@lru_cache(maxsize=1)
def _cjk_font() -> str | None:
    """A font family with Chinese glyphs, if the machine has one."""
    from matplotlib import font_manager
    for entry in font_manager.fontManager.ttflist:
        if any(name.lower() in entry.name.lower() for name in _CJK_FONTS):
            return entry.name
    return None
