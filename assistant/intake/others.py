"""Words about other models on the same server, in English and Chinese:
whether a message says another model shares it (a RAG embedder, a second
model, evictions and reloads), and which of the server's models an answer to
"what else must stay loaded?" names.
"""
from __future__ import annotations

import re

from probes.ollama_api import canonical_name

#: words that say another model shares the server (a RAG embedder, a second
#: model, evictions and reloads), in English and Chinese: the chat then asks
#: what else must stay loaded
OTHER_MODEL_WORDS = ("embed", "another model", "other model", "second model", "two models", "both models",
                     "evict", "reload", "keeps loading", "switching models",
                     "嵌入", "向量", "另一个模型", "其他模型", "第二个模型", "两个模型", "同时加载", "驱逐",
                     "重新加载", "切换模型")
# ("unload" alone is left out: a user whose memory does not come back after an unload speaks of one model)


#: an answer that names no model: "what else must stay loaded?" -- "nothing"
NOTHING_WORDS = ("no", "none", "nothing", "nothing else", "n/a", "-", "没有", "无", "没", "不用", "没有了")


def mentions_other_models(text: str) -> bool:
    """Whether the user's words say another model shares the server ("RAG"
    as a word of its own: "paragraphs" and "storage" say nothing of it)."""
    low = (text or "").lower()
    return any(word in low for word in OTHER_MODEL_WORDS) or re.search(r"(?<![a-z])rag(?![a-z])", low) is not None


def names_in(answer: str, tags: list[str]) -> tuple[list[str], list[str]]:
    """The server's tags an answer names (a tag, or a bare name with one tag
    of that name), and the words that name none. ``,``, ``，``, ``、``, ``;``
    and spaces separate names."""
    found, unknown = [], []
    if (answer or "").strip().lower().rstrip(".。!！") in NOTHING_WORDS:
        return found, unknown
    by_name = {canonical_name(tag): tag for tag in tags}
    for word in (w for w in re.split(r"[,，、;；\s]+", answer or "") if w):
        tag = by_name.get(canonical_name(word))
        if tag is None:
            same = [t_ for t_ in tags if canonical_name(t_).split(":")[0] == word.lower()]
            tag = same[0] if len(same) == 1 else None
        if tag is None:
            unknown.append(word)
        elif tag not in found:
            found.append(tag)
    return found, unknown
