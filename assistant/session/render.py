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

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from common.catalog import get_lang, t
from probes.result import SIZE_KEYS, ProbeResult
from probes.units import fmt_size
from assistant.report.alternatives import alternative_line
from rules.facts import PROBES  # each with its name in the catalog (probe.name.<probe>)
from rules.rulebook import DONE_REASONS
from assistant.report.ledger import ledger_rows, others_note

COMPACT_BELOW = 100  # columns
KNOBS = ("max_context_len", "quant_type", "max_batch_size", "max_concurrency", "kv_cache")


#: the questions with a name for a person (``ui.field.<question>``)
FIELDS = ("model", "want_ctx", "want_parallel", "keep_context", "keep_concurrency", "budget")


def field_words(question: str, value: Any, lang: str | None = None) -> tuple[str, str]:
    """An answer as a person reads it: the question's name and the value in
    words (yes / no, a size), not a key and ``True``."""
    name = t(f"ui.field.{question}", lang) if question in FIELDS else question
    if value is None:
        return name, "—"
    if isinstance(value, bool):
        return name, t("ui.yes" if value else "ui.no", lang)
    return name, fmt_size(value) if question == "budget" and isinstance(value, int) else str(value)


def knob_name(knob: str | None) -> str:
    """A knob's name for a person: the key, with its meaning in Chinese."""
    return t(f"knob.name.{knob}") if knob in KNOBS else str(knob)


def probe_name(name: str) -> str:
    """A probe's name in the session's language ("reproduce" is "复现" in Chinese)."""
    return t(f"probe.name.{name}") if name in PROBES else name


_NOTES = [
    (re.compile(r"^not measured: (?P<why>.+)$"), "note.unmeasured"),
    (re.compile(r"^(?P<model>\S+) runs (?P<where>gpu|partial|cpu): Ollama put only part of it on the GPU$"),
     "note.placement"),
    (re.compile(r"^stopped at tier (?P<tier>\S+) \(num_ctx (?P<ctx>\d+)\): out of memory$"), "note.stopped_oom"),
    (re.compile(r"^(?P<what>.+?): not counted: (?P<why>.+)$"), "note.not_counted"),
    (re.compile(r"^(?P<what>.+?): measured again because (?P<why>.+)$"), "note.measured_again"),
    (re.compile(r"^the server runs with its own OLLAMA_NUM_PARALLEL; measured as it is$"), "note.own_parallel"),
    (re.compile(r"^spilled to the CPU: only (?P<vram>\S+ \S+) of (?P<size>\S+ \S+) on the GPU$"), "probe.spilled"),
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
        return t("render.steady") if value == 0 else t("render.per_min", size=fmt_size(value))
    if key == "idle" and value == 0:  # a process reader before the load: no model process to read yet
        return t("render.idle_zero")
    if key in SIZE_KEYS and isinstance(value, (int, float)):  # the probes' own list of byte columns
        return fmt_size(value)
    if key == "where" and value in ("gpu", "partial", "cpu"):
        return t(f"render.where.{value}")
    if key == "done" and value in DONE_REASONS:  # Ollama's finish reason, a word in the session's language
        return t(f"rulebook.done.{value}")
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


def note(text: str, lang: str | None = None) -> str:
    """A probe note in ``lang`` (the session's by default), as written when
    not known. A note read back from JSON (the journal, the report) is plain
    text; the ones the probes write are recognised by their English words."""
    key = getattr(text, "key", None)
    if key is not None:  # a probes.notes.Note: its values may be notes too
        return t(key, lang, **{k: note(v, lang) if isinstance(v, str) else v for k, v in text.values.items()})
    for rx, key in _NOTES:
        m = rx.match(text)
        if m:
            values = m.groupdict()
            if "where" in values:
                values["where"] = t(f"render.where.{values['where']}", lang)
            return t(key, lang, **values)
    return text


def probe_result(result, width: int, readings=(), auto: bool = False) -> RenderableType:
    """A probe result as a table (or, below 100 columns, one line per row),
    then how the rules read each measurement (``Advisor.readings()`` entries:
    the verdicts are theirs, the rows hold only what was measured)."""
    title = Text(t("render.title", name=probe_name(result.name), verdict=t("render.ok" if result.ok else "render.failed"),
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
    for reading in readings:
        parts.append(Text(t("render.reading", text=reading["note_zh" if get_lang() == "zh" else "note"]),
                          overflow="fold"))
    for fact in result.facts:
        if fact.get("others_moved"):
            moved = int(fact["others_moved"])
            parts.append(Text(t("render.others_moved", size=fmt_size(abs(moved)),
                                how=t("render.others_gained" if moved > 0 else "render.others_gave_back")),
                              overflow="fold"))
        if fact.get("kind") == "ledger":
            parts.append(ledger_table(fact))
            left = others_note(fact, auto=auto)
            if left:
                parts.append(Text(left, overflow="fold"))
    if result.error:
        parts.append(Text(t("render.error", text=note(result.error)), style="red"))
    for text in result.notes:
        parts.append(Text(t("render.note", text=note(text))))
    return Group(*parts)


def ledger_table(fact: dict) -> RenderableType:
    table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 1),
                  title=t("ledger.title", source=fact.get("source") or "?"), title_justify="left")
    table.add_column(style="dim", overflow="fold")
    table.add_column(justify="right")
    for what, n in ledger_rows(fact):
        table.add_row(what, n)
    return table


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


def show_probe(console: Console, result: ProbeResult, session=None, readings=(), auto: bool = False) -> None:
    """The probe's result in the session's language, the rules' reading of each
    of its measurements, then the server's state in one line. ``auto``: no one
    is asked (``--auto``, ``diagnose``)."""
    console.print(probe_result(result, console.width, readings, auto=auto))
    api = getattr(getattr(getattr(session, "world", None), "env", None), "api", None)
    if api is not None:
        try:
            line = ps_line(api.ps())
        except Exception as exc:  # noqa: BLE001 - a summary line; the session goes on
            line = t("ps.failed", error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        console.print(Text(line, style="dim"))


def show_done(console: Console, result: dict) -> None:
    diagnosis = result.get("diagnosis") or {}
    stopped = diagnosis.get("advice_key") in ("broken_off", "user_stopped")  # the rules' two ends of a stop
    console.print(Text(diagnosis.get("summary") or t(f"ui.cause.{diagnosis.get('cause')}"), style="bold"))
    if diagnosis.get("reproduction"):
        console.print(Text(diagnosis["reproduction"]))
    for finding in diagnosis.get("findings") or []:
        console.print(Text(f"• {finding}"))
    config = result.get("config")
    if config:
        console.print(t("ui.config", model=config.get("model"), ctx=config.get("max_context_len"),
                        batch=config.get("max_batch_size"), par=config.get("max_concurrency"),
                        quant=config.get("quant_type"), kv=config.get("kv_cache"),
                        verified=t("ui.verified") if result.get("verified") else t("ui.not_verified")),
                      highlight=False, markup=False)
        if diagnosis.get("choice"):
            console.print(Text(diagnosis["choice"]))
        for alt in result.get("alternatives") or []:
            console.print(Text(alternative_line(alt, result.get("want_ctx"))))
    elif stopped:  # stopped before a config was measured: no verdict
        console.print(t("ui.nothing_yet"))
    else:
        console.print(t("ui.nothing_fits"))
    if stopped and result.get("stopped_probe"):  # the user's stop, in words
        console.print(Text(t("ui.stopped_why", why=t("ui.stopped_user", probe=probe_name(result["stopped_probe"])))))
    elif stopped and result.get("unverified"):
        why = result.get("unverified_zh") if get_lang() == "zh" and result.get("unverified_zh") else result["unverified"]
        console.print(Text(t("ui.stopped_why", why=why)))
    advice = (result.get("diagnosis") or {}).get("advice")
    if advice:
        console.print(t("ui.advice", advice=advice), highlight=False, markup=False)
