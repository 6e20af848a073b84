"""Whether the user's app sends no context at all: "my app does not set
num_ctx", "客户端没有设置 num_ctx". Such a request gets the server's default
context, whatever context the user needs, so the user's own setup is run
without one."""
from __future__ import annotations

import re

from assistant.intake.text import ICASE

_SETS = r"(?:sets?|sends?|pass(?:es)?|specif(?:y|ies)|gives?|includes?)"
_UNSET = re.compile(
    r"(?:does\s*n[o']?t|do\s*n[o']?t|never|not|no\s+longer)\s+" + _SETS + r"\s+(?:a\s+|any\s+|the\s+)?num_ctx"
    r"|(?:^|[\s(,;])(?:no|without(?:\s+a)?|without\s+any)\s+num_ctx"
    r"|(?:没有?|不|未|从不)(?:设置?|设定|传|带|指定|配置?)\s*(?:过\s*)?num_ctx"
    r"|num_ctx\s*(?:都|也|从来)?(?:没有?|不|未)(?:设置?|设定|传|带|指定|配置?)", ICASE)


def find_ctx_unset(text: str) -> bool | None:
    """True when the message says the app sends no num_ctx; None when it says nothing of it."""
    return True if _UNSET.search(text or "") else None
