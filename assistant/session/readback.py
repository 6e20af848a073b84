"""What the chat read in the first message, said back before anything is
measured, and the fields it is unsure of asked, each once (issue 33).

One short line per field the intake read, in the session's language, an
unsure one marked so (:mod:`assistant.intake.confidence`). Then each unsure
field is a question with its choices: the reading first (Enter keeps it),
the other readings the message supports, and a way to say another value in
words. A categorical question (when it goes wrong, whether the context must
stay, which model) numbers its choices; a budget numbers them too (a bare
"2" cannot be a GPU's size); a count or a context offers its values inline
("4, or 3?"), where a bare number is the value itself. The answer is the
user's word (:func:`assistant.intake.settle`): sure, never asked again.
``--auto`` asks nothing: it keeps what is sure, drops each unsure guess, and
says so.
"""
from __future__ import annotations

import unicodedata
from typing import Any

from rich.cells import cell_len

from assistant.intake import Intake, confidence, parse, settle
from assistant.session import render, replies
from assistant.session.answers import ALL_OF_IT, Share, parse_answer, parse_choice, parse_yes_no
from common.catalog import t
from probes.units import fmt_size

#: the phases a user can pick, in the order they are offered after the reading
PHASES = ("load", "long_input", "concurrent", "creeping", "slow", "crash")
def lines(read: Intake, lang: str | None = None) -> list[str]:
    """The read-back: a heading, then one line per field read, unsure ones marked."""
    sure = confidence.assess(read)
    out = [t("readback.heading", lang)]
    for field, s in sure.items():
        mark = "" if s.sure else t("readback.unsure", lang)
        out.append(t("readback.line", lang, name=t(f"readback.field.{field}", lang), value=value_words(field, s.value, read, lang),
                     mark=mark))
    if read.error:
        out.append(t("readback.line", lang, name=t("readback.field.error", lang), value=read.error, mark=""))
    if len(out) == 1:
        out.append(t("readback.nothing", lang))
    return out


def value_words(field: str, value: Any, read: Intake | None = None, lang: str | None = None) -> str:
    """A field's value as a person reads it."""
    if field == "phase":
        return t(f"chat.phase.{value}", lang)
    if field == "budget":
        return f"{value * 100:g}%" if isinstance(value, float) else fmt_size(value)
    if field == "want_ctx" and read is not None and read.ctx_estimated:
        return t("readback.estimated", lang, v=value)
    return render.field_words(field, value, lang)[1]


def confirm(ui, read: Intake, fields: tuple[str, ...] | None = None) -> Intake:
    """Each unsure field of ``read`` (or of those in ``fields``) asked once; with
    ``ui.auto`` each is dropped instead (:func:`only_sure`)."""
    if ui.auto:
        return only_sure(read, ui.say, fields)
    for field in _unsure(read, fields):
        if field in confidence.unsure(read):  # a correction to an earlier question may have settled it
            read = ask(ui, field, read)
    return read


def only_sure(read: Intake, say, fields: tuple[str, ...] | None = None) -> Intake:
    """``read`` with each unsure field (of those in ``fields``) left open, and
    a line for each through ``say``: unattended, a guess is not used."""
    for field in _unsure(read, fields):
        s = confidence.assess(read)[field]
        say(t("readback.auto_dropped", name=t(f"readback.field.{field}"), value=value_words(field, s.value, read)))
        read = settle(read, field, None)
    return read


def _unsure(read: Intake, fields) -> list[str]:
    return [field for field in confidence.unsure(read) if fields is None or field in fields]


def ask(ui, field: str, read: Intake) -> Intake:
    """``read`` with one unsure field asked, with its choices, until a reply
    answers it: Enter, yes or "/skip" keep the reading (the first choice),
    "/back" asks again (nothing comes before these questions). A reply that
    corrects other fields instead ("actually I need 4k of context") settles
    those, and this question is asked again."""
    s = confidence.assess(read)[field]
    values = _choices(field, s)
    text = _question(field, values, s, read)
    while True:
        ui.say(text)
        line = ui.heard(ui.read(text), None)
        if line is None:
            continue
        line = line.strip()
        if line == "/back":
            continue  # nothing was asked before the first message's questions: this one is asked again
        others = _corrections(line, field)
        if others:
            for name, value in others.items():
                read = settle(read, name, value)
            ui.say(t("ui.corrected", fields=", ".join(" ".join(render.field_words(k, v)) for k, v in others.items())))
            if field not in confidence.unsure(read):
                return read
            continue
        value = _answer(ui, field, line, values, text)
        if value is not _NOTHING:
            return settle(read, field, value)


def _corrections(line: str, asked: str) -> dict:
    """The fields other than ``asked`` that a correcting reply gives ("actually
    it's qwen2.5:7b"); empty for any other reply."""
    if not replies.correction(line):
        return {}
    got = parse(line)
    said = {"model": got.model, "want_ctx": got.want_ctx, "want_parallel": got.want_parallel,
            "keep_context": got.keep_context, "budget": got.budget}
    return {k: v for k, v in said.items() if v is not None and k != asked}


def _answer(ui, field: str, line: str, values: list, text: str) -> Any:
    """The value a reply to the question on ``field`` gives, or ``_NOTHING``
    (said so) when it does not answer it."""
    if line in ("", "/skip"):
        return values[0]
    if field == "keep_context":
        said, k = parse_yes_no(line), parse_choice(line, 2)
        if said is not None or k is not None:
            return said if said is not None else values[k - 1]
    elif parse_yes_no(line) is True:
        return values[0]
    if field in _OTHER and parse_choice(line, len(values) + 1) == len(values) + 1:
        ui.say(t(f"readback.other.{field}"))  # "another": typed next, in words
        line = (ui.heard(ui.read(text), None) or "").strip()
        if not line:
            return _NOTHING
    got = _reply(field, line, values)
    if got is _NOTHING:
        ui.console.print(t("ui.bad_answer", what=t(f"readback.what.{field}")))
    return got


_NOTHING = object()
#: the longest question kept on one line: 80 columns less the chat's "oomvet> "
_WIDTH = 72
#: the fields whose choices end in "another: say it"
_OTHER = ("budget", "model", "phase")


def _choices(field: str, s: confidence.Sureness) -> list:
    if field == "phase":
        return [s.value, *(p for p in s.choices if p != s.value), *(p for p in PHASES if p != s.value and p not in s.choices)]
    if field == "keep_context":
        return [s.value, not s.value]
    values = [s.value, *(v for v in s.choices if v != s.value)]
    if field == "budget" and s.evidence == "budget.learned":
        values.append(None)  # a guess: no limit of the user's at all is a reading too
    return values


def _question(field: str, values: list, s: confidence.Sureness, read: Intake) -> str:
    if field in ("want_ctx", "want_parallel"):
        return t(f"readback.q.{field}", values=t("readback.sep").join(str(v) for v in values), first=values[0])
    numbered = [f"{i}) {value_words(field, v, read) if v is not None else t('readback.no_limit')}"
                for i, v in enumerate(values, 1)]
    if field == "budget" and s.evidence == "budget.part":
        numbered[0] += t("readback.part_left")
        whole = max(v for v in values if isinstance(v, int))
        numbered = [line if not line.endswith(fmt_size(whole)) else f"{line}{t('readback.all_of_it')}" for line in numbered]
    if field == "budget" and s.evidence == "budget.per_card":
        numbered[0] += t("readback.one_card")
        numbered[1] += t("readback.all_cards")
    if field in _OTHER:
        numbered.append(f"{len(values) + 1}) {t(f'readback.choice.{field}')}")
    # a short list on the question's line; a long one a choice a line, so none wraps at 80 columns
    one_line = t(f"readback.q.{field}", choices="  ".join(numbered))
    if cell_len(one_line) <= _WIDTH:
        return one_line
    return t(f"readback.q.{field}", choices="").rstrip() + "\n  " + "\n  ".join(numbered)


def _reply(field: str, line: str, values: list) -> Any:
    """The value a reply gives, or ``_NOTHING`` when it does not answer."""
    k = parse_choice(line, len(values), numbers=field not in ("want_ctx", "want_parallel"))
    if k is not None:
        return values[k - 1]
    if field == "budget" and ALL_OF_IT.match(unicodedata.normalize("NFKC", line)):
        return max(v for v in values if isinstance(v, int)) if any(isinstance(v, int) for v in values) else values[0]
    if field == "phase":
        said = parse(line).phase
        return said if said != "unknown" else _NOTHING
    if field == "budget" and parse_yes_no(line) is False:
        return None  # no limit of the user's: the device's own total
    try:
        value = parse_answer(field, line)
    except ValueError:
        return _NOTHING
    if isinstance(value, Share):
        return value
    return value if value else _NOTHING
