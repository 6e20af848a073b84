"""``oomvet sessions``, ``oomvet resume ID``, ``oomvet report ID``: the journal, for people.

A diagnosis is journalled as it goes (:mod:`assistant.journal.store`). These
commands list what is there, run a cut session on from its last complete
fact, and write a finished session's config, files and report again from the
journal alone, with no server.
"""
from __future__ import annotations

import argparse
import json
import sys

from rich import box
from rich.console import Console
from rich.table import Table

from common.catalog import t
from common.errors import ExitCode, UsageError
from assistant.commands import chat, diagnose
from assistant.journal.store import Journal


COLUMNS = ("id", "started", "model", "server", "cause", "verified", "state")
#: the table's (the server is in --json: beside the rest it does not fit 80 columns)
SHOWN = ("id", "started", "model", "cause", "state")
CAUSES = ("weights", "kv_cache", "not_released", "concurrency", "not_memory")
STATES = ("running", "stopped", "interrupted", "failed", "cut")


def add_parser(sub) -> None:
    p = sub.add_parser("sessions", help="list the journalled sessions, newest first",
                       description="List the sessions in the journal (the user state folder, or $OOMVET_STATE_DIR).")
    p.add_argument("--json", action="store_true", help='print {"sessions": [...]} on stdout')
    p.set_defaults(run=run_sessions)
    p = sub.add_parser("resume", help="go on with a cut or stopped session from its last complete fact",
                       description="Replay a session's journalled facts and continue where it stopped; "
                                   "a probe cut in the middle (or stopped with Ctrl-C) runs again. "
                                   "A chat goes on as a chat.")
    p.add_argument("id", metavar="ID", help="a session id from oomvet sessions")
    p.set_defaults(run=run_resume)
    p = sub.add_parser("report", help="write a finished session's config, files and report again (no server)",
                       description="Re-render the config, the ready-to-apply files and the report from the journal.")
    p.add_argument("id", metavar="ID", help="a session id from oomvet sessions")
    p.add_argument("--out", help="folder to write to (default: the session's own --out)")
    p.set_defaults(run=run_report)


def run_sessions(args) -> int:
    with Journal() as journal:
        rows = journal.sessions()
        path = journal.path
    if args.json:
        sys.stdout.write(json.dumps({"sessions": rows}, ensure_ascii=False) + "\n")
        return ExitCode.OK
    console = Console()
    if not rows:
        console.print(t("sessions.none", path=path), markup=False, highlight=False)
        return ExitCode.OK
    # the id is what `oomvet resume` takes: never cut, even at 80 columns; the rest folds
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for c in SHOWN:
        table.add_column(t(f"sessions.col.{c}"), no_wrap=c in ("id", "started"), overflow="fold",
                         min_width=16 if c == "model" else None)
    for row in rows:
        table.add_row(*(_cell(c, row[c], row) for c in SHOWN))
    console.print(table)
    return ExitCode.OK


def _cell(column: str, value, row: dict) -> str:
    if column == "state" and value == "finished":  # finished says whether its config was verified
        return t("sessions.state.verified" if row.get("verified") else "sessions.state.unverified")
    if value is None:
        return "—"
    if column == "started":  # 2026-12-05T15:26:51.116525Z -> 12-05 15:26 (UTC)
        return str(value)[5:16].replace("T", " ")
    if column == "state":
        return t(f"sessions.state.{value}") if value in STATES else str(value)
    if column == "cause":
        return t(f"sessions.cause.{value}") if value in CAUSES else str(value)
    return str(value)


def _parser(command: str) -> argparse.ArgumentParser:
    """The parser of the command a resume runs again (the whole CLI's would
    make this module import the CLI that imports it)."""
    parser = argparse.ArgumentParser(prog="oomvet")
    {"diagnose": diagnose, "chat": chat}[command].add_parser(parser.add_subparsers(dest="command"))
    return parser


def run_resume(args) -> int:
    with Journal() as journal:
        log = journal.session(args.id)
        info = log.info
        if log.result is not None and log.state != "stopped":
            print("oomvet: " + t("journal.finished", sid=log.id), file=sys.stderr)
            return ExitCode.USAGE
        argv, command = info.get("argv"), info.get("command")
        if command not in ("diagnose", "chat") or not argv:
            raise UsageError(t("journal.cannot_resume", sid=log.id, command=command or "?"))
        again = _parser(command).parse_args(argv)
        run = diagnose.run if command == "diagnose" else chat.run
        return int(run(again, resume_log=log) or 0)


def run_report(args) -> int:
    from assistant.files.deliver import deliver

    with Journal() as journal:
        log = journal.session(args.id)
        result, out = log.result, args.out or log.info.get("out") or "oomvet-out"
    if result is None:
        raise UsageError(t("sessions.unfinished", sid=args.id))
    _, paths = deliver(out, result)
    print(t("sessions.wrote", n=len(paths), out=out, names=", ".join(p.name for p in paths)), file=sys.stderr)
    return ExitCode.OK
