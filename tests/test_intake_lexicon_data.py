"""Every entry of the intake's other lexicons, one test each: the error texts
(lexicon/errors.yaml), the keep-context cues (lexicon/keep_context.yaml) and
the model families (lexicon/models.yaml) each find their examples."""
from __future__ import annotations

import re

import pytest

from assistant.intake import parse
from assistant.intake.error_text import KNOWN_ERRORS, find_error
from assistant.intake.keep_context import lexicon as keep_lexicon
from assistant.intake.model_names import FAMILIES


pytestmark = pytest.mark.usefixtures("raise_errors")


@pytest.mark.parametrize("known,example", [pytest.param(k, e, id=e[:40]) for k in KNOWN_ERRORS for e in k.examples])
def test_each_known_error_text_is_found_as_the_error(known, example):
    assert known.pattern.search(example)
    assert find_error(example)[0]


@pytest.mark.parametrize("group,cue,example", [
    pytest.param(g, c, e, id=f"{g.keep}-{i}-{e[:24]}")
    for g in keep_lexicon() for i, c in enumerate(g.cues) for e in c.examples])
def test_each_keep_context_cue_matches_its_examples_and_gives_its_group(group, cue, example):
    assert cue.pattern.search(example)
    assert parse(example).keep_context is group.keep


@pytest.mark.parametrize("family,text,model", [
    pytest.param(rx, text, model, id=text[:30]) for rx, examples in FAMILIES for text, model in examples.items()])
def test_each_model_family_names_its_model(family, text, model):
    assert re.search(family, text, re.IGNORECASE | re.ASCII)
    assert parse(text).model == model


def test_every_entry_has_an_example():
    assert all(k.examples for k in KNOWN_ERRORS)
    assert all(c.examples for g in keep_lexicon() for c in g.cues)
    assert all(examples for _rx, examples in FAMILIES)
