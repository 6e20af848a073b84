"""``oomvet intake "TEXT"``: show the facts the assistant reads from one message.

A window onto :mod:`assistant.intake` for users and scripts: ``--json``
prints exactly one JSON object (``{"facts": [...], "lang": ..., ...}``) on
stdout; without it, a short summary in the message's language (or
``--lang``). ``--llm MODEL`` adds a chat model's reading where the parser
found nothing or read from weak evidence, and ``--json`` says which reading
won each field; if that model cannot be reached, one line says why, the
parser's facts stand and the command still succeeds. Empty text is fine: phase ``unknown``, exit 0.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

from common.catalog import LANGS, get_lang, t
from common.errors import ExitCode, UsageError
from assistant.intake import Intake, confidence, has_words, parse, phase_text
from probes.server import DEFAULT_HOST
from probes.units import fmt_size


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("intake", help=t("cmd_intake.help", "en") + " / " + t("cmd_intake.help", "zh"))
    p.add_argument("text", nargs="*", metavar="TEXT", help='the message; "-" reads it from standard input')
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout and nothing else")
    p.add_argument("--lang", choices=LANGS, default=None, help="language of the answer (default: the message's)")
    p.add_argument("--llm", metavar="MODEL", default=None,
                   help="also ask this chat model on the Ollama server (needs langchain-ollama); "
                        "it may override what the parser read from weak evidence")
    p.add_argument("--host", metavar="URL", default=None,
                   help=f"Ollama server for --llm (default: $OLLAMA_HOST or {DEFAULT_HOST})")
    p.add_argument("--llm-host", metavar="URL", default=None, help="Ollama server for --llm (overrides --host)")
    p.set_defaults(run=run)


def default_host() -> str:
    """``$OLLAMA_HOST`` as a URL (Ollama accepts ``host:port`` without a scheme)."""
    host = os.environ.get("OLLAMA_HOST", "").strip() or DEFAULT_HOST
    return (host if "://" in host else f"http://{host}").rstrip("/")


def _read_text(args) -> str:
    if args.text == ["-"]:
        try:
            return sys.stdin.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(t("cmd_intake.stdin_failed", args.lang or get_lang()) + f": {exc}") from exc
    return " ".join(args.text)


def run(args) -> int:
    text = _read_text(args)
    intake = parse(text)
    llm_report = None
    if args.llm:
        intake, llm_report = with_llm(intake, text, args.llm, args.llm_host or args.host or default_host())
    lang = args.lang or (intake.lang if has_words(text) else get_lang())
    if args.lang:
        intake = replace(intake, lang=args.lang)
    if args.json:
        out = {
            "facts": intake.facts(),
            "lang": intake.lang,
            "intake": {k: v for k, v in intake.to_dict().items() if k != "text"},
            # issue 33: how sure each field read is, and the other values the message supports
            "sureness": {field: {"sure": s.sure, "evidence": s.evidence, "replay_right": s.right,
                                 "choices": list(s.choices)} for field, s in confidence.assess(intake).items()},
            "llm": llm_report,
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        _print_summary(intake, lang, llm_report)
    return ExitCode.OK


def with_llm(intake: Intake, text: str, model: str, host: str) -> tuple[Intake, dict]:
    """The parser's reading combined with a chat model's, and a report of it:
    ``{"model", "host", "answered", "error", "won": {field: "llm" | "parser"}, "filled": [fields the llm set]}``."""
    from assistant.intake.llm import combine, llm_intake  # langchain only when asked for

    reading = llm_intake(text, model, host)
    combined, won = combine(intake, reading)
    return combined, {"model": model, "host": host, "answered": reading.intake is not None, "error": reading.error,
                      "won": won, "filled": [name for name, who in won.items() if who == "llm"]}


def summary_rows(intake: Intake, lang: str) -> list[tuple[str, str]]:
    """(label, value) pairs of the human summary, in ``lang``; pure, for tests and the chat."""
    unset = t("cmd_intake.unset", lang)

    def value(v, fmt=str):
        return unset if v is None else fmt(v)

    keep = {True: t("cmd_intake.keep_yes", lang), False: t("cmd_intake.keep_no", lang)}.get(intake.keep_context, unset)
    unsure = set(confidence.unsure(intake))

    def mark(field: str, text: str) -> str:
        return text + t("cmd_intake.unsure", lang) if field in unsure else text

    rows = [
        (t("cmd_intake.phase", lang), f"{intake.phase}: {phase_text(intake.phase, lang)}"),
        (t("cmd_intake.model", lang), value(intake.model)),
        (t("cmd_intake.ctx", lang), value(intake.want_ctx, lambda n: t("cmd_intake.ctx_value", lang, n=n))),
        (t("cmd_intake.parallel", lang), value(intake.want_parallel)),
        (t("cmd_intake.budget", lang), value(intake.budget, fmt_size)),
        (t("cmd_intake.gpu", lang), value(intake.gpu)),
        (t("cmd_intake.error", lang), value(intake.error)),
        (t("cmd_intake.keep", lang), keep),
    ]
    fields = ("phase", "model", "want_ctx", "want_parallel", "budget", "gpu", "error", "keep_context")
    return [(label, mark(field, val)) for field, (label, val) in zip(fields, rows)]


def _print_summary(intake: Intake, lang: str, llm_report: dict | None) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=t("cmd_intake.title", lang), show_header=False, box=None, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for label, val in summary_rows(intake, lang):
        table.add_row(Text(label), Text(val))  # Text: an error quote may hold "[...]", which is not markup
    console = Console()
    console.print(table)
    if llm_report is not None:
        if not llm_report["answered"]:
            line = t("cmd_intake.llm_failed", lang, model=llm_report["model"], host=llm_report["host"],
                     error=llm_report["error"])
        elif llm_report["filled"]:
            line = t("cmd_intake.llm_used", lang, model=llm_report["model"], fields=", ".join(llm_report["filled"]))
        else:
            line = t("cmd_intake.llm_nothing", lang, model=llm_report["model"])
        console.print(Text(line))
