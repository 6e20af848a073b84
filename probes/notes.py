"""The notes probes attach to their results, each with a key.

A note is a plain string in English (what ``--json``, the journal and the
report keep), and also carries its key and values, so the chat and the
report can say it in the session's language: both languages are one entry of
the catalog (``common/messages/probes/notes.yaml``), and
``assistant/session/render.py`` says a note through it. Values are already
formatted (sizes as text), so a translation only rearranges them.
"""
from __future__ import annotations

from common.catalog import t


class Note(str):
    """``Note("ctx.default", default=4096, ...)``: the English text, with
    ``.key`` and ``.values`` for a translation."""

    key: str
    values: dict

    def __new__(cls, key: str, **values) -> "Note":
        note = super().__new__(cls, t(key, "en", **values))
        note.key, note.values = key, values
        return note

    def __reduce__(self):  # copies and pickles keep the text
        return (str, (str(self),))
