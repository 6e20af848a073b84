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

from rich.console import Console
from rich.table import Table

from common.catalog import t
from common.errors import ExitCode, UsageError
from assistant.commands import diagnose
from assistant.journal.store import Journal


COLUMNS = ("id", "started", "model", "server", "cause", "verified", "state")


def add_parser(sub) -> None:
    p = sub.add_parser("sessions", help="list the journalled sessions, newest first",
                       description="List the sessions in the journal (the user state folder, or $OOMVET_STATE_DIR).")
    p.add_argument("--json", action="store_true", help='print {"sessions": [...]} on stdout')
    p.set_defaults(run=run_sessions)
    p = sub.add_parser("resume", help="run a cut session on from its last complete fact",
                       description="Replay a session's journalled facts and continue where it stopped; "
                                   "a probe cut in the middle runs again.")
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
    table = Table(*COLUMNS)
    for row in rows:
        table.add_row(*("—" if row[c] is None else ("yes" if row[c] is True else "no" if row[c] is False
                                                     else str(row[c])) for c in COLUMNS))
    console.print(table)
    return ExitCode.OK


def _diagnose_parser() -> argparse.ArgumentParser:
    """The parser of the one command a resume can run again (the whole CLI's
    would make this module import the CLI that imports it)."""
    parser = argparse.ArgumentParser(prog="oomvet")
    diagnose.add_parser(parser.add_subparsers(dest="command"))
    return parser


def run_resume(args) -> int:
    with Journal() as journal:
        log = journal.session(args.id)
        info = log.info
        if log.result is not None:
            print("oomvet: " + t("journal.finished", sid=log.id), file=sys.stderr)
            return ExitCode.USAGE
        argv = info.get("argv")
        if info.get("command") != "diagnose" or not argv:
            raise UsageError(t("journal.cannot_resume", sid=log.id, command=info.get("command") or "?"))
        again = _diagnose_parser().parse_args(argv)
        return int(diagnose.run(again, resume_log=log) or 0)


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
