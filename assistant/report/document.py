"""The session report: ``report.md`` and a self-contained ``report.html`` with charts.

This module says what the report tells, in reading order: the verdict, the
diagnosis, the final config, the steps and their measured effect, the
evidence, a chart of memory over time per probe (:mod:`assistant.report.chart`),
the tables of loads, context tiers, quantization trials and knob trials, the
why-chain and the transcript. It builds that as a list of blocks once;
:mod:`assistant.report.format` writes them as Markdown referencing the chart
PNGs beside it and turns that Markdown into HTML with the same PNGs inline.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from assistant.files.atomic import write_files
from assistant.config import VOCAB
from common.catalog import t
from assistant.files.outputs import modelfile_text, server_env
from assistant.report.chart import LIMIT_OFF_CHART_RATIO, chart_png, chart_title, chart_top
from assistant.report.alternatives import alternative_line
from assistant.report.why import why_lines
from assistant.session.render import KNOBS, note
from assistant.report.ledger import ledger_rows, others_note
from assistant.report.format import Chart, Code, Heading, Items, Para, Quote, Table, render_html, render_markdown
from probes.units import fmt_size
from rules.facts import PROBES
from rules.rulebook import DONE_REASONS, tier_word

__all__ = ["REPORT_HTML", "REPORT_MD", "LIMIT_OFF_CHART_RATIO", "chart_png", "chart_top", "report_blocks",
           "report_files", "write_report"]

REPORT_MD = "report.md"
REPORT_HTML = "report.html"


def write_report(out_dir: os.PathLike | str, result: Mapping[str, Any], doc: Mapping[str, Any]) -> list[Path]:
    """Write report.md, report.html and the chart PNGs (all or nothing); returns the paths written."""
    lang = _lang(result)
    return write_files(out_dir, report_files(result, doc), lang=lang)


def report_files(result: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, str | bytes]:
    """``{file name: content}`` of the report: report.md, report.html and one PNG per probe."""
    blocks = report_blocks(result, doc)
    charts = {block.file_name: block.png for block in blocks if isinstance(block, Chart)}
    markdown = render_markdown(blocks)
    return {**charts, REPORT_MD: markdown,
            REPORT_HTML: render_html(markdown, charts, title=_title(result, doc), lang=_lang(result))}


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

    def said(value: Any) -> str:
        """A probe's error or note, in the report's language where its words are known."""
        return note(value, lang) if isinstance(value, str) else cell(value)

    def word(kind: str, value: Any) -> str:
        """A word the facts keep in English (a placement, a tier, a finish reason) in the report's language."""
        return t(f"{kind}.{value}", lang) if value in WORDS[kind] else cell(value)

    rule_readings = {r.get("seq"): r for r in (result.get("readings") or []) if isinstance(r, Mapping)}

    def read_as(fact: Mapping) -> str:
        """The reading rule's note on ``fact`` in the report's language; "—" when none fired."""
        reading = rule_readings.get(fact.get("_seq"))
        if not reading:
            return "—"
        return str(reading.get("note_zh") if lang == "zh" and reading.get("note_zh") else reading.get("note"))

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
    why_not = (result.get("unverified_zh") if lang == "zh" else None) or result.get("unverified")
    if not doc.get("verified") and why_not:
        blocks.append(Para(t("report.unverified_why", lang, why=why_not)))

    diagnosis = doc.get("diagnosis") or result.get("diagnosis") or {}
    cause = diagnosis.get("cause")
    blocks.append(Heading(t("report.diagnosis", lang)))
    cause_text = t(f"report.cause_{cause}", lang) if cause else t("report.cause_unknown", lang)
    blocks.append(Para(t("report.cause", lang, cause=cause_text)))  # the key is oomvet.yaml's, for scripts
    if diagnosis.get("summary"):
        blocks.append(Para(str(diagnosis["summary"])))
    if diagnosis.get("reproduction"):
        blocks.append(Para(str(diagnosis["reproduction"])))
    if diagnosis.get("findings"):
        blocks.append(Items(tuple(str(f) for f in diagnosis["findings"])))
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

    alternatives = result.get("alternatives") or []
    if alternatives:
        blocks.append(Heading(t("report.alternatives", lang)))
        if diagnosis.get("choice"):
            blocks.append(Para(str(diagnosis["choice"])))
        blocks.append(Items(tuple(alternative_line(a, result.get("want_ctx"), lang) for a in alternatives)))

    steps = doc.get("steps") or result.get("steps") or []
    blocks.append(Heading(t("report.steps", lang)))
    if steps:
        rows = []
        for step in steps:
            what = word("probe.name", step.get("probe")) if step.get("probe") else step.get("knob") or ""
            if step.get("knob") is not None and ("from" in step or "to" in step):
                what = f"{word('knob.name', step.get('knob'))}: {cell(step.get('from'))} -> {cell(step.get('to'))}"
            effect = step.get("effect") or step.get("summary") or (
                t("chart.peak", lang, size=size(step["peak"])) if step.get("peak") is not None else "")
            rows.append((cell(step.get("n")), word("report.action", step.get("action")), what, said(effect),
                         cell(step.get("ok"))))
        blocks.append(Table(tuple(t(f"report.col_{c}", lang) for c in ("n", "action", "what", "effect", "ran")),
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
        why = evidence.get("limit_note_zh") if lang == "zh" and evidence.get("limit_note_zh") else evidence.get("limit_note")
        blocks.append(Para(t("report.limit", lang, limit=size(evidence["limit"]), note=f" ({why})" if why else "")))
    readings = evidence.get("readings") or {}
    if readings:
        rows = tuple((_label(f"report.reading_{k}", lang, str(k)), size(v)) for k, v in readings.items())
        blocks.append(Heading(t("report.readings", lang), 3))
        blocks.append(Table((t("report.col_name", lang), t("report.col_value", lang)), rows))
    stability = evidence.get("stability") or {}
    if stability:
        blocks.append(Heading(t("report.stability", lang), 3))
        blocks.append(Para(t("report.stab_line", lang, eval_count=cell(stability.get("eval_count")),
                             done_reason=word("rulebook.done", stability.get("done_reason")),
                             answered=cell(stability.get("answered")),
                             tokens=f"{cell(stability.get('prompt_tokens'))} / {cell(stability.get('task_tokens'))}",
                             repeated=cell(stability.get("repeat_share")),
                             errors=", ".join(said(e) for e in stability.get("errors") or []) or "—",
                             reading=read_as(stability))))
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
            title = chart_title(name, lang)
            blocks.append(Heading(title, 3))
            blocks.append(Chart(f"chart-{i:02d}-{_slug(name)}.png", chart_png(probe, lang), title, caption))
    else:
        blocks.append(Para(t("report.not_run", lang)))

    facts = [f for f in (result.get("facts") or []) if isinstance(f, Mapping)]

    def fact_table(kind: str, heading: str, columns: tuple, row: Callable[[Mapping], tuple],
                   when_none: bool = True) -> None:
        """A table of the facts of one kind; none: "not run", or no section at all."""
        rows = tuple(row(f) for f in facts if f.get("kind") == kind)
        if not rows and not when_none:
            return
        blocks.append(Heading(t(heading, lang)))
        blocks.append(Table(tuple(t(f"report.col_{c}", lang) for c in columns), rows) if rows
                      else Para(t("report.not_run", lang)))

    for held in (f for f in facts if f.get("kind") == "ledger"):
        blocks.append(Heading(t("ledger.title", lang, source=held.get("source") or "?")))
        blocks.append(Table((t("report.col_what", lang), t("report.col_memory", lang)), tuple(ledger_rows(held, lang))))
        left = others_note(held, lang)
        if left:
            blocks.append(Para(left))

    # what was measured, then the rules' reading of it: a fact holds no verdict
    fact_table("reproduction", "report.reproduction", ("num_ctx", "slots", "requests", "placement", "peak",
                                                       "reading", "error"),
               lambda f: (cell(f.get("num_ctx")), f"{cell(f.get('num_parallel'))} ({cell(f.get('parallel_from'))})",
                          cell(f.get("requests")), word("render.where", f.get("placement")), size(f.get("peak")), read_as(f),
                          said(f.get("error"))),
               when_none=False)
    fact_table("load", "report.loads", ("model", "options", "placement", "size", "used", "drift", "answered",
                                        "reading", "error"),
               lambda f: (cell(f.get("model")), cell(f.get("options")), word("render.where", f.get("placement")),
                          f"{size(f.get('size'))} / {size(f.get('size_vram'))}",
                          f"{size(f.get('used_after'))} / {size(f.get('used_settled'))}",
                          _per_min(f.get("drift_per_min")), cell(f.get("answered")), read_as(f), said(f.get("error"))),
               when_none=False)
    fact_table("tier", "report.tiers", ("tier", "num_ctx", "tokens", "peak", "answered", "reading", "error"),
               lambda f: (tier_word(f["name"], lang) if f.get("name") else cell(None), cell(f.get("num_ctx")),
                          f"{cell(f.get('prompt_tokens'))} / {cell(f.get('sent_tokens'))}", size(f.get("peak")),
                          cell(f.get("answered")), read_as(f), said(f.get("error"))))
    fact_table("quant_trial", "report.quant", ("tag", "level", "after_load", "peak", "answered", "reading"),
               lambda f: (cell(f.get("tag")), cell(f.get("level")), size(f.get("weights")), size(f.get("peak")),
                          cell(f.get("answered")), read_as(f)))
    fact_table("knob_trial", "report.knobs", ("knob", "change", "peak", "applied", "answered", "reading", "error"),
               lambda f: (cell(f.get("knob")), f"{cell(f.get('old'))} -> {cell(f.get('new'))}", size(f.get("peak")),
                          cell(f.get("applied", True)), cell(f.get("answered")), read_as(f), said(f.get("error"))))

    blocks.append(Heading(t("report.why", lang)))
    why = list(result.get("why") or [])
    if why:  # sentences, as the chat's /why says them: no rule names, no internal keys
        items: list[str] = []
        for line in why_lines(why, lang):  # the method's reason joins its step's item
            if line.startswith(" ") and items:
                items[-1] += " " + line.strip()
            else:
                items.append(line)
        blocks.append(Items(tuple(items)))
    else:
        blocks.append(Para(t("report.none", lang)))

    transcript = [m for m in (result.get("transcript") or []) if isinstance(m, Mapping)]
    if transcript:
        blocks.append(Heading(t("report.transcript", lang)))
        blocks.append(Quote(tuple(f"{word('report.role', m.get('role'))}: {m.get('content', '')}" for m in transcript)))
    return blocks


# ---------------------------------------------------------------- helpers

#: the words the facts and steps keep in English, each with its catalog key (``<kind>.<word>``)
WORDS = {"probe.name": PROBES, "knob.name": KNOBS,
         "report.action": ("probe", "ask", "change", "pick"), "render.where": ("gpu", "partial", "cpu"),
         "rulebook.done": DONE_REASONS, "report.role": ("user", "assistant")}


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


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "probe"


def _label(key: str, lang: str, default: str) -> str:
    try:
        return t(key, lang)
    except KeyError:  # a reading the catalog has no name for: show its key
        return default
