"""Tokens and answers for the simulated server: counted and written the same
way every time, so a probe that sends the same input gets the same output.

Tokens are counted without a tokenizer: a CJK character is one token, and
any other run of non-space characters costs one token per started 4
characters (a leading space rides along), which is close to what Llama-class
tokenizers give for English prose. Answers are built from the prompt (its
numbers and inline code spans are repeated, as a good model would when told
to keep them) plus sentences picked from a fixed bank by a hash of the seed
and the prompt. A tag marked incoherent answers in one of two broken ways:
``repetitive`` loops on one sentence until the token limit, ``garbled``
scrambles words, digits and characters. What an answer does NOT depend on is
the quantization of a coherent tag: all coherent tags of a model answer alike.
"""
from __future__ import annotations

import hashlib
import random
import re

_CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef"
_PIECE = re.compile(rf"\s*(?:[{_CJK}]|[^\s{_CJK}]{{1,4}})")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_CODE = re.compile(r"`([^`\n]+)`")
_CJK_CHAR = re.compile(rf"[{_CJK}]")

MAX_NUMBERS = 40
MAX_SPANS = 5
RUNAWAY_TOKENS = 4096   # a looping tag stops here when no num_predict bounds it

_OPENERS = (
    "Here is a short answer based on the text you sent.",
    "I read the whole input and kept the important details.",
    "The text is clear, and the main points are below.",
    "This is a summary of what the input says.",
)
_BANK = (
    "The first part describes the setting and why the work matters.",
    "Each step depends on the one before it, so the order is important.",
    "The figures are given as they appear in the original text.",
    "Nothing in the input suggests that the plan should change.",
    "A careful reader would check the measurements once more before acting.",
    "The main risk is time, not cost, according to the note.",
    "Most of the details concern maintenance and how often it happens.",
    "The records agree with each other on the important points.",
    "Where the text is vague, the safer reading has been chosen.",
    "The last paragraph explains what happens if nothing is done.",
    "Two of the points are about people and one is about equipment.",
    "The author expects the change to pay for itself within a few seasons.",
    "Short remarks in the records give useful context for the numbers.",
    "The instructions are meant to be followed in a single visit.",
    "A log of each step makes it easier to find mistakes later.",
    "The summary leaves out examples but keeps every instruction.",
    "Weather and water levels explain most of the changes over time.",
    "The proposal is modest and can be reviewed in one meeting.",
    "Any open question should go to the engineer on call.",
    "This answer ends here, with all the requested points covered.",
)
_BANK_ZH = (
    "以下是根据你发送的文本整理的简短回答。",
    "第一部分说明了背景以及这项工作的意义。",
    "每一步都依赖前一步，所以顺序很重要。",
    "文中的数字按原文保留。",
    "文本没有提到需要改变计划的理由。",
    "主要风险在于时间，而不是费用。",
    "大部分细节与维护及其频率有关。",
    "记录之间在关键问题上是一致的。",
    "最后一段说明了如果不采取行动会发生什么。",
    "回答到此结束，所有要求的要点都已涵盖。",
)
_ODD = "▒¤§¿ǂ¶"


def pieces(text: str) -> list[str]:
    """The text cut into simulated tokens (joined, they give the text back,
    apart from trailing white space)."""
    return _PIECE.findall(text)


def count_tokens(text: str) -> int:
    return len(pieces(text))


def _rng(seed: int, prompt: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x00{prompt}".encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _numbers(prompt: str) -> list[str]:
    seen: dict[str, None] = {}
    for m in _NUMBER.finditer(prompt):
        seen.setdefault(m.group(0).rstrip(","), None)
        if len(seen) >= MAX_NUMBERS:
            break
    return list(seen)


def _spans(prompt: str) -> list[str]:
    return list(dict.fromkeys(_CODE.findall(prompt)))[:MAX_SPANS]


def is_chinese(prompt: str) -> bool:
    cjk = len(_CJK_CHAR.findall(prompt))
    return cjk > 0 and cjk * 4 >= len(prompt.strip()) // 2


def coherent(prompt: str, seed: int = 0) -> str:
    """A sound, finished answer to ``prompt``."""
    rng = _rng(seed, prompt)
    numbers, spans = _numbers(prompt), _spans(prompt)
    if is_chinese(prompt):
        parts = [_BANK_ZH[0]]
        if numbers:
            parts.append("文中的数值：" + "、".join(numbers) + "。")
        if spans:
            parts.append("代码保持原样：" + "、".join(f"`{s}`" for s in spans) + "。")
        parts += rng.sample(_BANK_ZH[1:-1], rng.randint(2, 5)) + [_BANK_ZH[-1]]
        return "".join(parts)
    parts = [rng.choice(_OPENERS)]
    if numbers:
        parts.append("The values in the text are " + ", ".join(numbers) + ".")
    if spans:
        parts.append("The code stays exactly as written: " + ", ".join(f"`{s}`" for s in spans) + ".")
    parts += rng.sample(_BANK[:-1], rng.randint(3, 8)) + [_BANK[-1]]
    return " ".join(parts)


def repetitive(prompt: str, seed: int = 0, tokens: int = RUNAWAY_TOKENS) -> str:
    """An answer that gets stuck on one sentence (runs to the token limit)."""
    rng = _rng(seed, prompt)
    loop = rng.choice(_BANK_ZH[1:-1] if is_chinese(prompt) else _BANK[:-1])
    text = rng.choice(_OPENERS)
    sep = "" if is_chinese(prompt) else " "
    while count_tokens(text) < tokens:
        text += sep + loop
    return text


def garbled(prompt: str, seed: int = 0) -> str:
    """The coherent answer broken the way a damaged quantization breaks it:
    words out of order, digits changed, stray symbols, no proper ending."""
    rng = _rng(seed + 1, prompt)
    words = coherent(prompt, seed).split()
    out = []
    for i, word in enumerate(words):
        word = re.sub(r"\d", lambda m: str((int(m.group(0)) + 3) % 10), word).replace("`", "")
        if rng.random() < 0.35:
            cut = rng.randrange(len(word) + 1)
            word = word[:cut] + rng.choice(_ODD) + rng.choice(_ODD) + word[cut:]
        out.append(word)
        if i % 5 == 4:
            j = rng.randrange(len(out))
            out[j], out[-1] = out[-1], out[j]
    return " ".join(out).rstrip(".。") + " " + rng.choice(_ODD)


def answer(prompt: str, seed: int = 0, kind: str = "coherent", limit_tokens: int = RUNAWAY_TOKENS) -> str:
    if kind == "repetitive":
        return repetitive(prompt, seed, min(limit_tokens, RUNAWAY_TOKENS))
    if kind == "garbled":
        return garbled(prompt, seed)
    return coherent(prompt, seed)
