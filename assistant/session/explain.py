"""Answers to the questions a user asks in the middle of the chat.

"what does KV cache mean?" gets the glossary's entry for each term it names
(``glossary.<term>`` in the catalog, found by the names in
``intake/lexicon/terms.yaml``); "为什么要先缩上下文？" gets the method's reason
for the step in hand (``method.<kind>``), with the rule's own sentence for
it, and the method's reason for any other step the question names ("why
context before quantization?" names both). The facts stay the rules': this
module only says, in the user's language, what the method and the rules
already decided.
"""
from __future__ import annotations

from functools import lru_cache

import yaml

from assistant.report.why import METHOD_STEPS, step_kind
from assistant.session.replies import LEXICON, Reply, tokens
from common.catalog import t

#: the step of the method a term belongs to, for "why ... <term>?"
TERM_STEP = {"num_ctx": "context", "kv_cache": "context", "quantization": "quant", "retest": "stability",
             "verified": "stability", "baseline": "baseline", "num_batch": "backend", "num_parallel": "backend",
             "flash_attention": "backend"}
#: at most this many glossary entries for one question
MOST_TERMS = 3


@lru_cache(maxsize=1)
def _names() -> tuple[tuple[tuple[str, ...], str], ...]:
    data = yaml.safe_load((LEXICON / "terms.yaml").read_text(encoding="utf-8"))
    pairs = {(tuple(tokens(str(name))), term) for term, names in data.items() for name in names}
    return tuple(sorted((p for p in pairs if p[0]), key=lambda p: len(p[0]), reverse=True))


def terms_in(text: str) -> list[str]:
    """The glossary terms a text names, in the order it names them (the
    longest name wins where two overlap: "kv cache" before "cache")."""
    toks = tokens(text)
    found: list[str] = []
    i = 0
    while i < len(toks):
        for name, term in _names():
            if tuple(toks[i:i + len(name)]) == name:
                if term not in found:
                    found.append(term)
                i += len(name)
                break
        else:
            i += 1
    return found


def answer(reply: Reply, step: dict | None, reason: str = "") -> list[str]:
    """The lines that answer ``reply`` (a question) while ``step`` (the
    ``next`` the rules asked for, or None) waits; ``reason`` is the rule's
    sentence for that step, in the session's language."""
    terms = terms_in(reply.text)
    if reply.why:
        kinds = [step_kind(step)] if step else []
        kinds += [TERM_STEP[x] for x in terms if x in TERM_STEP]
        kinds = [k for i, k in enumerate(kinds) if k in METHOD_STEPS and k not in kinds[:i]]
        lines = [t(f"method.{k}") for k in kinds[:2]]
        if reason:
            lines.append(reason)
        if lines:
            return lines
    if terms:
        return [t(f"glossary.{x}") for x in terms[:MOST_TERMS]]
    return [t("glossary.unknown", terms=t("glossary.names"))]
