"""The flags the commands that run a whole session share (``chat`` and
``diagnose``), and how long a probe watches memory after a load, so each
means the same in every command that measures.
"""
from __future__ import annotations

import argparse

from assistant.session.world import add_world_args
from probes.baseline import DEFAULT_SETTLE_S

#: seconds to watch memory after a load on a real server (it may still be allocating)
SETTLE_S = DEFAULT_SETTLE_S
#: the same on the rig or the simulator, which settle at once
SETTLE_S_STANDIN = 5.0


def add_session_args(p: argparse.ArgumentParser, *, auto: str, out: str, lang: str | None = None,
                     auto_default: bool = False) -> None:
    """Where the server is (the world's flags), ``--auto``, ``--lang``, ``--out`` and ``--settle``."""
    add_world_args(p)
    p.add_argument("--auto", action="store_true", default=auto_default, help=auto)
    p.add_argument("--lang", choices=("en", "zh"), help=lang)
    p.add_argument("--out", default="oomvet-out", help=out)
    p.add_argument("--settle", type=float, default=None,
                   help=f"seconds to watch memory after load (default {SETTLE_S:g}; {SETTLE_S_STANDIN:g} on the rig or the simulator)")


def budget_from_words(args: argparse.Namespace, intake) -> None:
    """A budget the user's first words gave (``intake``: an
    :class:`assistant.intake.Intake`) becomes the limit of every measurement, as
    ``--budget`` would; a ``--budget`` already given wins. Both commands set it
    before the world resolves its limit, so the probes, the charts, the config
    and the rules all hold to the same figure."""
    if args.budget:
        return
    if intake.budget:
        args.budget = str(intake.budget)
    elif intake.budget_share:
        args.budget = f"{intake.budget_share * 100:g}%"  # resolved against the device by the world


def settle_s(args: argparse.Namespace, world) -> float:
    """``--settle``, else the default for the server in hand."""
    if args.settle is not None:
        return args.settle
    return SETTLE_S_STANDIN if world.kind != "ollama" else SETTLE_S
