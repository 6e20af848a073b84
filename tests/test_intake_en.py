"""Intake of English messages written the way people write GitHub issues and
forum posts: each row pins the phase and every value the parser reads."""
from __future__ import annotations

import pytest

from assistant.intake import parse
from tests.intake_table import GiB, observed_or_asked, pinned_cases


# a bug inside the parser surfaces instead of being read as "unknown"
pytestmark = pytest.mark.usefixtures("raise_errors")


CASES = pinned_cases("en")


@pytest.mark.parametrize("text, expected", CASES)
def test_english_message_reads_as_expected(text, expected):
    # right, or unsure and so asked: never confidently wrong
    assert observed_or_asked(text, expected) == expected


def test_at_least_thirty_english_cases():
    assert len(CASES) >= 30


def test_phase_cue_names_the_words_that_decided():
    got = parse("works with short prompts, long prompts crash")
    assert got.phase == "long_input"
    assert got.phase_cue in {"short prompts", "long prompts"}


def test_facts_carry_the_text_and_validate():
    text = "neohorse-1:q8_0 fails to load on my 8GB card"
    symptom, target = parse(text).facts()
    assert symptom == {"kind": "symptom", "phase": "load", "text": text, "error": None}
    assert target == {"kind": "target", "model": "neohorse-1:q8_0", "want_ctx": None,
                      "want_parallel": None, "budget": 8 * GiB, "keep_context": None}
