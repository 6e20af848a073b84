"""``oomvet`` / ``oomvet chat``: the conversation.

The user describes the problem in their own words (Chinese, English or
both); intake reads the facts, the rules decide what to ask and measure, and
the chat shows each probe live and ends with the config files.
"""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from assistant.files.atomic import check_out_dir
from common.catalog import get_lang, set_lang, t
from common.errors import ExitCode
from assistant.intake import parse as parse_intake
from assistant.intake import learned, without_budget
from assistant.intake import settle as settle_field
from assistant.session.loop import Session
from assistant.session.args import SessionOptions, add_session_args
from assistant.session import readback
from assistant.session.ui import ChatUI, QuitSession
from assistant.journal.store import open_log, tracking
from assistant.intake.others import mentions_other_models, names_in
from assistant.session.together import diagnose_set
from assistant.session.world import open_world
from probes.ollama_api import canonical_name


def add_parser(sub) -> None:
    p = sub.add_parser("chat", help="talk it through: describe the problem, watch the probes, get a config (default)",
                       description="Describe the out-of-memory problem in your own words (English or Chinese); "
                                   "oomvet asks what it needs, measures with your consent, and writes a verified config.")
    add_session_args(p, auto="run every probe without asking for consent",
                     lang="answer in this language (default: the first message's)",
                     out="folder for the config and report (default oomvet-out)")
    p.add_argument("--also", metavar="MODEL", action="append", default=[],
                   help="another model that must stay loaded beside --model (repeat for more); without it the chat "
                        "asks when your words mention an embedder, a second model or evictions")
    p.add_argument("--llm", metavar="MODEL", help="let a chat model help read your first message "
                   "(it is unloaded before anything is measured)")
    p.add_argument("--llm-host", metavar="URL", help="Ollama server for --llm (default: the one diagnosed)")
    p.set_defaults(run=run)


def run(args, console: Console | None = None, stream=None, *, resume_log=None) -> int:
    """``resume_log``: the journal's log of a stopped or cut chat that ``oomvet
    resume`` goes on with (its first message and budget are the journal's)."""
    console = console or Console()
    options = SessionOptions.from_args(args, resume_log=resume_log)
    if args.lang:
        set_lang(args.lang)
    check_out_dir(options.out)  # refused before the conversation, not after the measurements
    ui = ChatUI(console, stream=stream, auto=args.auto, lang=args.lang)
    log = None
    try:
        if resume_log is None:
            # before the first message its language is not known: the greeting is in both,
            # the session's own first (a --lang, else the locale's)
            langs = [args.lang] if args.lang else sorted(("en", "zh"), key=lambda x: x != get_lang())
            for lang in langs:
                console.print(Text(t("chat.hello", lang), style="bold"))
            learned.warm_up()  # fitted while the user types the first message
            first = ui.read("", first=not args.lang)
            intake = parse_intake(first)
            if args.llm:
                intake = _with_llm(intake, first, args, options, console)
        else:
            first, intake = _journalled_intake(resume_log)
        lang = set_lang(args.lang or intake.lang)
        if resume_log is None:
            if options.budget is not None:
                intake = without_budget(intake)  # --budget is the limit: the words' budget is not asked for
            if args.model:
                intake = settle_field(intake, "model", args.model)  # --model is the user's word: said back, not asked
            # what was read, said back before anything is measured; the unsure fields asked, once each
            # (the model's after the server's list of models has had its say)
            for line in readback.lines(intake):
                ui.say(line)
            intake = readback.confirm(ui, intake, fields=_ASKED_FIRST)
        options = options.with_words(intake)
        with open_world(options.world, log=lambda m: console.print(m, markup=False, highlight=False)) as world:
            if resume_log is None:
                intake = _with_server_names(intake, first, world, ui)
                intake = readback.confirm(ui, intake, fields=("model",))
            model = args.model or intake.model or ("neohorse-1:latest" if args.rig else None)
            also = list(getattr(args, "also", None) or [])
            if model and not also and resume_log is None and mentions_other_models(first):
                also = _ask_also(ui, world, model)
            if model and also:  # several models that must stay loaded together
                return _run_set(console, world, options, [model, *also], lang)
            settle = options.settle_for(world)
            # journalled like diagnose: listed by `oomvet sessions`, resumable, nothing measured is lost
            log = open_log(options, world, model=model, lang=lang, settle_s=settle, first=first,
                           budget=intake.budget, budget_share=intake.budget_share, answered=_answered(intake))
            session = Session(world=world, ui=ui, intake=intake, model=model, lang=lang, settle_s=settle,
                              journal=log)
            session.transcript.add_user(first)
            with tracking(log, quits=(QuitSession,)):
                outcome = session.run()
        doc, paths = log.deliver(options.out, outcome.result)
        console.print(t("chat.wrote", n=len(paths), out=options.out, names=", ".join(p.name for p in paths)),
                      highlight=False, markup=False)
        if outcome.exit_code == ExitCode.INTERRUPTED:
            console.print(t("chat.resume", sid=log.id), highlight=False, markup=False)
        return outcome.exit_code
    except (QuitSession, KeyboardInterrupt):
        console.print(t("chat.bye"))
        if log is not None:
            console.print(t("chat.resume", sid=log.id), highlight=False, markup=False)
        return ExitCode.INTERRUPTED if stream is None else ExitCode.OK


def _ask_also(ui, world, model: str) -> list[str]:
    """"What else must stay loaded?", asked once: the server's tags the
    answer names (Enter: nothing else); a word naming none is said and left out."""
    ui.say(t("chat.also_q", model=model))
    found, unknown = names_in(ui.read(t("chat.also_q", model=model)), ui.tags(world) or [])
    if unknown:
        ui.say(t("chat.also_unknown", names=", ".join(unknown)))
    return [m for m in found if canonical_name(m) != canonical_name(model)]


def _run_set(console, world, options, models: list[str], lang: str) -> int:
    """The set's diagnosis (assistant/session/together.py), its files written all or nothing."""
    say = lambda line: console.print(line, markup=False, highlight=False)  # noqa: E731
    return diagnose_set(world, models, lang, say, options.out)[1]


def _journalled_intake(log):
    """The first message and what a resumed chat had read of it: the budget
    and every unsure field as the user answered, changed or dropped them, not
    as first read."""
    from dataclasses import replace

    first = log.info.get("first") or ""
    intake = without_budget(parse_intake(first))
    for field, value in (log.info.get("answered") or {}).items():
        intake = settle_field(intake, field, value)
    return first, replace(intake, budget=log.info.get("budget"), budget_share=log.info.get("budget_share"))


def _answered(intake) -> dict:
    """The fields the user gave in answer (to keep in the journal for a resume), budget aside."""
    from assistant.intake import confidence

    return {field: getattr(intake, field) for field, kind in intake.evidence
            if kind == confidence.USER and field != "budget"}


#: the unsure fields asked before the server is reached (the budget is the limit it is opened with)
_ASKED_FIRST = ("phase", "budget", "want_ctx", "want_parallel", "keep_context")


def _with_server_names(intake, first: str, world, ui):
    """Read the first message again with the server's model list, so a name the
    parser could only guess ("my finetune", a plain word) is matched to a tag."""
    if intake.model is not None and "model" not in intake.weak:
        return intake
    tags = ui.tags(world)
    if not tags:
        return intake
    again = parse_intake(first, tags=tags)
    if again.model and again.model != intake.model and "model" not in again.weak:
        from dataclasses import replace
        # a name the server lists is as sure as a tag said in full
        return replace(intake, model=again.model, weak=tuple(w for w in intake.weak if w != "model"),
                       evidence=tuple(p for p in intake.evidence if p[0] != "model") + (("model", "model.said"),))
    return intake


def _with_llm(intake, text, args, options, console):
    """The helper model's reading combined with the parser's, said in one line;
    then the helper is unloaded from the server about to be measured."""
    from assistant.commands.intake import with_llm
    from assistant.session.world import host_from

    host = args.llm_host or host_from(options.world)
    combined, report = with_llm(intake, text, args.llm, host)
    if report["error"]:
        console.print(t("chat.llm_failed", model=args.llm, error=report["error"]), highlight=False, markup=False)
    elif report["filled"]:
        console.print(t("chat.llm_used", model=args.llm, fields=", ".join(report["filled"])),
                      highlight=False, markup=False)
    if report["answered"] and not args.llm_host:
        from probes.ollama_api import Ollama
        try:
            Ollama(host, timeout_s=30).unload(args.llm)  # waits until /api/ps no longer lists it
        except Exception as exc:  # noqa: BLE001 - said, and the session goes on
            console.print(t("chat.llm_unload_failed", model=args.llm, error=str(exc).splitlines()[0] if str(exc) else
                            type(exc).__name__), highlight=False, markup=False)
    return combined
