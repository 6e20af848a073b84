"""The intake against the labelled corpus (dev: assistant/intake/corpus/,
held-out: tests/data/intake/): on the
held-out part (39% of the corpus; never tuned on), the phase and every field an expert
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


def test_every_message_is_labelled_with_when_what_and_a_phase_that_follows_from_them():
    follows = {"load": "load", "long_input": "long_input", "concurrent": "concurrent", "over_time": "creeping"}
    of_what = {"slow": "slow", "cut": "long_input", "oom": "crash", "crash": "crash", "hang": "crash",
               "unknown": "unknown"}
    for row in load_corpus("dev") + load_corpus("heldout"):
        assert row["when"] in (*follows, "unknown") and row["what"] in of_what, row["text"]
        assert row["phase"] == follows.get(row["when"]) or row["when"] == "unknown" and row["phase"] == of_what[row["what"]]


# Measured, not tuned. The first batch's held-out budget was 49/52 (94.2%) at
# its first scoring (11:00 UTC on 2026-12-01). The intake was then tuned on a
# second dev batch (dev2.yaml) and scored once on a second held-out batch
# (heldout2.yaml, 36 messages written by a helper that never saw the parser):
# when 28/36, what 32/36, phase 27/36, budget 28/36. Over both held-out
# batches: when 79/88 (89.8%), what 83/88 (94.3%), phase 78/88 (88.6%),
# budget 77/88 (87.5%); every other field >= 96.6%. The intake follows its
# authors' phrasing more than people's; fixing it from held-out misses would
# make the figure meaningless, so it needs more dev messages from other
# writers. A third dev batch (dev3.yaml, 60 messages by a helper blind to the
# parser) scored when 73%, phase 72% before the intake was tuned on it; a
# third held-out batch (heldout3.yaml, 50 messages by another blind helper,
# written before that tuning) was then scored once: when 41/50, what 47/50,
# phase 42/50, budget 48/50, keep_context 46/50, want_parallel 47/50. Over
# the three held-out batches (138): when 123 (89.1%), what 132 (95.7%), phase
# 125 (90.6%), budget 125 (90.6%). A fourth round the same way: dev4.yaml (80
# messages, blind writer) read when 76%, budget 84% before tuning on it, 100%
# after; heldout4.yaml (50, another blind writer, written before that tuning)
# scored once after it: when 39/50, what 44/50, phase 39/50, budget 45/50.
# Over the four held-out batches (188): when 163 (86.7%), what 176 (93.6%),
# phase 165 (87.8%), budget 173 (92.0%); every other field >= 96.8%. Most
# misses read "unknown" where a time was stated in a new way: each new writer
# brings phrasings no earlier batch had. A fifth round: dev5.yaml (80, blind
# writer) read when 65/80, phase 65/80, budget 74/80 before tuning on it and
# 80/80 on every field after (seven of its labels brought to dev.yaml's
# conventions first); heldout5.yaml (50, another blind writer, written at the
# same time) scored when 39/50, what 44/50, phase 39/50, budget 44/50 before
# that tuning and when 42/50, what 46/50, phase 41/50, budget 44/50 after it.
# Over the five held-out batches (238): when 210 (88.2%), what 226 (94.96%),
# phase 212 (89.1%), budget 217 (91.2%); every other field >= 96.2%.
# Nearly every phase miss was a message no cue placed in time. A learned
# reader of *when* (assistant/intake/when_model.py), fitted on the packaged
# dev batches and pinned tables and chosen by replaying rounds 3-5 on dev data
# alone (bench/intake_when_model.py), is asked where no cue says when. The
# held-out part, scored once after it was added: when 222 (93.3%), phase 222
# (93.3%); what, budget and the other fields unchanged. A sixth round:
# heldout6.yaml (50, blind writer) scored when 44/50, phase 44/50, budget
# 46/50 before tuning (35/50 for when and phase with the learned reader
# switched off); dev6.yaml (80, another blind writer) read when 64/80, phase
# 65/80, budget 73/80 before tuning on it and 80/80 on every field after (two
# labels brought to dev.yaml's conventions first). heldout6 after that tuning:
# when 46/50, what 45/50, phase 45/50, budget 48/50. Over the six held-out
# batches (288): when 267 (92.7%), what 271 (94.1%), phase 266 (92.4%),
# budget 267 (92.7%); every other field >= 95.8%. A seventh round the same
# way: heldout7.yaml (50) scored when 46/50, what 42/50, phase 45/50, budget
# 48/50 before tuning (40 and 39 for when and phase without the learned
# reader); dev7.yaml (80) read when 65/80, what 67/80, phase 65/80 before
# tuning on it and when, phase 80/80, what 79/80 after (seven labels brought
# to the conventions); heldout7 after that tuning: unchanged. Cue tuning on a
# dev batch barely carries over to a new writer; the learned reader does.
# Over the seven held-out batches (338): when 314 (92.9%), what 313 (92.6%),
# phase 312 (92.3%), budget 315 (93.2%); every other field >= 96.4%. The
# learned reader's threshold then moved from 0.5 to 0.4, chosen by replaying
# rounds 3-7 on dev data (bench/intake_when_model.py --sweep); the held-out
# part, scored once after: phase 313 (92.6%), the rest unchanged. A review
# then narrowed cues that fired on ordinary text ("同时接了两块显卡", "ollama
# only uses the last GPU", "after 1 request") and kept the learned reader from
# guessing back a time the user denied; scored once after: when 313 (92.6%),
# phase 312 (92.3%), want_parallel 325 (96.2%), the rest unchanged.
# strict: a mark must go when its field reaches the goal.
_SHORT_OF_GOAL = {"when": "92.6%", "what": "92.6%", "phase": "92.3%", "budget": "93.2%"}


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
