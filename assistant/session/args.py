"""The flags the commands that run a whole session share (``chat`` and
``diagnose``), read once into :class:`SessionOptions`, and how long a probe
watches memory after a load, so each means the same in every command that
measures.

The options are built from the parsed flags once and passed down; nothing is
written back onto the argparse namespace. A budget the user's words give
joins them as a new value (:meth:`SessionOptions.with_words`), typed like
``--budget`` and saying where it came from.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import Any

from assistant.session.world import WorldOptions, add_world_args
from probes.baseline import DEFAULT_SETTLE_S
from probes.budget import MESSAGE, Budget
from probes.units import fmt_size

#: seconds to watch memory after a load on a real server (it may still be allocating)
SETTLE_S = DEFAULT_SETTLE_S
#: the same on the rig, which settles at once
SETTLE_S_STANDIN = 5.0
#: the simulator: its idle creep is a rate per minute of its clock, so a short
#: window reads the same drift per minute as a long one, without the wait
SETTLE_S_SIMULATED = 1.0


def add_session_args(p: argparse.ArgumentParser, *, auto: str, out: str, lang: str | None = None,
                     auto_default: bool = False) -> None:
    """Where the server is (the world's flags), ``--auto``, ``--lang``, ``--out`` and ``--settle``."""
    add_world_args(p)
    p.add_argument("--auto", action="store_true", default=auto_default, help=auto)
    p.add_argument("--lang", choices=("en", "zh"), help=lang)
    p.add_argument("--out", default="oomvet-out", help=out)
    p.add_argument("--settle", type=float, default=None,
                   help=f"seconds to watch memory after load (default {SETTLE_S:g}; {SETTLE_S_STANDIN:g} on the rig, "
                        f"{SETTLE_S_SIMULATED:g} on the simulator)")


@dataclass(frozen=True)
class SessionOptions:
    """What one ``chat`` or ``diagnose`` session runs with."""

    world: WorldOptions
    out: str
    settle: float | None = None                          # --settle; None: the default for the world in hand
    answers: dict[str, Any] = field(default_factory=dict)  # the answers file, checked (its budget a Budget)
    command: str | None = None
    argv: tuple[str, ...] | None = None                  # journalled, so `oomvet resume` can run it again
    resume_log: Any = None                               # the journal's SessionLog of a resumed session

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, answers: dict | None = None,
                  resume_log: Any = None) -> SessionOptions:
        """The options of parsed flags; ``--budget`` wins over the answers
        file's budget. ``argv`` is the CLI's (absent when a test or a resume
        parses the flags itself)."""
        answers = dict(answers or {})
        world = WorldOptions.from_args(args)
        if world.budget is None and answers.get("budget") is not None:
            world = replace(world, budget=answers["budget"])
        argv = getattr(args, "argv", None)
        return cls(world=world, out=args.out, settle=args.settle, answers=answers, command=args.command,
                   argv=None if argv is None else tuple(argv), resume_log=resume_log)

    @property
    def budget(self) -> Budget | None:
        return self.world.budget

    def with_words(self, intake) -> SessionOptions:
        """These options with the budget the user's words gave (``intake``:
        an :class:`assistant.intake.Intake`) when no other was given: the limit
        of every measurement, so the probes, the charts, the config and the
        rules all hold to the same figure."""
        budget = self.budget or words_budget(intake)
        return self if budget is self.budget else replace(self, world=replace(self.world, budget=budget))

    def settle_for(self, world) -> float:
        return settle_s(self.settle, world)


def words_budget(intake) -> Budget | None:
    """The budget an intake read from the user's words, or None."""
    if intake.budget:
        return Budget(int(intake.budget), None, fmt_size(intake.budget), MESSAGE)
    if intake.budget_share:
        return Budget(None, intake.budget_share, f"{intake.budget_share * 100:g}%", MESSAGE)
    return None


def settle_s(settle: float | None, world) -> float:
    """``--settle`` when given, else the default for the server in hand."""
    if settle is not None:
        return settle
    return {"ollama": SETTLE_S, "simulated": SETTLE_S_SIMULATED}.get(world.kind, SETTLE_S_STANDIN)
