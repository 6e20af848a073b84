"""``oomvet devices``: which memory sources work here, which one oomvet
trusts and why, the device, a reading now, each device read apart (every
visible GPU or MIG instance, or the host), the limit that applies, and
Ollama's own estimate beside it.

The report is built once as a plain dict (what ``--json`` prints) and the
terminal view is a pure function of it, so both say the same thing; the
terminal view is drawn at the terminal's width (80 to 100 columns) and wraps
long names rather than cutting them.
"""
from __future__ import annotations

import io
import json
import shutil
import sys

from rich.console import Console
from rich.table import Table

from common.catalog import get_lang, pair, set_lang, t
from common.errors import ExitCode, ProbeError, ServerUnreachable

from probes.budget import resolve_limit
from assistant.session.world import WorldOptions, add_world_args, host_from, open_world
from probes.memory import SOURCE_ORDER, devices_of, fetch_ps, ollama_estimate, select_reader
from probes.memory.ollama_ps import LABEL
from probes.units import fmt_size

#: the label of /api/ps sizes on a server that measures them (llama-server
#: sums its allocated buffers); still the server's figure, not oomvet's reading
MEASURED_LABEL = "the server's own measurement"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("devices", help=t("cmd_devices.help", "en"),
                              description=" / ".join(pair("cmd_devices.help")))
    add_world_args(p)  # --host / --rig / --simulate, --budget, --memory-source: the same world as diagnose
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--lang", choices=("en", "zh"), default=None)
    p.set_defaults(run=run)


def run(args) -> int:
    if getattr(args, "lang", None):
        set_lang(args.lang)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731  (the rig's progress; stdout stays JSON)
    options = WorldOptions.from_args(args)
    try:
        report = _world_report(options, log)
    except ServerUnreachable:
        if options.rig or options.simulate:
            raise
        report = _local_report(options)  # no server: what this machine has is still worth showing
    if args.json:
        sys.stdout.write(json.dumps(report, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render(report, get_lang(), width=_width()))
    return ExitCode.OK


def _world_report(options: WorldOptions, log) -> dict:
    """The memory source, limit and server exactly as a diagnosis would see them."""
    with open_world(options, log=log) as world:
        ps = fetch_ps(world.host)
        return build_report(world.selection, budget=world.budget, limit=world.limit, ps_models=ps,
                            ollama_host=world.host, server=world.server_fact)


def _local_report(options: WorldOptions) -> dict:
    selection = select_reader(options.memory_source)
    try:
        return build_report(selection, budget=options.budget, ps_models=None, ollama_host=host_from(options))
    finally:
        selection.reader.close()


def build_report(selection, *, budget=None, limit=None, ps_models=None, ollama_host: str = "",
                 server: dict | None = None) -> dict:
    """Everything ``devices`` shows, as plain JSON-able data. ``ps_models``
    None means the Ollama server did not answer; ``limit`` one already
    resolved (else it is resolved here from ``budget``); ``server`` the
    ``server`` fact (probes/serverinfo.py), which says whether /api/ps sizes
    are that server's estimate or its own measurement."""
    reader = selection.reader
    info = reader.info()
    reading = reader.read()
    report = selection.to_dict()
    report["device"] = info.to_dict()
    report["reading"] = reading.to_dict()
    report["processes"] = [p.to_dict() for p in reader.processes()]
    report["per_device"] = callable(getattr(reader, "devices", None))
    report["devices"] = [d.to_dict() for d in devices_of(reader)]
    try:
        limit = limit if limit is not None else resolve_limit(budget, info, reading)
        report["limit"] = limit.to_dict()
    except ProbeError as exc:
        report["limit"] = {"bytes": None, "source": None, "note": str(exc), "note_zh": str(exc),
                           "error": True}
    report["budget"] = None if budget is None else budget.text
    report["server"] = server
    sizes = (server or {}).get("sizes")
    models = [e.to_dict() for e in ollama_estimate(ps_models or [])]
    label = MEASURED_LABEL if sizes == "measured" else LABEL
    for m in models:
        m["label"] = label
    report["ollama"] = {"host": ollama_host, "reachable": ps_models is not None, "sizes": sizes,
                        "label": label, "models": models}
    return report


def render(report: dict, lang: str | None = None, width: int = 100) -> str:
    """The terminal view of a report; pure, so tests read it as text."""
    lang = lang or get_lang()
    buf = io.StringIO()
    console = Console(file=buf, width=width, highlight=False, markup=False, emoji=False,
                      force_terminal=False, color_system=None)
    table = Table(title=t("cmd_devices.title", lang), title_justify="left")
    for col in ("cmd_devices.col_source", "cmd_devices.col_usable", "cmd_devices.col_why"):
        table.add_column(t(col, lang))
    for s in report["sources"]:
        usable = ("cmd_devices.in_use" if s["selected"] else
                  "cmd_devices.yes" if s["usable"] else "cmd_devices.no")
        table.add_row(s["name"], t(usable, lang), s["reason"])
    console.print(table)

    name = report["selected"]
    console.print(t(f"cmd_devices.why.{report['why_code']}", lang, name=name,
                    order=" > ".join(SOURCE_ORDER)))
    dev = report["device"]
    line = t("cmd_devices.device", lang, name=dev["name"], vendor=dev["vendor"],
             total=fmt_size(dev["total_bytes"]))
    console.print(line + (t("cmd_devices.unified", lang) if dev["unified"] else ""))
    r = report["reading"]
    key = "cmd_devices.reading_host" if name == "host" else "cmd_devices.reading"
    console.print(t(key, lang, used=fmt_size(r["used_bytes"]), free=fmt_size(r["free_bytes"]),
                    total=fmt_size(r["total_bytes"])))
    _render_devices(console, report, lang)
    if report["processes"]:
        console.print(t("cmd_devices.processes", lang))
        for p in report["processes"]:
            console.print(t("cmd_devices.process", lang, pid=p["pid"], name=p["name"],
                            used=fmt_size(p["used_bytes"])))
    else:
        console.print(t("cmd_devices.no_runner" if name == "host" else "cmd_devices.no_processes", lang))

    limit = report["limit"]
    if limit.get("error"):
        console.print(t("cmd_devices.limit_unknown", lang, reason=limit["note"]))
    else:
        note = limit["note_zh"] if lang == "zh" and limit.get("note_zh") else limit["note"]
        console.print(t("cmd_devices.limit", lang, note=note))

    server = report.get("server")
    if server:
        unknown = t("cmd_devices.unknown", lang)
        console.print(t("cmd_devices.server", lang, version=server.get("version") or unknown,
                        engine=server.get("engine") or unknown,
                        sizes=t(f"cmd_devices.sizes.{server.get('sizes')}", lang)))
    ollama = report["ollama"]
    if not ollama["reachable"]:
        console.print(t("cmd_devices.ollama_unreachable", lang, host=ollama["host"]))
    else:
        head = "cmd_devices.ollama_measured" if ollama.get("sizes") == "measured" else "cmd_devices.ollama"
        console.print(t(head, lang, host=ollama["host"]))
        if not ollama["models"]:
            console.print(t("cmd_devices.ollama_none", lang))
        for m in ollama["models"]:
            console.print(t("cmd_devices.ollama_model", lang, name=m["name"],
                            size=fmt_size(m["size_bytes"]), vram=fmt_size(m["size_vram_bytes"]),
                            placement=t(f"cmd_devices.placement.{m['placement']}", lang),
                            ctx=m["context_length"] if m["context_length"] is not None else "n/a"))
    return buf.getvalue()


def _render_devices(console: Console, report: dict, lang: str) -> None:
    """One row per device; sizes never wrap, a long name folds onto a second line."""
    source = report["selected"]
    if not report.get("devices"):
        key = "devices_per_gpu.none_visible" if report.get("per_device") else "devices_per_gpu.none"
        console.print(t(key, lang, source=source))
        return
    table = Table(title=t("devices_per_gpu.title", lang, source=source), title_justify="left")
    table.add_column(t("devices_per_gpu.col_index", lang), no_wrap=True)
    table.add_column(t("devices_per_gpu.col_name", lang), overflow="fold")
    for col in ("devices_per_gpu.col_total", "devices_per_gpu.col_used", "devices_per_gpu.col_free"):
        table.add_column(t(col, lang), justify="right", no_wrap=True)
    for d in report["devices"]:
        table.add_row(d["label"], d["name"], fmt_size(d["total_bytes"]), fmt_size(d["used_bytes"]),
                      fmt_size(d["free_bytes"]))
    console.print(table)
    mig = next((d for d in report["devices"] if d["mig_parent"] is not None), None)
    if mig is not None:
        console.print(t("devices_per_gpu.mig_note", lang, label=mig["label"], index=mig["index"],
                        parent=mig["mig_parent"]))


def _width() -> int:
    """The terminal's columns, held to 80..100 (a pipe reads as 100, as before)."""
    return max(80, min(shutil.get_terminal_size((100, 24)).columns, 100))


__all__ = ["add_parser", "run", "build_report", "render"]
