"""Which language a message is written in, with quoted errors and code left out."""
from __future__ import annotations

import re

from assistant.intake.error_text import QUOTES, find_error
from assistant.intake.text import blank, normalise

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
# an English word of prose, standing between spaces, punctuation or ideographs;
# "level=ERROR", "sched.go:455" and "qwen2.5:7b" in a pasted log are not prose
_PROSE_WORD = re.compile(
    r"(?<![^\s(\"'“‘\u3400-\u9fff\uff00-\uffef])[A-Za-z][A-Za-z']*[A-Za-z]"
    r"(?=[\s,.!?;:)\"'”’\u3000-\u303f\u3400-\u9fff\uff00-\uffef]|$)"
)


def detect_lang(text: str) -> str:
    """``"zh"`` when CJK ideographs make a meaningful share of the prose, else ``"en"``.

    Quoted error texts and code are left out of the count: a Chinese user who
    pastes a long English log is still writing Chinese. Ideographs are weighed
    against English words, not letters, because one ideograph carries about
    as much as a short word.
    """
    if not isinstance(text, str) or not text:
        return "en"
    norm = normalise(text)
    _err, spans = find_error(norm)
    prose = blank(norm, spans + [m.span() for rx in QUOTES for m in rx.finditer(norm)])
    cjk = len(_CJK.findall(prose))
    words = len(_PROSE_WORD.findall(prose))
    if cjk == 0 and words == 0:  # everything was quoted or code: judge the whole text
        cjk, words = len(_CJK.findall(norm)), len(_LATIN_WORD.findall(norm))
    if cjk == 0:
        return "en"
    if words == 0:
        return "zh"
    return "zh" if cjk / (cjk + words) >= 0.35 else "en"


def has_words(text: str) -> bool:
    """Whether ``text`` says anything a language can be told from (an ideograph
    or an English word; "4060 8G" does not)."""
    return isinstance(text, str) and bool(_CJK.search(text) or _LATIN_WORD.search(text))
