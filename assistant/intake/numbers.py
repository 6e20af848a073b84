"""Numbers as people write them in counts and sizes: digits, English words
("two dozen"), Chinese numerals ("二十", "两三")."""
from __future__ import annotations

import re


_ZH_NUM = {"一": 1, "二": 2, "两": 2, "俩": 2, "三": 3, "四": 4, "五": 5, "六": 6,
           "七": 7, "八": 8, "九": 9, "十": 10}
# counts and sizes people spell out ("two dozen agents", "eight gigs", "sixteen users")
_EN_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
             "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "sixteen": 16, "twenty": 20, "twenty-four": 24,
             "thirty": 30, "thirty-two": 32, "forty": 40, "forty-eight": 48, "fifty": 50, "eighty": 80,
             "a dozen": 12, "half a dozen": 6, "two dozen": 24, "three dozen": 36}
EN_NUM = {**_EN_WORDS, "a couple of": 2, "a pair of": 2}
EN_ALT = "|".join(sorted((re.escape(w) for w in _EN_WORDS), key=len, reverse=True))
# Chinese numerals run together: "二十", "十五", "一百"; "两三" (a range) counts as its larger end
NUMWORD = r"(\d+|" + EN_ALT + r"|[一二两俩三四五六七八九十百千]+)"


def zh_int(word: str) -> int | None:
    total, digit = 0, 0
    for ch in word:
        if ch in "十百千":
            total += (digit or 1) * {"十": 10, "百": 100, "千": 1000}[ch]
            digit = 0
        elif ch in _ZH_NUM:
            digit = max(digit, _ZH_NUM[ch])
        else:
            return None
    return total + digit or None


def count(word: str) -> int | None:
    word = re.sub(r"\s+", " ", word.strip().lower())
    if word.isdigit():
        return int(word)
    return EN_NUM.get(word) or zh_int(word)


# a length of text may be a fraction: "半" is half
ZH_DIGITS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10, "半": 0.5}


def zh_number(text: str) -> float | None:
    """Digits, or up to two Chinese numerals ("三", "十五", "三十", "半"); None for anything longer."""
    try:
        return float(text)
    except ValueError:
        pass
    if text == "十":
        return 10
    if len(text) == 1:
        return ZH_DIGITS.get(text)
    if len(text) == 2 and text[0] == "十":
        return 10 + ZH_DIGITS.get(text[1], 0)
    if len(text) == 2 and text[1] == "十":
        return ZH_DIGITS.get(text[0], 0) * 10
    return None


_SPOKEN_NOISE = re.compile(r"(?:tokens?|个\s*token|个字|字|个|words?|左右|大概|大约|约|差不多|about|around|roughly|some)",
                           re.IGNORECASE)


def spoken_number(text: str) -> int | None:
    """A whole answer that is a number said in words: "三万二" (32000),
    "一万六", "16千", "两千", "thirty-two thousand", "eight k" (8 x 1024, as
    "8k" is everywhere in oomvet), "four". None for anything else."""
    s = re.sub(r"\s+", " ", _SPOKEN_NOISE.sub(" ", text.strip().lower())).strip()
    if not s:
        return None
    m = re.fullmatch(r"([a-z][a-z -]*?)(?: (thousand|k))?", s)
    if m and EN_NUM.get(m.group(1).strip()):
        return EN_NUM[m.group(1).strip()] * {"thousand": 1000, "k": 1024}.get(m.group(2) or "", 1)
    m = re.fullmatch(r"(\d+(?:\.\d+)?) ?(千|万)", s)
    if m:
        return int(float(m.group(1)) * {"千": 1000, "万": 10000}[m.group(2)])
    m = re.fullmatch(r"([一二两俩三四五六七八九十百千]+)万([一二两三四五六七八九])?千?", s)
    if m and zh_int(m.group(1)):
        return zh_int(m.group(1)) * 10000 + (_ZH_NUM[m.group(2)] * 1000 if m.group(2) else 0)
    m = re.fullmatch(r"([一二两俩三四五六七八九])千([一二两三四五六七八九])?", s)
    if m:  # "两千五" is 2500
        return _ZH_NUM[m.group(1)] * 1000 + (_ZH_NUM[m.group(2)] * 100 if m.group(2) else 0)
    return zh_int(s) if re.fullmatch(r"[一二两俩三四五六七八九十百千]+", s) else None
