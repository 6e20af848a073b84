"""Intake of Chinese messages as Chinese users write them on forums and in
issues (full-width punctuation, no spaces around Latin words, colloquial
"8G 的卡"): each row pins the phase and every value the parser reads."""
from __future__ import annotations

import pytest

from assistant.intake import parse
from tests.intake_table import GiB, observed_or_asked, pinned_cases


# a bug inside the parser surfaces instead of being read as "unknown"
pytestmark = pytest.mark.usefixtures("raise_errors")


CASES = pinned_cases("zh")


@pytest.mark.parametrize("text, expected", CASES)
def test_chinese_message_reads_as_expected(text, expected):
    # right, or unsure and so asked: never confidently wrong
    assert observed_or_asked(text, expected) == expected


def test_at_least_thirty_chinese_cases():
    assert len(CASES) >= 30


def test_chinese_facts_keep_the_original_text():
    text = "一加载就爆显存，8G 的卡"
    symptom, target = parse(text).facts()
    assert symptom["text"] == text and symptom["phase"] == "load"
    assert target["budget"] == 8 * GiB
