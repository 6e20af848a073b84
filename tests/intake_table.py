"""Shared by the intake tables: every field of an Intake, expected or observed.
A field a row does not name is expected to be None, so a value the parser
invents fails the row."""
from __future__ import annotations

from functools import partial

from assistant.intake import parse

GiB = 1 << 30
FIELDS = ("lang", "phase", "model", "want_ctx", "want_parallel", "budget", "gpu", "error", "keep_context")


def expect(lang: str, phase: str, **values) -> dict:
    out = dict.fromkeys(FIELDS)
    out.update(lang=lang, phase=phase, **values)
    return out


def expect_in(lang: str):
    """``expect`` with the language fixed, for a one-language table."""
    return partial(expect, lang)


def observed(text: str) -> dict:
    got = parse(text)
    return {name: getattr(got, name) for name in FIELDS}
