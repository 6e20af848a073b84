"""Whether the context may shrink: "上下文不能减少", "I need the full 32k"
(must stay) against "8k 就够了", "happy to reduce it" (may shrink).

The cues are data (``lexicon/keep_context.yaml``, each with its examples),
read in order: a message that says both is read as "must stay", since running
out is worse than reserving too much.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from assistant.intake.phase import Cue
from assistant.intake.text import ICASE


@dataclass(frozen=True)
class KeepGroup:
    keep: bool              # what a cue of this group says: True, the context must not shrink
    cues: tuple[Cue, ...]


@lru_cache(maxsize=None)
def lexicon() -> tuple[KeepGroup, ...]:
    """The groups of ``lexicon/keep_context.yaml``, ``{ctx}`` in each cue filled in."""
    data = yaml.safe_load((Path(__file__).parent / "lexicon" / "keep_context.yaml").read_text(encoding="utf-8"))
    ctx = data["ctx"]
    return tuple(
        KeepGroup(bool(g["keep"]), tuple(Cue(re.compile(rx.replace("{ctx}", ctx), ICASE), tuple(examples))
                                         for rx, examples in g["cues"]))
        for g in data["groups"]
    )


def find_keep_context(text: str) -> bool | None:
    for group in lexicon():
        if any(cue.pattern.search(text) for cue in group.cues):
            return group.keep
    return None
