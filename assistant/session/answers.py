"""One answer parser for every question the assistant asks, and the answers
file for unattended runs.

A chat answer, an answers-file value and a yes/no to a consent prompt all go
through :func:`parse_answer`, which reads the text with the same intake as the
first message (:mod:`assistant.intake`): "I run qwen2.5:7b" answers the model
question with ``qwen2.5:7b``, "大概三万字" the context one with an estimate,
"80%" the budget one with a :class:`Share` of the device. Yes and no come from
one lexicon (``intake/lexicon/yesno.yaml``), so "可以" means yes everywhere.
:func:`answer_facts` turns an answer into the ``answer`` facts the rules read:
already-parsed values only (a share resolved against the device total by the
session, which knows it). The answers file (YAML with the keys ``symptom``,
``want_ctx``, ``want_parallel``, ``keep_context``, ``budget``, ``lang``,
``model``) is checked here, once, with one clear line per problem, so
``diagnose`` never starts measuring on a typo; its budget is read here into a
:class:`probes.budget.Budget` that remembers the answers file as its source.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from common.catalog import t
from common.errors import UsageError
from assistant.intake import Intake, normalise_model, parse, size_of
from assistant.intake.numbers import spoken_number
from assistant.session.replies import yes_no
from probes.budget import ANSWERS, Budget
from probes.units import SizeError, parse_size

KEYS = ("symptom", "want_ctx", "want_parallel", "keep_context", "keep_concurrency", "budget", "lang", "model")
YES_NO_KEYS = ("keep_context", "keep_concurrency")


@dataclass(frozen=True)
class Share:
    """A budget given as a share of the device ("80%"); only whoever knows the
    device's total can turn it into bytes."""

    fraction: float  # 0 < fraction <= 1

    def bytes_of(self, total: int) -> int:
        return int(total * self.fraction)

    def __str__(self) -> str:
        return f"{self.fraction * 100:g}%"


@lru_cache(maxsize=1)
def _yes_no() -> tuple[frozenset, frozenset]:
    data = yaml.safe_load((Path(__file__).parents[1] / "intake" / "lexicon" / "yesno.yaml").read_text(encoding="utf-8"))
    return frozenset(map(str, data["yes"])), frozenset(map(str, data["no"]))


def parse_yes_no(text: str) -> bool | None:
    """True / False for a yes / no in either language, with fillers and a
    reason after it ("sure, go ahead", "不用，4k 就够了"); None for anything else."""
    low = unicodedata.normalize("NFKC", str(text)).strip().lower().strip(" .!?。！？，,~")
    yes, no = _yes_no()
    if low in yes:
        return True
    if low in no:
        return False
    return yes_no(low)  # a yes or a no with a reason after it: "好的，可以"


@lru_cache(maxsize=1)
def _pick_words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    data = yaml.safe_load((Path(__file__).parents[1] / "intake" / "lexicon" / "pick.yaml").read_text(encoding="utf-8"))
    return tuple(map(str, data["first"])), tuple(map(str, data["second"]))


def parse_pick(text: str) -> int | None:
    """1 or 2 from a reply to "which of the two answers?" ("2", "２", "第二个",
    "the second one", "the other"), None when it names neither or both."""
    low = unicodedata.normalize("NFKC", str(text)).strip().lower()
    first, second = (any(w in low for w in words) for words in _pick_words())
    if first == second:
        return None
    return 1 if first else 2


_CHOICE_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "last": -1,
             "一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "最后": -1}
_CHOICE = re.compile(r"^\s*(?:option|choice|no\.?|#|选项?|选)?\s*(\d)\s*(?:[).、.]|号|个|项)?\s*$", re.I)
_ORDINAL = re.compile(r"(?:the\s+)?(first|second|third|fourth|fifth|sixth|last)\b(?:\s+one)?|第\s*([一二三四五六])\s*(?:个|项|种)?|(最后)\s*(?:一)?(?:个|项)?",
                      re.I)
#: "all of it", said of a size offered beside a part of it ("全部", "the whole card")
ALL_OF_IT = re.compile(r"^\s*(?:all(?:\s+of\s+it)?|the\s+whole\s+(?:card|thing|device)|everything|全部|全都|都(?:可以)?用|整张(?:卡)?|都行)\s*$",
                  re.I)


def parse_choice(text: str, n: int, numbers: bool = True) -> int | None:
    """The 1-based choice a reply names out of ``n``: "2", "２", "2)", "option 2"
    (only where ``numbers``: elsewhere a bare number is a value), "the second
    one", "第二个", "the last"; None for anything else."""
    low = unicodedata.normalize("NFKC", str(text)).strip().lower()
    m = _CHOICE.match(low) if numbers else None
    if m and 1 <= int(m.group(1)) <= n:
        return int(m.group(1))
    m = _ORDINAL.fullmatch(low.strip(" .。!！"))
    if m:
        k = _CHOICE_ORDINALS[next(g for g in m.groups() if g)]
        k = n if k == -1 else k
        return k if 1 <= k <= n else None
    return None


_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(k|万)?\s*(?:tokens?|个\s*token|个|路|个请求|requests?|users?|人)?\s*$", re.I)
_ZH_COUNT = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_EN_COUNT = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_BARE_NAME = re.compile(r"^[A-Za-z][\w./-]*(?::[\w.-]+)?$")
_PERCENT = re.compile(r"^\s*(\d{1,3}(?:\.\d+)?)\s*%\s*$")
_PLAIN_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")
#: a number with no unit is bytes only where it is large enough to be a GPU
#: budget: "6" after "8.00 GiB" means 6 GiB to the person who typed it, so it is
#: refused with the example of a size rather than read as 6 bytes
_FEWEST_PLAIN_BYTES = 256 << 20


def _count(text: str) -> int | None:
    m = _COUNT.match(text)
    if m:
        scale = {"k": 1024, "K": 1024, "万": 10000}.get(m.group(2) or "", 1)
        return int(float(m.group(1)) * scale)
    word = text.strip().lower().rstrip("个路人")
    return _ZH_COUNT.get(word) or _EN_COUNT.get(word)


def parse_answer(question: str, text: Any, tags: list[str] | None = None) -> Any:
    """The typed value of ``text`` as an answer to ``question``; None for an
    empty answer (don't know). Raises ValueError with what was expected, in
    the current language, when the text does not answer the question.

    symptom -> :class:`Intake`; model -> name; want_ctx / want_parallel -> int;
    budget -> bytes (int) or :class:`Share`; keep_context / keep_concurrency -> bool.
    """
    if text is None or isinstance(text, bool) and question not in YES_NO_KEYS:
        return None
    if isinstance(text, bool) or isinstance(text, int) and question in ("want_ctx", "want_parallel", "budget"):
        return text
    text = str(text).strip()
    if not text:
        return None
    read = parse(text, tags=tags)
    if question == "symptom":
        return read
    if question == "model":
        if read.model:
            return read.model
        if _BARE_NAME.match(text):
            return normalise_model(text)
        raise ValueError(t("answers.what.model"))
    if question in ("want_ctx", "want_parallel"):
        value = (read.want_ctx if question == "want_ctx" else read.want_parallel) or _count(text) or spoken_number(text)
        if not value or value <= 0:
            raise ValueError(t("answers.what.number"))
        return int(value)
    if question == "budget":
        m = _PERCENT.match(text)
        if m and 0 < float(m.group(1)) <= 100:
            return Share(float(m.group(1)) / 100)
        if read.budget:
            return read.budget
        if read.budget_share:
            return Share(read.budget_share)
        if size_of(text):
            return size_of(text)
        if _PLAIN_NUMBER.match(text) and float(text) < _FEWEST_PLAIN_BYTES:
            raise ValueError(t("answers.what.size"))
        try:
            return parse_size(text)
        except SizeError:
            raise ValueError(t("answers.what.size")) from None
    if question in YES_NO_KEYS:
        yes_no = parse_yes_no(text)
        if yes_no is not None:
            return yes_no
        if question == "keep_context" and read.keep_context is not None:
            return read.keep_context
        raise ValueError(t("answers.what.yesno"))
    return text


def answer_facts(question: str, value: Any, device_total: int | None = None, tags: list[str] | None = None) -> list[dict]:
    """The ``answer`` facts for one answer: the question asked first, then any
    other field the same words carry ("I run qwen2.5:7b with 8k context" also
    answers the context). Values reach the rules parsed: a phase, a name, an
    int, bytes, a bool, or None (don't know)."""
    if isinstance(value, Budget):  # the answers file's, read on loading
        value = Share(value.fraction) if value.bytes is None else value.bytes
    if isinstance(value, str) or value is not None and not isinstance(value, (int, float, bool, Share, Intake)):
        try:
            value = parse_answer(question, value, tags=tags)
        except ValueError:
            value = None
    extra: list[dict] = []
    if isinstance(value, Intake):
        read, value = value, value.phase
        extra = _carried(read, skip=question, device_total=device_total)
    elif question == "model" and isinstance(value, str):
        value = normalise_model(value)
    if isinstance(value, Share):
        value = value.bytes_of(device_total) if device_total else None
    return [{"kind": "answer", "question": question, "value": value}, *extra]


def _carried(read: Intake, skip: str, device_total: int | None) -> list[dict]:
    budget = read.budget
    if budget is None and read.budget_share and device_total:
        budget = Share(read.budget_share).bytes_of(device_total)
    fields = {"model": read.model, "want_ctx": read.want_ctx, "want_parallel": read.want_parallel,
              "budget": budget, "keep_context": read.keep_context}
    return [{"kind": "answer", "question": q, "value": v} for q, v in fields.items() if v is not None and q != skip]


def load_answers(path: str | Path | None) -> dict:
    """The answers file at ``path`` as ``{key: value}`` (``{}`` for none); UsageError with
    one line for the first problem, so ``diagnose`` never starts measuring on a typo."""
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UsageError(t("answers.missing", path=p))
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UsageError(t("answers.yaml", path=p, error=str(exc).splitlines()[0])) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(t("answers.mapping", path=p))
    out = {}
    for key, value in data.items():
        if key not in KEYS:
            raise UsageError(t("answers.unknown", path=p, key=key, known=", ".join(KEYS)))
        out[key] = None if value is None else _checked(p, key, value)
    return out


def _checked(path: Path, key: str, value: Any) -> Any:
    """The value the answers file gives ``key``, as kept; UsageError saying what was expected."""

    def bad(shown: Any = value, what: str | None = None) -> UsageError:
        return UsageError(t("answers.bad", path=path, key=key, value=shown, what=what or _what(key)))

    if key in ("want_ctx", "want_parallel", "budget", *YES_NO_KEYS):
        if isinstance(value, bool) != (key in YES_NO_KEYS):
            raise bad()
        if key == "budget" and str(value).strip().startswith("-"):
            raise bad()  # the words' reader would take "-1G" for 1G; --budget refuses it too
        if key in YES_NO_KEYS:
            return value
        try:
            parsed = parse_answer(key, str(value))
        except ValueError:
            raise bad() from None
        if key == "budget" and parsed is not None:  # as written (6GiB, 80%), for the notes to show
            text = str(value).strip()
            if isinstance(parsed, Share):
                return Budget(None, parsed.fraction, text, ANSWERS)
            return Budget(int(parsed), None, text, ANSWERS)
        if not isinstance(parsed, int) or parsed <= 0:
            raise bad(parsed)
        return parsed
    if key == "lang" and value not in ("en", "zh"):
        raise bad(what="en / zh")
    if key in ("symptom", "model") and not isinstance(value, str):
        raise bad(what=t("answers.what.text"))
    return value


def _what(key: str) -> str:
    if key in YES_NO_KEYS:
        return t("answers.what.yesno")
    return {"budget": t("answers.what.size")}.get(key, t("answers.what.number"))
