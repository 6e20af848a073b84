"""Every line oomvet shows, in English and Chinese: the one catalog.

The words are data, ``common/messages/<room>/<file>.yaml`` (``{key: {en: ...,
zh: ...}}``), so a translator edits text, not code. This is the only module
that reads them: all files once, at import, refusing a message that lacks a
language or a key two files define, so a Chinese user never meets an
English-only line. Every room looks its words up here: :func:`t` says one
message in one language (the session's by default), :func:`pair` says it in
both for what must keep both (the rules' why-chain, a probe's limit), and
:func:`templates` hands out both unformatted for callers that fill them from
their own mapping (a rule's sentence, filled from the fact it read). Keys are
namespaced by use: ``rule.<name>``, ``finding.<rule>[.<part>]`` and
``advice.<key>`` for the rules, the probes' note keys (``search.best``) for
:class:`probes.notes.Note`, ``budget.*`` for the limit, the rest for the
assistant's modules.
"""
from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable

import yaml

LANGS = ("en", "zh")
_current: dict[str, str | None] = {"lang": None}


def _files(folder: Traversable, prefix: str = ""):
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            yield from _files(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(".yaml"):
            yield f"{prefix}{entry.name}", entry


def load(folder: Traversable) -> dict[str, dict[str, str]]:
    """Every message of every file under ``folder`` (``common/messages``, read once below)."""
    messages: dict[str, dict[str, str]] = {}
    where: dict[str, str] = {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for name, entry in _files(folder):
        loaded = yaml.load(entry.read_text(encoding="utf-8"), Loader=loader)
        if not isinstance(loaded, dict):
            raise ValueError(f"messages file {name} is not a mapping")
        for key, texts in loaded.items():
            if key in messages:
                raise ValueError(f"message {key!r} is in both {where[key]} and {name}")
            missing = [lang for lang in LANGS if not isinstance(texts, dict) or not texts.get(lang)]
            if missing:
                raise ValueError(f"message {key!r} in {name} lacks {', '.join(missing)}")
            messages[key], where[key] = texts, name
    return messages


_MESSAGES = load(resources.files("common").joinpath("messages"))


def _texts(key: str) -> dict[str, str]:
    try:
        return _MESSAGES[key]
    except KeyError:
        raise KeyError(f"no message {key!r} in common/messages") from None


def t(key: str, lang: str | None = None, /, **values) -> str:
    """The message ``key`` in ``lang`` (default: the current language), formatted with ``values``."""
    return _texts(key)[lang or get_lang()].format(**values)


def pair(key: str, /, **values) -> tuple[str, str]:
    """``(en, zh)`` of the message ``key``, both formatted with ``values``."""
    texts = _texts(key)
    return texts["en"].format(**values), texts["zh"].format(**values)


def templates(key: str) -> tuple[str, str]:
    """``(en, zh)`` of the message ``key`` as written, for a caller that fills them itself."""
    texts = _texts(key)
    return texts["en"], texts["zh"]


def keys(prefix: str = "") -> list[str]:
    """Every message key that starts with ``prefix``, in file order."""
    return [key for key in _MESSAGES if key.startswith(prefix)]


def all_messages() -> dict[str, dict[str, str]]:
    return dict(_MESSAGES)


def default_lang() -> str:
    """``OOMVET_LANG``, else the locale (zh_* -> zh), else English."""
    for var in ("OOMVET_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def set_lang(lang: str | None) -> str:
    """Make ``lang`` the current language (None: back to :func:`default_lang`); returns the one in effect."""
    if lang is not None and lang not in LANGS:
        raise ValueError(f"language must be one of {LANGS}, got {lang!r}")
    _current["lang"] = lang
    return get_lang()


def get_lang() -> str:
    return _current["lang"] or default_lang()
