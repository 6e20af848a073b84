"""Text helpers every intake reader shares: one normal form for Chinese and
English input, and blanking spans so a later reader skips text an earlier one
claimed (a quoted error, a model name, a GPU)."""
from __future__ import annotations

import re
import unicodedata

# ASCII word boundaries: a CJK character next to "4060" or "qwen2.5" must not
# count as part of the same word, or "用4060跑qwen2.5" would yield nothing.
ICASE = re.IGNORECASE | re.ASCII


def normalise(text: str) -> str:
    # NFKC folds full-width digits, letters and punctuation ("３２Ｋ", "，", "：")
    # that Chinese input methods produce into ASCII, so one set of patterns serves both.
    return unicodedata.normalize("NFKC", text)


def blank(text: str, spans) -> str:
    """Spaces over ``spans``, keeping offsets, so later patterns skip that text."""
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)
