"""Every message the assistant prints, in English and Chinese.

Each module's messages live in a data file of their own,
``assistant/messages/<module>.yaml`` (``{key: {en: ..., zh: ...}}``), so a
translator edits text, not code; the module registers them with
:func:`catalog` and :func:`t` looks one up in the current language. A message
missing either language is refused at import time, so a Chinese user never
meets an English-only line.
"""
from __future__ import annotations

import os
from importlib import resources

import yaml

LANGS = ("en", "zh")
_MESSAGES: dict[str, dict[str, str]] = {}
_current = {"lang": None}


def catalog(messages: str | dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Register ``{key: {"en": ..., "zh": ...}}``, or the messages file
    ``assistant/messages/<messages>.yaml`` when given a name; returns them for
    local use."""
    if isinstance(messages, str):
        messages = _load(messages)
    for key, texts in messages.items():
        missing = [lang for lang in LANGS if not texts.get(lang)]
        if missing:
            raise ValueError(f"message {key!r} lacks {', '.join(missing)}")
        if key in _MESSAGES and _MESSAGES[key] != texts:
            raise ValueError(f"message {key!r} registered twice with different texts")
        _MESSAGES[key] = texts
    return messages


def _load(name: str) -> dict[str, dict[str, str]]:
    text = resources.files("assistant").joinpath("messages", f"{name}.yaml").read_text(encoding="utf-8")
    loaded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(loaded, dict):
        raise ValueError(f"messages file {name}.yaml is not a mapping")
    return loaded


def default_lang() -> str:
    """``OOMVET_LANG``, else the locale (zh_* -> zh), else English."""
    for var in ("OOMVET_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def set_lang(lang: str | None) -> str:
    if lang is not None and lang not in LANGS:
        raise ValueError(f"language must be one of {LANGS}, got {lang!r}")
    _current["lang"] = lang
    return get_lang()


def get_lang() -> str:
    return _current["lang"] or default_lang()


def t(key: str, lang: str | None = None, /, **values) -> str:
    """The message ``key`` in ``lang`` (default: the current language), formatted."""
    texts = _MESSAGES.get(key)
    if texts is None:
        raise KeyError(f"no message {key!r}")
    return texts[lang or get_lang()].format(**values)


def all_messages() -> dict[str, dict[str, str]]:
    return dict(_MESSAGES)
