"""Shared by the intake tables and the corpus score: every field of an Intake,
expected or observed. A field a row does not name is expected to be None, so a
value the parser invents fails the row. The corpus (tests/data/intake/) is
scored field by field here, for the held-out test and for
bench/intake_confusion.py. The development part ships with the package
(assistant/intake/corpus/: the intake's learned readers learn from it); the
held-out part stays in tests/data/intake/, out of the package and of every
model."""
from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import yaml

from assistant.intake import parse
from assistant.intake.learned import CORPUS as DEV_CORPUS
from probes.units import parse_size

GiB = 1 << 30
FIELDS = ("lang", "phase", "model", "want_ctx", "want_parallel", "budget", "gpu", "error", "keep_context")
HELDOUT_CORPUS = Path(__file__).parent / "data" / "intake"

#: what the corpus labels, beyond the language (the messages' language is not labelled)
CORPUS_FIELDS = ("when", "what", "phase", "model", "want_ctx", "want_parallel", "budget", "gpu", "error",
                 "keep_context")


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


def observed_or_asked(text: str, expected: dict) -> dict:
    """What the intake read of ``text``, where a field it is unsure of (and so
    asks, issue 33) counts as expected whatever it read: a table row fails only
    where a field is wrong *and* sure, or a field it does not check the
    sureness of (language, GPU, error) is wrong."""
    from assistant.intake import confidence

    got = parse(text)
    unsure = set(confidence.unsure(got))
    return {name: expected[name] if name in unsure else getattr(got, name) for name in FIELDS}


#: the corpus in the batches it was written in: the first batch split 70/30 by
#: position (dev.yaml / heldout.yaml); later batches went whole to one side
PARTS = {"dev": ("dev", "dev2", "dev3", "dev4", "dev5", "dev6", "dev7", "dev8", "dev9", "dev10", "dev11", "dev12", "dev13", "dev14", "dev15"),
         "heldout": ("heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8", "heldout9", "heldout10", "heldout11")}


def pinned_cases(lang: str) -> list:
    """The pinned table of one language (tests/data/intake/pinned_<lang>.yaml)
    as ``pytest.param(text, expected, id=...)`` rows."""
    import pytest

    rows = yaml.safe_load((HELDOUT_CORPUS / f"pinned_{lang}.yaml").read_text(encoding="utf-8"))
    out = []
    for row in rows:
        row = dict(row)
        ident, text, phase = row.pop("id"), row.pop("text"), row.pop("phase")
        if "budget" in row:
            row["budget"] = parse_size(row["budget"])
        out.append(pytest.param(text, expect(lang, phase, **row), id=ident))
    return out


def load_batch(stem: str) -> list[dict]:
    """One file of the corpus, e.g. ``"heldout"`` (the first batch's 30%)."""
    folder = HELDOUT_CORPUS if stem.startswith("heldout") else DEV_CORPUS
    return yaml.safe_load((folder / f"{stem}.yaml").read_text(encoding="utf-8"))


def load_corpus(part: str) -> list[dict]:
    """``part`` is "dev" or "heldout": every batch on that side."""
    return [row for stem in PARTS[part] for row in load_batch(stem)]


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).strip().lower()


def _budget_matches(label, got) -> bool:
    if label is None:
        return got.budget is None and got.budget_share is None
    if isinstance(label, str) and label.endswith("%"):
        return got.budget is None and got.budget_share is not None and abs(got.budget_share * 100 - float(label[:-1])) < 1e-6
    return got.budget == parse_size(label) and got.budget_share is None


def field_matches(name: str, label, got) -> bool:
    """Whether the parser's reading ``got`` (an Intake) has the labelled value.
    An error counts when one text holds the other (the user's quote may go on
    after the part the label names, or the label may keep a tail the parser
    cut at a stop word); every other field must be equal."""
    if name == "budget":
        return _budget_matches(label, got)
    value = getattr(got, name)
    if name == "error":
        if label is None or value is None:
            return label is None and value is None
        a, b = _squash(label), _squash(value)
        return a in b or b in a
    return value == label


def score(rows: list[dict], tags_of=lambda row: row.get("tags")) -> dict:
    """Per field: (right, total, [misses]); a miss is (text, label, got)."""
    out = {name: [0, 0, []] for name in CORPUS_FIELDS}
    for row in rows:
        got = parse(row["text"], tags=tags_of(row))
        for name in CORPUS_FIELDS:
            label = row.get(name)
            if name == "when" or name == "what":
                label = label or "unknown"
            ok = field_matches(name, label, got)
            if name == "want_ctx" and label is not None:
                ok = got.want_ctx == label and bool(got.ctx_estimated) == bool(row.get("ctx_estimated"))
            out[name][1] += 1
            if ok:
                out[name][0] += 1
            else:
                shown = got.budget_share if name == "budget" and got.budget_share is not None else getattr(got, name)
                out[name][2].append((row["text"], label, shown))
    return out


def confusion(rows: list[dict], field: str = "phase") -> tuple[list[str], dict]:
    """``(labels, {(expected, got): count})`` for one categorical field."""
    table: dict = {}
    seen = set()
    for row in rows:
        got = getattr(parse(row["text"], tags=row.get("tags")), field)
        want = row.get(field) or "unknown"
        table[(want, got)] = table.get((want, got), 0) + 1
        seen.update((want, got))
    return sorted(seen), table
