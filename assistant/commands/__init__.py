"""One module per subcommand, each with ``add_parser(subparsers)`` and
``run(args) -> int``.

:data:`COMMANDS` lists them in ``--help`` order and is the only registry:
:mod:`assistant.cli` wires exactly these, so an import graph shows every
command and a missing module fails at import, not as a silent gap in --help.
"""
from __future__ import annotations

from assistant.commands import (apply, chat, check, devices, diagnose, intake, plan, probe, sessions,
                                simulate)

# order = order in --help; sessions also registers resume and report
COMMANDS = (chat, diagnose, probe, intake, devices, plan, check, apply, simulate, sessions)
