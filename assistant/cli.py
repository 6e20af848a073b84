"""The command line: parse, hand off, turn our errors into one line and an exit code.

Each subcommand lives in its own module under :mod:`assistant.commands`,
exposing ``add_parser(subparsers)`` and ``run(args) -> int``; this module only
wires them. No diagnosis logic here.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from assistant import __version__
from assistant.commands import COMMANDS
from common.catalog import pair
from common.errors import ExitCode, UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oomvet",
        description="\n".join(pair("cli.description")),
        epilog=f"With no command, starts the chat. Exit codes: {ExitCode.OK:d} verified config, "
               f"{ExitCode.NO_FIT:d} no config fits, {ExitCode.USAGE:d} bad usage or input, "
               f"{ExitCode.UNREACHABLE:d} server unreachable.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"oomvet {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def _terminate(signum, frame):
    # a plain kill must unwind like Ctrl-C: probes restore the server, the rig
    # or simulator oomvet started is stopped, and no partial file is left
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    parser = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["chat", *argv]
    parser.set_defaults(argv=argv)  # journalled, so `oomvet resume` can run the same command again
    try:
        # argparse exits 2 with one usage line on bad flags; a flag's own type
        # (--budget) raises our UsageError, shown below as one line
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return ExitCode.USAGE
        return int(args.run(args) or ExitCode.OK)
    except UserError as exc:  # every room's, the rules' RulesUnavailable included
        if os.environ.get("OOMVET_RAISE"):  # tests: see the real exception
            raise
        print(f"oomvet: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("oomvet: " + " / ".join(pair("cli.interrupted")), file=sys.stderr)
        return ExitCode.INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
