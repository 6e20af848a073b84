"""The model a message names: a server tag, an explicit ``name:tag``,
``ollama run X``, a name the user typed for their own model, or a known family
with its size. Also :func:`normalise_model`, the one spelling of a name.
The families and the word lists are data (``lexicon/models.yaml``)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from assistant.intake.text import ICASE

_LEXICON = yaml.safe_load((Path(__file__).parent / "lexicon" / "models.yaml").read_text(encoding="utf-8"))
# families people write bare, each with examples (lexicon/models.yaml); the order is the alternation's
FAMILIES: tuple[tuple[str, dict[str, str]], ...] = tuple((rx, dict(examples)) for rx, examples in _LEXICON["families"])
_FAMILIES = tuple(rx for rx, _examples in FAMILIES)
_NOT_MODEL_NAMES = frozenset(_LEXICON["not_model_names"])
_COMMON_PARTS = frozenset(_LEXICON["common_parts"])
_NOT_NAMES_AFTER_MODEL = frozenset(_LEXICON["not_names_after_model"])

_TAG = re.compile(
    r"(?<![\w./@-])((?:[a-z0-9][\w.-]*/)*[a-z][\w.-]*):([a-z0-9][\w.-]*)(?![\w/-]|:\S|\.\w)", ICASE
)
_BARE = re.compile(
    r"(?<![\w./-])(" + "|".join(_FAMILIES) + r")(?![\w+]|\.\w|\.cpp)"
    r"(?:[\s:-]{0,2}((?:\d+x)?\d+(?:\.\d+)?b)(?![\w]))?",
    ICASE,
)
# a family with its size still to choose ("deepseek-r1，14b 还是 32b？", "qwen3 - 8b or 14b?") names no model yet
_SIZE_CHOICE = re.compile(r"^[\s,，:：、-]*(?:\d+x)?\d+(?:\.\d+)?b\s*(?:还是|或者?|或是|\bor\b|vs\.?|/)\s*(?:\d+x)?\d+(?:\.\d+)?b\b", ICASE)
_OLLAMA_CMD = re.compile(r"\bollama\s+(?:run|pull|show|create|stop|push|cp|rm)\s+([a-z0-9][\w./:-]*)", ICASE)
# a tag the user's own model is built on (a Modelfile's "FROM qwen2.5:14b", "built on llama3.1:8b") is the
# base, not the model in trouble; the one switched to ("一 switch 到 gemma3:27b") is the one that fails
_BASE_BEFORE = re.compile(r"(?:(?-i:\bFROM)|built\s+on(?:\s+top\s+of)?|based\s+on|on\s+top\s+of|"
                          r"fine-?tuned?\s+(?:from|of|on)|基于|基座(?:是|用的是)?|底座(?:是|用的是)?)\s*[:：]?\s*$", ICASE)
_WORKS_AFTER = re.compile(r"^[^,.;:!?。，；！？\n]{0,16}?(?:就好了|好了|没问题|正常|就行|\bworks|\bis fine|\bfine\b|\bok\b)", ICASE)
_SWITCH_BEFORE = re.compile(r"(?:switch(?:ed|es|ing)?|swap(?:ped|s|ping)?)\s+(?:over\s+)?(?:from\s+\S+\s+)?(?:to|到)\s*$"
                            r"|(?:切换|切|换|改用)(?:到|成)?\s*$", ICASE)


def _tidy_model(name: str, tag: str | None = None, keep_case: bool = False) -> str:
    name = name.strip().rstrip(".-")
    if "/" not in name and not keep_case:  # Ollama library names are case-insensitive; a hf.co repo path is not
        name = name.lower()
    name = re.sub(r"\s+", "", name)
    if tag:
        return f"{name}:{tag.rstrip('.-')}"
    return name


def normalise_model(name: str | None) -> str | None:
    """A model name as Ollama resolves it: ``"NeoHorse-1"`` -> ``"neohorse-1"``,
    ``"Qwen2.5:7B-instruct-q4_K_M"`` -> ``"qwen2.5:7B-instruct-q4_K_M"`` (the tag keeps its case)."""
    if not isinstance(name, str) or not name.strip():
        return None
    n, _sep, tag = name.strip().partition(":")
    return _tidy_model(n, tag or None)


# a name people give their own models: "qwen-finetune-v2", "my-law-assistant",
# "nomic-embed-text", a GGUF file name. Hyphenated words that are English
# compounds ("out-of-memory", "multi-turn") are not names: a name has a digit or
# a part that is not a common word.
_TYPED = re.compile(r"(?<![\w./@:-])([a-z][a-z0-9_]*(?:[-.][a-z0-9_]+)*-[a-z0-9_.-]*[a-z0-9])(?:\.gguf)?(?![\w/@:-])", ICASE)
_GGUF = re.compile(r"(?<![\w./@:-])([a-z][\w.-]*?)\.gguf\b", ICASE)
_NAME_BEFORE = re.compile(
    r"(?:\bmodel\s+(?:is|called|named)|模型(?:是|为|叫|用的是)?|导入的|自己的模型|my own model|custom model|fine-?tune)"
    r"\s*[:：]?\s*$", ICASE)
_PLAIN_NAME = re.compile(r"(?<![\w./@:-])([a-z][a-z0-9_]{2,}(?:\.[a-z0-9_]+)*)(?![\w/@:-])", ICASE)


def _name_like(token: str) -> bool:
    low = token.lower()
    if low in _NOT_MODEL_NAMES or re.fullmatch(r"v?\d[\d.x-]*", low):
        return False
    parts = [p for p in re.split(r"[-._]", low) if p]
    if len(parts) < 2:
        return False
    if any(re.fullmatch(r"(?:rtx|gtx|rx|cuda|rocm|sha\d*|x86|amd64|arm64|win|windows|ubuntu|linux)", p) for p in parts[:1]):
        return False
    return any(ch.isdigit() for ch in low) or any(p not in _COMMON_PARTS for p in parts)


def _server_tag(text: str, tags: tuple[str, ...]) -> tuple[str, tuple[int, int]] | None:
    """The server's tag the message names: ``qwen2.5:7b`` or a bare
    ``nomic-embed-text`` for ``nomic-embed-text:latest``; the longest, then the first."""
    best = None
    for tag in tags:
        name, _sep, version = tag.partition(":")
        forms = [tag] + ([name] if version in ("", "latest") else [])
        for form in forms:
            m = re.search(r"(?<![\w./:-])" + re.escape(form) + r"(?![\w/:-]|\.\w)", text, ICASE)
            if m and (best is None or (len(form), -m.start()) > (best[2], -best[1][0])):
                best = (tag, m.span(), len(form))
    return (best[0], best[1]) if best else None


def find_model(text: str, tags: tuple[str, ...] = ()) -> tuple[str | None, list[tuple[int, int]], bool]:
    """The model the user names: a server tag found in the message (when the
    server's list is known), an explicit ``name:tag``, ``ollama run X``, then the
    first of a name the user typed (hyphenated, a GGUF file, the word after
    "model"/"模型") or a known family name (with a size such as ``7b`` joined
    as the tag)."""
    spans = []
    if tags:
        hit = _server_tag(text, tags)
        if hit:
            return hit[0], [hit[1]], True
    picks = []  # (rank, position, name): 0 switched to, 1 named, 2 a base
    for m in _TAG.finditer(text):
        name, tag = m.group(1), m.group(2)
        bare = name.rsplit("/", 1)[-1].lower()
        if bare in _NOT_MODEL_NAMES or tag.isdigit() or re.fullmatch(r"[\d.]+", name):
            continue
        if re.fullmatch(r"\d+(?:\.\d+)?\s*(?:g|gb|gib|mb|mib)", tag, ICASE):
            continue  # "VRAM:8GB" (a bare "m" is a model size: smollm2:360m, gemma3:270m)
        spans.append(m.span())
        before = text[max(0, m.start() - 30):m.start()]
        # (one switched to that then works, "换成 qwen2.5:7b 就好了", is the way out, not the trouble)
        switched = _SWITCH_BEFORE.search(before) and not _WORKS_AFTER.search(text[m.end():m.end() + 24])
        rank = 2 if _BASE_BEFORE.search(before) else 0 if switched else 1
        picks.append((rank, m.start(), _tidy_model(name, tag)))
    picks.sort()
    if picks and picks[0][0] < 2:
        return picks[0][2], spans, True
    base = picks[0][2] if picks else None  # only a base is named: the user's model is, when it has a name
    m = _OLLAMA_CMD.search(text)
    if m and m.group(1).rstrip(".,").lower() in _NOT_NAMES_AFTER_MODEL:
        m = None  # "ollama run finishes ok": the command, not a name after it
    if m:
        word = m.group(1).rstrip(".,")
        if ":" in word:
            n, _, tg = word.partition(":")
            return _tidy_model(n, tg), spans + [m.span(1)], True
        return _tidy_model(word), spans + [m.span(1)], True
    candidates = []  # (start, end, name)
    for m in _GGUF.finditer(text):
        # a GGUF file name is spelled as on disk ("Qwen2.5-Coder-14B-Instruct-Q5_K_M.gguf")
        candidates.append((m.start(), m.end(), _tidy_model(m.group(1), keep_case=True)))
    for m in _TYPED.finditer(text):
        if _name_like(m.group(1)) and not any(s <= m.start() < e for s, e, _ in candidates):
            candidates.append((m.start(), m.end(), _tidy_model(m.group(1))))
    for m in _PLAIN_NAME.finditer(text):
        word = m.group(1)
        if (word.lower() not in _NOT_NAMES_AFTER_MODEL and word.lower() not in _NOT_MODEL_NAMES
                and _NAME_BEFORE.search(text[max(0, m.start() - 16):m.start()])
                and not any(s <= m.start() < e for s, e, _ in candidates)):
            candidates.append((m.start(), m.end(), _tidy_model(word)))
    for m in _BARE.finditer(text):
        inside = [c for c in candidates if c[0] <= m.start() and m.end() <= c[1]]
        if inside:
            # "qwen2.5-7b-instruct-q4_k_m": the whole typed name, unless it is
            # just the family and its size ("llama3.1-8b" is llama3.1:8b)
            s, e, _name = inside[0]
            if e - s <= m.end() - m.start() + 1:
                candidates.remove(inside[0])
            else:
                continue
        if any(s <= m.start() < e for s, e, _ in candidates):
            continue
        size = m.group(2)
        if not size and _SIZE_CHOICE.match(text[m.end():m.end() + 24]):
            continue
        candidates.append((m.start(), m.end(), _tidy_model(m.group(1), size.lower() if size else None)))
    candidates = [c for c in candidates if not any(s <= c[0] < e for s, e in spans)]  # inside a base's tag
    if not candidates:
        return (base, spans, True) if base else (None, spans, False)
    candidates.sort()
    first = candidates[0]
    return first[2], spans + [(first[0], first[1])], False
