"""Every cue of the symptom lexicons (assistant/intake/lexicon/*.yaml), one
test each: the cue matches each of its examples, and each example read alone
gives the cue's group (the precedence between groups is part of the meaning)."""
from __future__ import annotations

import pytest

from assistant.intake import parse
from assistant.intake.phase import lexicon


def _cases(axis: str):
    for g, group in enumerate(lexicon(axis).groups):
        for c, cue in enumerate(group.cues):
            for example in cue.examples:
                yield pytest.param(axis, group, cue, example, id=f"{axis}-{group.name}-{g}.{c}-{example[:24]}")


# a bug inside the parser surfaces instead of being read as "unknown"
pytestmark = pytest.mark.usefixtures("raise_errors")


@pytest.mark.parametrize("axis,group,cue,example", [*_cases("when"), *_cases("what")])
def test_each_cue_matches_its_examples_and_gives_its_group(axis, group, cue, example):
    assert cue.pattern.search(example), f"{cue.pattern.pattern!r} does not match {example!r}"
    got = parse(example)
    assert getattr(got, axis) == group.value, (example, got)


@pytest.mark.parametrize("rows", ["load_ok"])
def test_a_message_that_says_it_loads_fine_is_not_a_load_failure(rows):
    for cue in lexicon("when").exceptions[rows]:
        for example in cue.examples:
            assert parse(example + " but long prompts crash").when != "load"


def test_every_cue_has_an_example():
    for axis in ("when", "what"):
        for group in lexicon(axis).groups:
            assert all(cue.examples for cue in group.cues), group.name
