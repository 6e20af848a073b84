"""``oomvet devices``: which memory sources work here, which one oomvet
trusts and why, the device, a reading now, the limit that applies, and
Ollama's own estimate beside it.

The report is built once as a plain dict (what ``--json`` prints) and the
terminal view is a pure function of it, so both say the same thing.
"""
from __future__ import annotations

import io
import json
import sys

from rich.console import Console
from rich.table import Table

from assistant.i18n import catalog, get_lang, set_lang, t
from probes.budget import parse_budget, resolve_limit
from probes.errors import ProbeError, ServerUnreachableError
from assistant.world import add_world_args, host_from, open_world
from probes.memory import SOURCE_ORDER, fetch_ps, ollama_estimate, select_reader
from probes.memory.ollama_ps import LABEL
from probes.units import fmt_size

#: the label of /api/ps sizes on a server that measures them (llama-server
#: sums its allocated buffers); still the server's figure, not oomvet's reading
MEASURED_LABEL = "the server's own measurement"


MSG = catalog({
    "cmd_devices.help": {
        "en": "memory sources found, and which one is used and why",
        "zh": "列出找到的内存读数来源，以及使用哪一个、为什么",
    },
    "cmd_devices.title": {"en": "Memory sources, tried in this order", "zh": "内存读数来源（按此顺序尝试）"},
    "cmd_devices.col_source": {"en": "source", "zh": "来源"},
    "cmd_devices.col_usable": {"en": "usable", "zh": "可用"},
    "cmd_devices.col_why": {"en": "details", "zh": "说明"},
    "cmd_devices.yes": {"en": "yes", "zh": "是"},
    "cmd_devices.no": {"en": "no", "zh": "否"},
    "cmd_devices.in_use": {"en": "yes, in use", "zh": "是，正在使用"},
    "cmd_devices.why.first-usable": {
        "en": "Using {name}: the first usable source in the order {order}.",
        "zh": "使用 {name}：按 {order} 的顺序，它是第一个可用的来源。",
    },
    "cmd_devices.why.forced": {
        "en": "Using {name}: chosen with --memory-source.",
        "zh": "使用 {name}：由 --memory-source 指定。",
    },
    "cmd_devices.why.host-fallback": {
        "en": "Using host: no GPU source is usable, so the Ollama runner's resident memory is "
              "the model's memory (on CPU).",
        "zh": "使用 host：没有可用的 GPU 来源，因此 Ollama runner 进程的常驻内存就是模型占用的内存（CPU 上）。",
    },
    "cmd_devices.why.unified": {
        "en": "Using host: unified memory, system and GPU share one pool; the Ollama runner's "
              "resident memory is the model's memory.",
        "zh": "使用 host：统一内存，系统与 GPU 共用同一内存池；Ollama runner 进程的常驻内存就是模型占用的内存。",
    },
    "cmd_devices.device": {"en": "Device: {name} ({vendor}), total {total}",
                           "zh": "设备：{name}（{vendor}），总量 {total}"},
    "cmd_devices.unified": {"en": ", unified memory", "zh": "，统一内存"},
    "cmd_devices.reading": {"en": "Now: used {used}, free {free} of {total}",
                            "zh": "当前：已用 {used}，空闲 {free}，共 {total}"},
    "cmd_devices.reading_host": {
        "en": "Now: Ollama runners hold {used}; the system has {free} available of {total}",
        "zh": "当前：Ollama runner 占用 {used}；系统可用 {free}，共 {total}",
    },
    "cmd_devices.processes": {"en": "Processes:", "zh": "进程："},
    "cmd_devices.process": {"en": "  pid {pid} {name}: {used}", "zh": "  进程 {pid} {name}：{used}"},
    "cmd_devices.no_processes": {"en": "No processes hold device memory.",
                                 "zh": "没有进程占用设备内存。"},
    "cmd_devices.no_runner": {"en": "No Ollama runner is running (load a model to see its memory).",
                              "zh": "没有正在运行的 Ollama runner（加载模型后可看到其内存）。"},
    "cmd_devices.limit": {"en": "Limit: {note}", "zh": "上限：{note}"},
    "cmd_devices.limit_unknown": {"en": "Limit: unknown: {reason}", "zh": "上限：未知：{reason}"},
    "cmd_devices.ollama": {
        "en": "Ollama's estimate from /api/ps at {host} (not a measurement):",
        "zh": "Ollama 的估算值（来自 {host} 的 /api/ps，不是实测）：",
    },
    "cmd_devices.ollama_measured": {
        "en": "What the server measured, from /api/ps at {host} (its buffer totals, not oomvet's reading):",
        "zh": "服务器自己的实测值（来自 {host} 的 /api/ps，是其缓冲区合计，不是 oomvet 的读数）：",
    },
    "cmd_devices.server": {
        "en": "Server: Ollama {version}, engine {engine}; /api/ps sizes are {sizes}",
        "zh": "服务器：Ollama {version}，引擎 {engine}；/api/ps 的大小是{sizes}",
    },
    "cmd_devices.sizes.measured": {"en": "measurements", "zh": "实测值"},
    "cmd_devices.sizes.estimate": {"en": "estimates", "zh": "估算值"},
    "cmd_devices.sizes.None": {"en": "of unknown kind", "zh": "未知类型"},
    "cmd_devices.unknown": {"en": "unknown", "zh": "未知"},
    "cmd_devices.ollama_model": {
        "en": "  {name}: size {size}, on GPU {vram} ({placement}), context {ctx}",
        "zh": "  {name}：大小 {size}，GPU 上 {vram}（{placement}），上下文 {ctx}",
    },
    "cmd_devices.ollama_none": {"en": "  no model loaded", "zh": "  没有已加载的模型"},
    "cmd_devices.ollama_unreachable": {
        "en": "Ollama's estimate: the server at {host} did not answer.",
        "zh": "Ollama 的估算值：{host} 上的服务没有响应。",
    },
    "cmd_devices.placement.gpu": {"en": "all on GPU", "zh": "全部在 GPU"},
    "cmd_devices.placement.partial": {"en": "partly on CPU", "zh": "部分在 CPU"},
    "cmd_devices.placement.cpu": {"en": "all on CPU", "zh": "全部在 CPU"},
    "cmd_devices.placement.None": {"en": "n/a", "zh": "未知"},
})


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("devices", help=MSG["cmd_devices.help"]["en"],
                              description=MSG["cmd_devices.help"]["en"] + " / "
                              + MSG["cmd_devices.help"]["zh"])
    add_world_args(p)  # --host / --rig / --simulate, --budget, --memory-source: the same world as diagnose
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--lang", choices=("en", "zh"), default=None)
    p.set_defaults(run=run)


def run(args) -> int:
    if getattr(args, "lang", None):
        set_lang(args.lang)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731  (the rig's progress; stdout stays JSON)
    try:
        report = _world_report(args, log)
    except ServerUnreachableError:
        if args.rig or args.simulate:
            raise
        report = _local_report(args)  # no server: what this machine has is still worth showing
    if args.json:
        sys.stdout.write(json.dumps(report, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render(report, get_lang()))
    return 0


def _world_report(args, log) -> dict:
    """The memory source, limit and server exactly as a diagnosis would see them."""
    with open_world(args, log=log) as world:
        ps = fetch_ps(world.host)
        return build_report(world.selection, budget=world.budget, limit=world.limit, ps_models=ps,
                            ollama_host=world.host, server=world.server_fact)


def _local_report(args) -> dict:
    budget = parse_budget(args.budget) if args.budget is not None else None
    selection = select_reader(args.memory_source)
    try:
        return build_report(selection, budget=budget, ps_models=None, ollama_host=host_from(args))
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


__all__ = ["add_parser", "run", "build_report", "render"]
