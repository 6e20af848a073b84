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


@pytest.mark.parametrize("text,field,wrong", [
    # ordinary sentences that once tripped a cue written for one message (review of rounds 6-7)
    ("之前忘了说，现在很慢", "what", "cut"),                # the user forgot to say, nothing was cut
    ("ollama only uses the last GPU", "what", "cut"),
    ("我只看了最后的日志", "what", "cut"),
    ("被别的程序砍掉一半", "what", "cut"),
    ("同时接了两块显卡", "when", "concurrent"),             # two cards plugged in, not two requests
    ("反复切分文档的时候就爆显存", "when", "over_time"),      # splitting documents, not switching models
    ("刚装好驱动，每秒 2 token", "when", "load"),            # a driver installed, not a model pulled
    ("跑了一个就爆", "when", "over_time"),                   # one request, not the N-th item of a batch
    ("crashes after 1 request", "when", "over_time"),
    ("offloads 33 layers in parallel", "want_parallel", 33),
])
def test_a_decoy_does_not_trip_a_cue(text, field, wrong):
    assert getattr(parse(text), field) != wrong


@pytest.mark.parametrize("text,what", [
    ("Why is it crashing? qwen2.5:7b on a 3060", "crash"),  # a symptom asked about is still the symptom
    ("why is this so slow?", "slow"),
])
def test_a_question_about_a_symptom_still_reports_it(text, what):
    assert parse(text).what == what
