"""An upgrade the user blames: "it worked on 0.11.4, now it OOMs", "since I
updated Ollama", "从 0.11.4 升级到 0.34 之后就爆显存". The version they name
(if any) is where the comparison starts; the running server's own version is
read from the server, never from the message."""
from __future__ import annotations

import re

from assistant.intake.text import ICASE

_VERSION = r"v?(\d+\.\d+(?:\.\d+)?)"
#: a version the user ran before: "worked (fine) on 0.11.4", "from 0.11.4", "0.11.4 的时候没问题"
_FROM = (
    re.compile(r"\b(?:worked|was\s+fine|ran\s+fine|ran|was\s+ok(?:ay)?|fine|no\s+problems?)\s+"
               r"(?:\w+\s+){0,2}?(?:on|with|in|under|back\s+on|back\s+in)\s+(?:ollama\s+)?" + _VERSION, ICASE),
    re.compile(r"\b(?:upgrad|updat)\w*\s+(?:ollama\s+)?from\s+(?:ollama\s+)?" + _VERSION, ICASE),
    re.compile(r"\bfrom\s+(?:ollama\s+)?" + _VERSION + r"\s+to\s+(?:ollama\s+)?v?\d+\.\d+", ICASE),
    re.compile(r"从\s*(?:ollama\s*)?" + _VERSION + r"\s*(?:版本?)?\s*(?:升级|升|更新|换)", ICASE),
    re.compile(_VERSION + r"\s*(?:版本?)?\s*(?:的时候|时|那会儿?|之前)?\s*(?:都|还|一直)?\s*(?:没问题|没事|正常|好好的|能跑|跑得好好的)",
               ICASE),
)
#: an upgrade said without the version before it
_UPGRADED = re.compile(r"\b(?:since|after)\s+(?:i|we)?\s*(?:upgrad|updat)\w*|\b(?:upgrad|updat)\w*\s+(?:ollama|to\s+v?\d)"
                       r"|\bthe\s+(?:latest\s+)?(?:upgrade|update)\b|升级|更新(?:了|到|完)|新版本?(?:之后|以后|后)", ICASE)


def find_upgraded_from(text: str) -> str | None:
    """The version the user says things worked on ("0.11.4"); "" when they
    blame an upgrade without naming one; None when they say nothing of it."""
    text = text or ""
    for rx in _FROM:
        m = rx.search(text)
        if m:
            return m.group(1)
    return "" if _UPGRADED.search(text) else None
