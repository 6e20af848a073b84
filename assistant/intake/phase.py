"""The two axes of a symptom, read from the cue lexicons in ``lexicon/``.

*When* it fails (at load, with long input, with several requests, over time)
and *what* happens (OOM, crash, slow / spill to CPU, hang, cut output) are
separate questions; a message may answer one, both or neither. The phase the
rules receive follows from both, *when* first: a crash at load is a load
problem, a slowdown with long prompts a long-input one. A message no cue places
in time is asked of :mod:`learned`, fitted on the development corpus (which
also reads a *what* no cue said, and overrules a cue's *when* or *what* only
when very sure of another); only when that is unsure too does the *what*
decide (slow -> slow, a cut answer -> long_input since output is cut at
``num_ctx``, any failure -> crash). A message put as a question that the
*what* reader finds likely to report no trouble takes no time from a cue. The
cue lists are data, so a phrasing is added by adding a line with its example.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from assistant.intake import learned
from assistant.intake.learned import Guess
from assistant.intake.scrub import Scrubbed

_I = re.IGNORECASE | re.ASCII
_DIR = Path(__file__).parent / "lexicon"
WHENS = ("load", "long_input", "concurrent", "over_time", "unknown")
WHATS = ("oom", "crash", "slow", "hang", "cut", "unknown")
_PHASE_OF_WHEN = {"load": "load", "long_input": "long_input", "concurrent": "concurrent", "over_time": "creeping"}
_PHASE_OF_WHAT = {"slow": "slow", "cut": "long_input", "oom": "crash", "crash": "crash", "hang": "crash"}
_NEGATION_BEFORE = re.compile(
    r"(?:没有|没|不是|并非|并不是|无|不|no|not|without|never|isn't|aren't|wasn't|don't|doesn't|no\s+more)\s*(?:(?:看到|看见|见到|发现|提到|出现)\s*|[开用发跑搞做]|\w+\s+)?$",
    _I,
)
_OLLAMA_RUN = re.compile(r"ollama\s+run\b", _I)
# a cause the user only asks about ("是 num_predict 的问题还是显存不够？", "is it running out of memory?")
# is a guess, not a symptom
_GUESS_BEFORE = re.compile(r"(?:还是|是不是|是否|会不会|难道是?|这是|是因为|\bor\s+is\s+it)\s*(?:\w+\s+)?$", _I)
_QUESTION_AFTER = re.compile(r"^[^。,，.;；!！\n]{0,8}?(?:[?？]|吗|呢)")
# a freeze that ends in a crash ("一加载就卡死，过一会 ollama 自己退出了", "freezes for a minute and then EOF")
# is the crash; only the strong crash cues count after it, not a bare "error"
# where the message rules a time out, a learned guess of another time must be this sure: the denied
# word is still in the text, and a reader of character n-grams half-reads it as said
_SURE_DESPITE_A_DENIAL = 0.5
_THEN = re.compile(r"\bthen\b|然后|过(?:了)?一会儿?|最后|接着|随后|后来", _I)


@dataclass(frozen=True)
class Cue:
    pattern: re.Pattern
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Group:
    value: str                 # the axis value this group gives
    name: str                  # for tests and `why`
    cues: tuple[Cue, ...]
    negatable: bool = False
    in_error: bool = False
    only_if_failed: bool = False
    unless: str | None = None


@dataclass(frozen=True)
class Lexicon:
    groups: tuple[Group, ...]
    exceptions: dict


def _cues(rows) -> tuple[Cue, ...]:
    return tuple(Cue(re.compile(rx, _I), tuple(examples)) for rx, examples in rows)


@lru_cache(maxsize=None)
def lexicon(axis: str) -> Lexicon:
    """``axis`` is "when" or "what"; read once from ``lexicon/{axis}.yaml``."""
    data = yaml.safe_load((_DIR / f"{axis}.yaml").read_text(encoding="utf-8"))
    groups = tuple(
        Group(value=g[axis], name=g.get("name", g[axis]), cues=_cues(g["cues"]), negatable=g.get("negatable", False),
              in_error=g.get("in_error", False), only_if_failed=g.get("only_if_failed", False),
              unless=g.get("unless"))
        for g in data["groups"]
    )
    exceptions = {name: _cues(rows) for name, rows in (data.get("exceptions") or {}).items()}
    return Lexicon(groups, exceptions)


def _first(cues, text: str, negatable: bool = False) -> str | None:
    """The first cue matched in ``text``; with ``negatable``, one the user denies
    ("it doesn't crash at load") or only asks about ("是不是爆显存了？") does not count."""
    for cue in cues:
        for m in cue.pattern.finditer(text):
            if negatable:
                clause = re.split(r"[。,，.;；!?！？\n]", text[max(0, m.start() - 14):m.start()])[-1]
                if _NEGATION_BEFORE.search(clause):
                    continue
                if _GUESS_BEFORE.search(clause) and _QUESTION_AFTER.search(text[m.end():m.end() + 12]):
                    continue
            return m.group(0).strip()
    return None


def _read(axis: str, prose: str, error: str, failed: bool, denials: bool = True) -> tuple[str, str | None]:
    """``(value, cue)`` on one axis; ``denials=False`` counts denied cues too
    (and a group's ``unless`` exception, "loading is fine", denies it as well)."""
    lex = lexicon(axis)
    for group in lex.groups:
        if group.only_if_failed and not failed:
            continue
        if group.unless and denials and _first(lex.exceptions[group.unless], prose):
            continue
        cue = _first(group.cues, prose, group.negatable and denials) or (_first(group.cues, error) if group.in_error else None)
        if cue:
            return group.value, cue
    return "unknown", None


def _dying_process_cues():
    """The crash group's first two rows in ``lexicon/what.yaml``: the zh and en
    words for a process that dies. The rows after them (a bare error, an HTTP
    500) are too weak to turn a freeze into a crash."""
    return next(g for g in lexicon("what").groups if g.value == "crash").cues[:2]


def _hang_then_crash(full: str, prose: str, err: str, cue: str) -> tuple[str, str]:
    strong = _dying_process_cues()
    at = prose.find(cue)
    for m in _THEN.finditer(prose, max(at, 0)):
        after = prose[m.end():m.end() + 60]
        found = _first(strong, after, negatable=True)
        if not found and err and full.find(err, m.end() - 1) >= 0 and full.find(err, m.end() - 1) - m.end() < 12:
            found = _first(strong, err)
        if found:
            return "crash", found
    return "hang", cue


@dataclass(frozen=True)
class Symptom:
    when: str
    what: str
    phase: str
    cue: str | None                # the words (or the learned reading) that decided the phase
    learned: tuple[str, ...] = ()  # the axes a learned reader gave (no cue said them, or it overruled one): weak evidence


def _learned(axis: str, seen: Scrubbed, failed: bool, threshold: float | None = None) -> Guess | None:
    """The learned reading on ``axis`` (of the view :mod:`scrub` names for
    it), unless it is a value the user denied ("it doesn't crash at load, it
    dies later"): the denied word is still in the text, and a reader of
    character n-grams half-reads it as said, so where the message rules a value
    out only a confident guess of another stands."""
    guess = learned.guess(axis, learned.view(axis, seen), threshold=threshold)
    if guess is None:
        return None
    denied = _read(axis, seen.numbers, seen.error or "", failed, denials=False)[0]
    if guess.value == denied or denied != "unknown" and guess.probability < _SURE_DESPITE_A_DENIAL:
        return None
    return guess


# a message put as a question: a question mark, or a Chinese question word that needs none
_QUESTION = re.compile(r"[?？]|吗|呢|多少|怎么|如何|能否|能不能|可不可以|会不会|是否|要不要|够不够|有没有|请问|请教")


def _asks_without_trouble(seen: Scrubbed) -> bool:
    chance = learned.no_trouble(learned.view("what", seen))
    return chance is not None and chance >= learned.MAX_NO_TROUBLE


def read_symptom(seen: Scrubbed, want_parallel: int | None) -> Symptom:
    """The symptom of a message (:func:`scrub.scrub`'s views of it: the cues
    read ``numbers``, where quoted errors are blanked, and the error apart).
    Where no cue says *what* or *when*, :mod:`learned` may, and a very sure
    learned reading overrides a cue's (``Symptom.learned``)."""
    full, prose, error = seen.norm, seen.numbers, seen.error
    err = error or ""
    what, what_cue = _read("what", prose, err, failed=True)
    if what == "hang":
        what, what_cue = _hang_then_crash(full, prose, err, what_cue)
    failed = what not in ("unknown", "slow") or bool(error)
    when, when_cue = _read("when", prose, err, failed)
    if when == "over_time" and what == "unknown":
        what, what_cue = "oom", when_cue  # memory that only grows is a shortage on its way
    taught = []
    # where no cue said what, the learned *what* may; where one did, only one very sure of another
    guess = _learned("what", seen, True, None if what == "unknown" else learned.OVER_A_CUE["what"])
    if guess is not None and guess.value != what:
        what, what_cue = guess.value, guess.cue
        failed = what not in ("unknown", "slow") or bool(error)
        taught.append("what")
    # several requests at once and trouble of any kind, a slowdown too ("NUM_PARALLEL=4 以后速度掉到 1~2")
    if when == "unknown" and (failed or what == "slow") and want_parallel and want_parallel > 1:
        when, when_cue = "concurrent", f"parallel {want_parallel}"
    if when == "unknown" and _OLLAMA_RUN.search(full) and what in ("oom", "crash", "hang"):
        when, when_cue = "load", "ollama run"  # an error straight after `ollama run` came from loading
    # a message put as a question that reports no trouble, which the reader finds likely, asks ("how
    # much VRAM for 4 people at the same time?"): a time a cue read in it does not make it a symptom
    if what == "unknown" and not error and when != "unknown" and _QUESTION.search(full) and _asks_without_trouble(seen):
        when, when_cue = "unknown", None
    # *when* is asked only where the message reports trouble (no trouble: a question, not a symptom),
    # and where a cue said when, it gives way only to a learned reading very sure of another time
    if when != "unknown" or what != "unknown" or error:
        guess = _learned("when", seen, failed, None if when == "unknown" else learned.OVER_A_CUE["when"])
        if guess is not None and guess.value != when:
            when, when_cue = guess.value, guess.cue
            taught.append("when")
    if when != "unknown":
        return Symptom(when, what, _PHASE_OF_WHEN[when], when_cue, tuple(taught))
    return Symptom(when, what, _PHASE_OF_WHAT.get(what, "unknown"), what_cue, tuple(taught))
