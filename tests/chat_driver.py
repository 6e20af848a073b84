"""Driving the chat as a person would: lines in from a stream, the screen
captured from a rich console writing to a string."""
from __future__ import annotations

import io

from rich.console import Console

from assistant.commands import chat as cmd_chat
from assistant.cli import build_parser
from common.catalog import set_lang


def run_chat(argv: list[str], lines: list[str], width: int = 110) -> tuple[int, str]:
    set_lang(None)
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    stream = io.StringIO("".join(f"{line}\n" for line in lines))
    parser = build_parser()
    parser.set_defaults(argv=["chat", *argv])  # as the CLI does: journalled, so `oomvet resume` can go on
    args = parser.parse_args(["chat", *argv])
    try:
        rc = cmd_chat.run(args, console=console, stream=stream)
    finally:
        set_lang(None)
    return rc, console.file.getvalue()
