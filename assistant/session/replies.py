"""What a reply to one of the chat's questions means, before its value is read.

A person does not answer a yes/no question with a bare "yes": "好的，可以",
"要保持，我的文档就是要 8k", "sure, go ahead", "no, 4k is plenty". And a reply
is not always an answer: "等一下，为什么要先缩上下文？" and "what does KV cache
mean?" are questions to answer before asking again; "go back" and "跳过" steer
the conversation; "actually it's qwen2.5:7b" corrects an earlier answer.
:func:`read_reply` says which of these a reply is; :func:`yes_no` reads a yes
or a no from the reply's first clause, whatever reason follows it.

The words are data (``intake/lexicon/replies.yaml`` beside the yes/no lexicon),
compared token by token after NFKC and lower-casing: a Latin word or a
number is one token, a Han character is one.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

LEXICON = Path(__file__).parents[1] / "intake" / "lexicon"
_TOKEN = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")
_CLAUSE = re.compile(r"[,，。.!！;；、:：\n]| - |—")
#: what a reply is
ANSWER, QUESTION, BACK, SKIP = "answer", "question", "back", "skip"


@dataclass(frozen=True)
class Reply:
    kind: str               # ANSWER, QUESTION, BACK, SKIP (a correction is an ANSWER: see correction())
    text: str               # as typed, trimmed
    why: bool = False       # a QUESTION asking for a reason, not for a meaning


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(norm(text))


def norm(text: str) -> str:
    return unicodedata.normalize("NFKC", str(text)).strip().lower()


@lru_cache(maxsize=None)
def _lexicon(name: str) -> dict:
    return yaml.safe_load((LEXICON / name).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def phrases(key: str, name: str = "replies.yaml") -> tuple[tuple[str, ...], ...]:
    """The phrases of one list as token tuples, longest first."""
    found = {tuple(tokens(str(p))) for p in _lexicon(name)[key]}
    return tuple(sorted((p for p in found if p), key=len, reverse=True))


def _starts(toks: list[str], key: str, name: str = "replies.yaml") -> tuple[str, ...] | None:
    for p in phrases(key, name):
        if tuple(toks[:len(p)]) == p:
            return p
    return None


def has(text_or_tokens, key: str, name: str = "replies.yaml") -> bool:
    """Whether any phrase of the list ``key`` occurs in the text, on token boundaries."""
    toks = tokens(text_or_tokens) if isinstance(text_or_tokens, str) else text_or_tokens
    return any(tuple(toks[i:i + len(p)]) == p for p in phrases(key, name) for i in range(len(toks) - len(p) + 1))


def steers(text: str, key: str) -> bool:
    """Whether the reply is a phrase of ``key`` ("back", "skip") with at most
    the words that stand around one ("go back to the previous question",
    "返回上一步", "这个问题跳过吧") and punctuation: nothing else it could mean."""
    toks = [x for x in tokens(text) if x.strip("?？.。!！,，~、")]
    seen, i = False, 0
    while i < len(toks):
        p = _starts(toks[i:], key)
        if p:
            seen, i = True, i + len(p)
            continue
        p = _starts(toks[i:], "steer_words")
        if not p:
            return False
        i += len(p)
    return seen


def yes_no(text: str) -> bool | None:
    """True / False when the reply's first clause is a yes or a no (with
    fillers, and with a reason after it), None when it is neither. A no word
    anywhere in that clause wins: "不要保持" is no."""
    first = _CLAUSE.split(norm(text).strip(" .!?。！？~"), maxsplit=1)[0]
    toks = tokens(first)
    said: set[str] = set()
    i = 0
    while i < len(toks):
        # the longest phrase of any list at this point ("no problem" is a yes, "不要" a no); a tie goes to no
        found = [(len(p), rank, key) for rank, (key, name) in enumerate((("no", "yesno.yaml"), ("yes", "yesno.yaml"),
                                                                         ("fillers", "replies.yaml")))
                 for p in [_starts(toks[i:], key, name)] if p]
        if found:
            size, _, key = max(found, key=lambda f: (f[0], -f[1]))
            if key != "fillers":
                said.add(key)
            i += size
            continue
        if said and any(tuple(toks[i:i + len(r)]) == r for r in _reasons()):
            break  # "yes because ...": the reason that follows does not change the answer
        return None
    if "no" in said:
        return False
    return True if "yes" in said else None


@lru_cache(maxsize=1)
def _reasons() -> tuple[tuple[str, ...], ...]:
    return phrases("reason_starts")


def is_question(text: str) -> bool:
    low = norm(text)
    toks = tokens(low)
    if not toks:
        return False
    if low.rstrip().endswith(("?", "？")):
        return True
    if _starts(toks, "question_starts") or has(toks, "question_inside"):
        return True
    tail = low.rstrip(" .。!！~")
    return any(tail.endswith(e) for e in map(str, _lexicon("replies.yaml")["question_ends"]) if not e.isascii())


def read_reply(text: str) -> Reply:
    """What kind of reply ``text`` is (its value is read by the answers parser)."""
    text = str(text).strip()
    if steers(text, "back"):
        return Reply(BACK, text)
    if steers(text, "skip"):
        return Reply(SKIP, text)
    if is_question(text) and yes_no(text) is None:
        return Reply(QUESTION, text, why=has(text, "why_words"))
    return Reply(ANSWER, text)


def correction(text: str) -> bool:
    """Whether the reply says it corrects something said before."""
    return has(text, "correction")


def after_stop(text: str) -> str | None:
    """A reply to "the probe was stopped: run it again, skip it, or stop here?":
    "again", "skip", "stop", or None when it says none of them."""
    toks = tokens(text)
    if not toks:
        return None
    said = [key for key, lst in (("again", "again"), ("skip", "skip_probe"), ("stop", "stop")) if has(toks, lst)]
    return said[0] if len(said) == 1 else None
