"""The intake against the labelled corpus (dev: assistant/intake/corpus/,
held-out: tests/data/intake/): on the
held-out part (a third of the corpus; never tuned on), the phase and every field an expert
reads must be right for at least 95% of the messages. The per-field figures
are printed (pytest -s) and the phase confusion table comes from
bench/intake_confusion.py."""
from __future__ import annotations

import pytest

from tests.intake_table import CORPUS_FIELDS, load_batch, load_corpus, score

GOAL = 0.95


# a bug inside the parser surfaces instead of being read as "unknown"
pytestmark = pytest.mark.usefixtures("raise_errors")


def test_the_first_batch_is_split_seventy_thirty_and_no_message_is_on_both_sides():
    first_dev, first_held = load_batch("dev"), load_batch("heldout")
    assert len(first_dev) + len(first_held) >= 150
    assert 0.28 <= len(first_held) / (len(first_dev) + len(first_held)) <= 0.32
    dev, held = load_corpus("dev"), load_corpus("heldout")
    assert not {r["text"] for r in dev} & {r["text"] for r in held}
    # the 30%: of the whole corpus, not only of the first batch
    assert len(held) / (len(dev) + len(held)) >= 0.30


def test_every_message_is_labelled_with_when_what_and_a_phase_that_follows_from_them():
    follows = {"load": "load", "long_input": "long_input", "concurrent": "concurrent", "over_time": "creeping"}
    of_what = {"slow": "slow", "cut": "long_input", "oom": "crash", "crash": "crash", "hang": "crash",
               "unknown": "unknown"}
    for row in load_corpus("dev") + load_corpus("heldout"):
        assert row["when"] in (*follows, "unknown") and row["what"] in of_what, row["text"]
        assert row["phase"] == follows.get(row["when"]) or row["when"] == "unknown" and row["phase"] == of_what[row["what"]]


# Measured, not tuned: the figures of every round, before and after its
# tuning, and how they were taken, are in docs/intake-corpus.md. After round
# 11 (488 held-out messages): phase 465 (95.3%), when 466 (95.5%), what 469
# (96.1%), budget 470 (96.3%), every other field >= 96.5%. Round 12 (issue
# 33: the learned readers no longer learn from the pinned test tables, and a
# new blind batch, heldout11): 548 messages, phase 512 (93.4%), when 513
# (93.6%), every other field >= 95.1%. A field short of the goal is a strict
# xfail with its figure (so a gain shows as well as a loss); any other field
# that falls below it fails here.
_SHORT_OF_GOAL: dict[str, str] = {"when": "513/548 (93.6%)", "phase": "512/548 (93.4%)"}


@pytest.mark.parametrize("field", [
    pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=f"held-out {f} {_SHORT_OF_GOAL[f]}, below the 95% goal"))
    if f in _SHORT_OF_GOAL else f
    for f in CORPUS_FIELDS
])
def test_held_out_accuracy_meets_the_goal(field, capsys):
    right, total, misses = score(load_corpus("heldout"))[field]
    with capsys.disabled():
        print(f"\nheld-out {field}: {right}/{total} = {100 * right / total:.1f}%")
    # only the counts: printing the missed held-out messages would invite tuning on them
    assert right / total >= GOAL, f"{field}: {right}/{total} on held-out"
