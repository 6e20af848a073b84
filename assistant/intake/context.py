"""The context a message asks for: a token count ("num_ctx 16384", "32k
上下文", "-c 32768"), or an estimate from a length of text ("三万字的报告",
"a 50,000 character log")."""
from __future__ import annotations

import re

from assistant.intake.numbers import zh_number
from assistant.intake.text import ICASE


_K = r"(\d+(?:\.\d+)?)\s?(k|K)?"
_CTX_WORD = (r"(?:ollama_context_length|context_length|num_ctx|n_ctx|ctx[-_ ]?size|--ctx-size|token[-_ ]?limit|"
             r"context(?:[-_ ](?:window|length|size|len))?|上下文(?:长度|窗口)?|ctx)")
_NOT_TOKENS_AFTER = (r"(?!\s*(?:%|g\b|gb|gib|m\b|mb|mib|t\b|tb|个?\s*(?:人|用户|并发|请求)|"
                     r"users?\b|people\b|requests?\b|b\b|bit|层|layers?\b|[/／]s))")
_CTX_PATTERNS = [
    # "num_ctx 16384", "上下文开到 32k", "context of 8192", "context window to 32k"
    re.compile(_CTX_WORD + r"[^\d\n。.,;；!?]{0,14}?(?<![\w.])" + _K + r"(?!\w|\.\d)" + _NOT_TOKENS_AFTER, ICASE),
    # "32k 上下文", "8K context", "16k tokens of context", "128k 的上下文窗口"
    re.compile(r"(?<![\w.])" + _K + r"\s*(?:tokens?\s*(?:of\s*)?)?(?:的\s*)?(?:上下文|context|ctx)", ICASE),
    # "6000-token prompt", "32k tokens" (not speeds: "5 tokens/s", "每秒 3 个 token")
    re.compile(r"(?<![\w.])" + _K + r"[\s-]*(?:个\s*)?tokens?\b(?!\s*(?:/|per\b|每))", ICASE),
    # a bare "128k", "超过 8k": in this room a k-number is a context size
    # (not a length of text, "40k characters", "200k+ chars": estimate_ctx reads those)
    re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(k|K)(?![a-zA-Z\d])(?!\s*(?:[a-z]+\s+)?(?:calls|queries|embeddings|iterations|steps)\b)"
               r"(?!\s*(?:requests|users|downloads|stars|"
               r"docs|documents|files|rows|records|items|images|chunks|次|条))"
               r"(?!\+?\s*(?:characters?|chars|words?|字|词|lines|行)\b)", ICASE),
    # llama.cpp's "-c 32768"
    re.compile(r"(?<![\w-])-c\s+(\d+)()\b"),
    # a change of setting names the new value second: "num_ctx 从 8192 改成 32768", "ctx from 4096 to 16384"
    re.compile(_CTX_WORD + r"[^\d\n。.,;；!?]{0,10}?(?:从|from)\s*\d+(?:\.\d+)?\s?k?\s*"
               r"(?:改成|改到|调到|调成|开到|加到|提到|拉到|设成|设到|到|to|->|→)\s*(?<![\w.])" + _K + r"(?!\w|\.\d)"
               + _NOT_TOKENS_AFTER, ICASE),
]
# "2万 token", "一万二 token", "八千多 token": a count of tokens in Chinese place words
_WAN = re.compile(r"(\d+(?:\.\d+)?|[一二两三四五六七八九十]+)\s*(万|千)\s*([一二两三四五六七八九])?\s*(?:多|来)?\s*"
                  r"(?:个\s*)?(?:token|上下文)", ICASE)


# a size said to work ("32k 和 128k 都能跑", "num_ctx 设 8192 一切正常") is not the one asked about, when another is named
_WORKS_AFTER = re.compile(r"\s*(?:k|K)?\s*(?:tokens?\s*)?(?:(?:和|跟|与|and|or|或|,|，|、|/)\s*\d+(?:\.\d+)?\s?k?\s*)*(?:的时候|时)?\s*"
                          r"(?:it\s+|it's\s+)?(?:都|也|还|一切|都还)?\s*(?:能跑|能用|正常|没问题|没事|好好的|可以跑|works?|worked|is fine|are fine|"
                          r"was fine|were fine|run fine|runs fine|both run|ok\b)", ICASE)
# a second setting of the same knob later in the sentence: "num_ctx 设 8192 一切正常 设到 40960 就崩"
_SET_AGAIN = re.compile(r"(?:设到|设成|设为|改成|改到|调到|开到|拉到|加到|提到|set (?:it )?to|raised? (?:it )?to|bump(?:ed)? (?:it )?to)\s*"
                        r"(?<![\w.])(\d{3,7})(?![\w.])" + _NOT_TOKENS_AFTER, ICASE)
_CTX_WORD_RX = re.compile(_CTX_WORD, ICASE)


def _ctx_value(number: str, k: str | None) -> int:
    value = float(number)
    return int(round(value * 1024)) if k else int(round(value))


def find_ctx(text: str) -> int | None:
    """The largest context size named: the one that fails or the one wanted.
    ``k`` is 1024 (``32k`` -> 32768), as Ollama users mean it."""
    seen = ctx_sizes(text)
    return max(seen) if seen else None


def ctx_sizes(text: str) -> list[int]:
    """Every context size named, but one said to work where another is not."""
    seen, working = [], set()
    for i, rx in enumerate(_CTX_PATTERNS):
        for m in rx.finditer(text):
            if i == 2 and re.search(r"每秒\s*(?:只有|才|就)?\s*$", text[max(0, m.start() - 6):m.start()]):
                continue
            value = _ctx_value(m.group(1), m.group(2))
            if i == 0 and value >= 1 or value >= 128:
                seen.append(value)
                if _WORKS_AFTER.match(text, m.end(1)):
                    working.add(value)
    for m in _SET_AGAIN.finditer(text):
        if _CTX_WORD_RX.search(text[max(0, m.start() - 40):m.start()]) and int(m.group(1)) >= 512:
            seen.append(int(m.group(1)))
    if set(seen) - working:
        seen = [v for v in seen if v not in working]
    for m in _WAN.finditer(text):
        n = zh_number(m.group(1))
        if n:
            place = 10000 if m.group(2) == "万" else 1000
            seen.append(int(round(n * place + (zh_number(m.group(3)) * place / 10 if m.group(3) else 0))))
    return [v for v in seen if v <= 10_000_000]


# Tokens per unit of length, for a context given as a length of text. An
# estimate, and meant to err high (running out is worse than reserving more):
# a CJK character is about one token in Llama/Qwen tokenizers; English runs
# about four characters or three quarters of a word per token.
TOKENS_PER_ZH_CHAR = 1.0
CHARS_PER_EN_TOKEN = 4.0
TOKENS_PER_EN_WORD = 4 / 3
_ZH_CHARS = re.compile(r"([\d.]+|[一二两三四五六七八九十半]+)\s*(万|千)?(?:\s*([\d一二两三四五六七八九])\s*(?:千|百)?)?"
                       r"\s*(?:多)?\s*(?:个)?\s*(?:英文|english|中文)?\s*(字|单?词)(?!节)")
# a length per piece ("每段一千多字", "each chunk is 2,000 words") is not the length of the input
_PER_PIECE = re.compile(r"(?:(?:每|单)\s*(?:一)?\s*(?:段|篇|份|条|章|页|块|个片段|个文件|个文档|片段)|\b(?:each|per)\s+[a-z]+\b)"
                        r"[^。,，;；.!?\n]{0,12}$", ICASE)
_EN_AFTER = re.compile(r"符\s*(?:的)?\s*(?:英文|english)", ICASE)
_EN_BEFORE = re.compile(r"(?:英文|english)\s*(?:的)?\s*(?:大概|大约|约|有)?\s*$", ICASE)
_EN_LENGTH = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s*(k)?\+?[- ]?(characters?|chars|words?)\b", ICASE)


def estimate_ctx(text: str) -> int | None:
    """Tokens estimated from a length of text ("三万字的报告", "a 50,000 character
    log", "a 20k-word transcript", "8000 词的英文报告": words, counted as words
    are); None when no length is given."""
    seen = []
    for m in _ZH_CHARS.finditer(text):
        if _PER_PIECE.search(text[max(0, m.start() - 16):m.start()]):
            continue
        n = zh_number(m.group(1))
        if n:
            n *= {"万": 10000, "千": 1000}.get(m.group(2), 1)
            if m.group(2) and m.group(3):  # the next place down: "一万五千" 15000, "三千五" 3500
                n += zh_number(m.group(3)) * {"万": 1000, "千": 100}[m.group(2)]
            if n >= 500:
                if m.group(4) == "字" and (_EN_AFTER.match(text, m.end()) or _EN_BEFORE.search(text[max(0, m.start() - 10):m.start()])):
                    seen.append(n / CHARS_PER_EN_TOKEN)  # "20万字符的英文代码": English characters
                    continue
                seen.append(n * (TOKENS_PER_ZH_CHAR if m.group(4) == "字" else TOKENS_PER_EN_WORD))
    for m in _EN_LENGTH.finditer(text):
        if _PER_PIECE.search(text[max(0, m.start() - 24):m.start()]):
            continue
        n = float(m.group(1).replace(",", "")) * (1000 if m.group(2) else 1)
        tokens = n / CHARS_PER_EN_TOKEN if m.group(3).lower().startswith("char") else n * TOKENS_PER_EN_WORD
        if tokens >= 128:
            seen.append(tokens)
    return round(max(seen)) if seen else None
