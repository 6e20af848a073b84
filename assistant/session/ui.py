"""The two faces of a session: the chat (a person at a terminal) and the
unattended run (an answers file).

Both implement the small UI protocol of :mod:`assistant.session.loop`. The chat
draws with rich: questions, consent before each probe, a live memory gauge
against the limit with a sparkline while a probe runs, and the slash
commands. Ctrl-C during a probe stops that probe (the server is restored);
a second Ctrl-C quits. Every line printed comes from the catalog (common/catalog.py).
"""
from __future__ import annotations

import re
from typing import Any, Callable, TextIO

from rich.console import Console
from rich.text import Text

from assistant.report.why import why_lines
from assistant.session import explain, live, readback, render, replies
from assistant.session.live import QuitSession
from assistant.session.answers import answer_facts, parse_answer, parse_pick, parse_yes_no
from assistant.intake import Intake, without_budget
from common.catalog import get_lang, set_lang, t
from probes.result import ProbeResult
from probes.units import fmt_size


def _same_words(reason: str, question: str) -> bool:
    """Whether the rule's reason only repeats the question (then it is not shown)."""
    def squash(x: str) -> str:
        return re.sub(r"[\W_]+", "", x.lower())
    r, q = squash(reason), squash(question)
    return not r or r in q or q in r


def _answer_line(answer: dict, want: int | None) -> str:
    """One verified answer as the pick question lists it."""
    cfg = answer["config"]
    meets = t("ui.alternative_short" if "max_context_len" in (answer.get("unmet") or []) else "ui.alternative_meets",
              want=want or "?")
    return t("ui.pick.answer", model=cfg.get("model"), ctx=cfg.get("max_context_len"),
             quant=cfg.get("quant_type") or "?", meets=meets)


class AutoUI:
    """Unattended: answers from the answers file, consent always, progress on stderr."""

    def __init__(self, answers: dict | None = None, console: Console | None = None, quiet: bool = False):
        self.answers = dict(answers or {})
        self.console = console or Console(stderr=True)
        self.quiet = quiet

    def ask(self, question: str, reason: str) -> Any:
        # the file was checked on loading; the session reads it like a typed answer
        return self.answers.get(question)

    def consent(self, step: dict) -> bool:
        return True

    def pick(self, chosen: dict, other: dict, want: int | None) -> bool:
        return False  # --auto follows the rules' choice; the done lines say why

    def run_probe(self, label: str, work: Callable[[], ProbeResult], env) -> ProbeResult:
        if self.quiet:
            return work()
        with self.console.status(t("ui.probe.running", name=render.probe_name(label))):
            return work()

    def show(self, event: str, **data) -> None:
        if self.quiet:
            return
        if event == "probe_result":
            render.show_probe(self.console, data["result"], getattr(self, "session", None), data.get("readings", ()),
                       auto=True)
        elif event == "done":
            render.show_done(self.console, data["result"])


class ChatUI:
    """A person at a terminal (or, in tests, a stream of lines and a string console)."""

    def __init__(self, console: Console, stream: TextIO | None = None, auto: bool = False, lang: str | None = None):
        self.console = console
        self.stream = stream
        self.auto = auto
        self.session = None
        self.advisor = None
        self.history: list[tuple[str, Any]] = []
        self._tags: list[str] | None = None
        if lang:
            set_lang(lang)

    def bind(self, session, advisor) -> None:
        self.session, self.advisor = session, advisor

    # -- input ---------------------------------------------------------------
    def read(self, prompt: str, first: bool = False) -> str:
        """One line from the user; slash commands that do not answer are
        handled here. ``first``: the first message, whose language is not yet
        known (the prompt is in both)."""
        while True:
            who = f"{t('ui.prompt', 'en')} / {t('ui.prompt', 'zh')}" if first else t("ui.prompt")
            self.console.print(f"[bold cyan]{who}>[/] ", end="")
            if self.stream is not None:
                line = self.stream.readline()
                if line == "":
                    raise QuitSession()
                line = line.rstrip("\n")
                self.console.print(line, markup=False, highlight=False)
            else:
                try:
                    line = input()
                except EOFError:
                    raise QuitSession() from None
            if self.session is not None:
                self.session.transcript.add_user(line)
            handled = self._command(line.strip())
            if handled is None:
                return line
            if handled == "answer":
                return line

    def _command(self, line: str) -> str | None:
        if not line.startswith("/"):
            return None
        cmd, _, arg = line.partition(" ")
        if cmd == "/quit":
            raise QuitSession()
        if cmd == "/why":
            self.show_why()
        elif cmd == "/status":
            self.show_status()
        elif cmd == "/lang":
            lang = arg.strip() or ("en" if get_lang() == "zh" else "zh")
            if lang in ("en", "zh"):
                set_lang(lang)
                if self.session is not None:
                    self.session.lang = lang
            self.console.print(t("ui.lang"))
        elif cmd in ("/skip", "/back"):
            return "answer"
        else:
            self.console.print(t("ui.help"))
        return "handled"

    # -- UI protocol ---------------------------------------------------------
    def ask(self, question: str, reason: str) -> Any:
        key = f"ui.q.{question}"
        try:
            text = t(key)
        except KeyError:
            text = t("ui.q.other", question=question)
        previous = list(self.history)
        while True:
            self.say(text)
            if reason and not _same_words(reason, text):
                self.console.print(Text(t("ui.reason", reason=reason), style="dim"))
            line = self.heard(self.read(text), {"action": "ask", "question": question}, reason, asked=question)
            if line is None:
                continue  # a question of the user's was answered, or an earlier answer corrected
            if line.strip() == "/skip":
                self.console.print(t("ui.skipped"))
                self.history.append((question, None))
                return None
            if line.strip() == "/back":
                self.go_back(previous)
                continue
            try:
                value = parse_answer(question, line, tags=self.tags())
            except ValueError as exc:
                self.console.print(t("ui.bad_answer", what=str(exc)))
                continue
            if isinstance(value, Intake):
                # a limit already in force stays; the fields of this answer it is unsure of are asked, once
                world = getattr(self.session, "world", None)
                value = without_budget(value) if getattr(world, "budget", None) else value
                value = readback.confirm(self, value)
            self.history.append((question, value))
            return value

    def heard(self, line: str, step: dict | None, reason: str = "", asked: str | None = None) -> str | None:
        """The reply as the question's own reader takes it ("go back" is
        "/back", "跳过" is "/skip"), or None when it was not an answer: a
        question, answered here in the session's language, or a correction
        of an earlier answer ("actually it's qwen2.5:7b"), passed to the
        rules as the newest answer. The caller then asks its question again."""
        if line.strip().startswith("/"):
            return line
        reply = replies.read_reply(line)
        if reply.kind == replies.BACK:
            return "/back"
        if reply.kind == replies.SKIP:
            return "/skip"
        if reply.kind == replies.QUESTION:
            if not reason and step is not None and self.advisor is not None:
                reason = self._step_sentence()
            for text in explain.answer(reply, step, reason):
                self.say(text)
            return None
        if replies.correction(line) and self._corrected(line, asked):
            return None
        return line

    def _step_sentence(self) -> str:
        """The rule's own sentence for the step now waiting (the why chain's last)."""
        chain = self.advisor.why()
        if not chain:
            return ""
        return (chain[-1].get("reason_zh") if get_lang() == "zh" else None) or chain[-1].get("reason") or ""

    def _corrected(self, line: str, asked: str | None) -> bool:
        """Post what a correcting reply says of fields other than the one
        being asked; True when it said any."""
        from assistant.intake import parse

        if self.advisor is None or self.session is None:
            return False
        read = parse(line, tags=self.tags())
        # the budget is the limit every measurement so far was judged against: not changed mid-session
        fields = {"model": read.model, "want_ctx": read.want_ctx, "want_parallel": read.want_parallel,
                  "keep_context": read.keep_context}
        said = {k: v for k, v in fields.items() if v is not None and k != asked}
        if not said or (asked in fields and fields[asked] is not None):
            return False  # an answer to the question asked, in a correcting voice
        if "model" in said:
            self.session.model = str(said["model"])
        # the same answer facts a reply to each of these questions gives (answers.answer_facts)
        self.advisor.post_many([fact for k, v in said.items() for fact in answer_facts(k, v)])
        shown = ", ".join(" ".join(render.field_words(k, v)) for k, v in said.items())
        self.say(t("ui.corrected", fields=shown))
        return True

    def tags(self, world=None) -> list[str] | None:
        """The models the server has, to read a model name from an answer; None
        when there is no server (yet) or it cannot say."""
        world = world or getattr(self.session, "world", None)
        api = getattr(getattr(world, "env", None), "api", None)
        if api is None:
            return None
        if self._tags is None:
            try:
                self._tags = list(api.tags())
            except Exception as exc:  # noqa: BLE001 - a name typed in full is still read without the list
                self._tags = []
                self.console.print(Text(t("ui.tags_failed", error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__),
                                        style="dim"))
        return self._tags

    def go_back(self, previous: list) -> None:
        """Answer the previous question again; the rules take the newest answer."""
        if not previous:
            self.console.print(t("ui.back.none"))
            return
        question, _ = previous[-1]
        value = self.ask(question, "")
        if self.advisor is not None:
            total = self.session.world.device_fact().get("total") if self.session is not None else None
            self.advisor.post_many(answer_facts(question, value, device_total=total))

    def consent(self, step: dict) -> bool:
        if self.auto:
            return True
        if step["action"] == "change":
            text = t("ui.consent.change", knob=render.knob_name(step.get("knob")), old=step.get("from"),
                     new=step.get("to"))
        else:
            args = step.get("args") or {}  # a retest's model is its config's (a lower-bit tag), not the session's
            model = args.get("model") or (args.get("config") or {}).get("model") or (self.session.model if self.session else "")
            text = t("ui.consent.probe", probe=render.probe_name(step["probe"]), model=model,
                     what=t(f"ui.what.{step['probe']}"))
        while True:
            self.say(text)
            line = self.heard(self.read(text), step)
            if line is None:
                continue
            line = line.strip().lower()
            if line == "/back":
                self.go_back(list(self.history))
                continue
            said = parse_yes_no(line)
            if line == "" or said is True:
                return True
            if said is False or line == "/skip":
                self.console.print(t("ui.skipped"))
                return False
            self.console.print(t("ui.bad_answer", what=t("answers.what.yesno")))

    def pick(self, chosen: dict, other: dict, want: int | None) -> bool:
        """Both answers were verified: the user says which one the files write
        (1, Enter: the rules' choice; 2: the other). ``--auto`` keeps the rules'."""
        if self.auto:
            return False
        text = t("ui.pick.question", first=_answer_line(chosen, want), second=_answer_line(other, want))
        while True:
            self.say(text)
            try:
                line = self.heard(self.read(text), None)
            except QuitSession:  # everything is measured: leaving keeps the method's choice, nothing lost
                self.console.print(t("ui.pick.kept"))
                return False
            if line is None:
                continue
            line = line.strip()
            if line in ("", "/skip"):
                return False
            if line == "/back":
                continue  # the measurements are done: nothing before this to answer again
            said = parse_pick(line)
            if said is not None:
                return said == 2
            self.console.print(t("ui.bad_answer", what=t("ui.pick.what")))

    def run_probe(self, label: str, work: Callable[[], ProbeResult], env) -> ProbeResult:
        return live.run_probe(self.console, label, work, env)

    def after_stop(self, label: str) -> str:
        """The probe was stopped (Ctrl-C; the server is as it was, and nothing
        it measured is used): "again", "skip" or "stop" (the session ends as
        stopped; ``oomvet resume`` goes on from here later). Enter runs it
        again; ``--auto`` and the end of input stop."""
        if self.auto:
            return "stop"
        text = t("ui.after_stop", probe=render.probe_name(label))
        while True:
            self.say(text)
            try:
                line = self.heard(self.read(text), None)
            except QuitSession:
                return "stop"
            if line is None:
                continue
            line = line.strip()
            if line in ("", "/back"):
                return "again"
            if line == "/skip":
                return "skip"
            choice = replies.after_stop(line)
            if choice:
                return choice
            self.console.print(t("ui.bad_answer", what=t("ui.after_stop.what")))

    def show(self, event: str, **data) -> None:
        if event == "probe_result":
            render.show_probe(self.console, data["result"], getattr(self, "session", None), data.get("readings", ()),
                       auto=self.auto)
        elif event == "done":
            render.show_done(self.console, data["result"])

    # -- helpers ---------------------------------------------------------------
    def say(self, text: str) -> None:
        self.console.print(Text("oomvet> ", style="bold magenta") + Text(text))
        if self.session is not None:
            self.session.transcript.add_assistant(text)

    def show_why(self) -> None:
        chain = self.advisor.why() if self.advisor is not None else []
        if not chain:
            self.console.print(t("ui.why.empty"))
            return
        self.console.print(Text(t("ui.why.title"), style="bold"))
        for line in why_lines(chain, get_lang()):
            self.console.print(Text(line))

    def show_status(self) -> None:
        s = self.session
        if s is None:
            return
        last = s.steps[-1].get("summary") if s.steps else "—"
        self.console.print(t("ui.status", model=s.model, limit=fmt_size(s.world.limit.bytes), steps=len(s.steps),
                             last=last), highlight=False, markup=False)
