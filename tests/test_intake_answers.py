"""One answer parser (issue 12): every chat answer, answers-file value and
consent goes through assistant.answers, read by the same intake as the first
message; the rules receive parsed values only."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from assistant.answers import Share, answer_facts, parse_answer, parse_yes_no
from assistant.intake import Intake
from assistant.ui import ChatUI
from rules import record

GiB = 1 << 30


# a bug inside the parser surfaces instead of being read as "unknown"
pytestmark = pytest.mark.usefixtures("raise_errors")


@pytest.mark.parametrize("text,model", [
    ("I run qwen2.5:7b", "qwen2.5:7b"),
    ("我用的是 qwen2.5:14b", "qwen2.5:14b"),
    ("qwen2.5:7b", "qwen2.5:7b"),
    ("mybot", "mybot"),
    ("NeoHorse-1", "neohorse-1"),
])
def test_a_model_answer_is_the_name_in_it_not_the_whole_sentence(text, model):
    assert parse_answer("model", text) == model


def test_a_model_answer_matches_the_servers_tags():
    assert parse_answer("model", "it's my finetune acme-bot", tags=["acme-bot:latest"]) == "acme-bot:latest"


def test_a_sentence_without_a_name_is_not_a_model_answer():
    with pytest.raises(ValueError):
        parse_answer("model", "I don't remember, the big one")


def test_ke_yi_means_yes_in_every_place():
    assert parse_yes_no("可以") is True
    assert parse_answer("keep_context", "可以") is True
    # the rules no longer read words: a parsed True is "yes", a raw word is not read at all
    assert record._as_yes_no(True) == "yes"
    assert record._as_yes_no("可以") == "unknown"


@pytest.mark.parametrize("text,keep", [
    ("是", True), ("yes", True), ("必须", True), ("不", False), ("no", False), ("不需要", False),
    ("可以减少上下文", False), ("上下文不能减", True), ("8k 就够了", False),
])
def test_keep_context_answers_in_both_languages(text, keep):
    assert parse_answer("keep_context", text) is keep


@pytest.mark.parametrize("text,value", [
    ("80%", Share(0.8)), ("只能用 60% 的显存", Share(0.6)), ("6GiB", 6 * GiB), ("8 gigs", 8 * GiB),
    ("还剩 500 兆左右", 500 << 20),
])
def test_a_budget_answer_is_bytes_or_a_share(text, value):
    assert parse_answer("budget", text) == value


def test_a_share_is_resolved_against_the_device_total_by_whoever_knows_it():
    facts = answer_facts("budget", "80%", device_total=10 * GiB)
    assert facts == [{"kind": "answer", "question": "budget", "value": 8 * GiB}]
    assert answer_facts("budget", Share(0.8), device_total=None)[0]["value"] is None  # unknown, not 0


@pytest.mark.parametrize("question,text,value", [
    ("want_ctx", "8k", 8192), ("want_ctx", "32768", 32768), ("want_ctx", "大概三万字的文档", 30000),
    ("want_ctx", "num_ctx 16k", 16384), ("want_parallel", "4", 4), ("want_parallel", "四个", 4),
    ("want_parallel", "4 users at once", 4),
])
def test_numbers_in_answers(question, text, value):
    assert parse_answer(question, text) == value


def test_a_symptom_answer_gives_the_phase_and_whatever_else_it_says():
    facts = answer_facts("symptom", "跑 qwen2.5:7b 的时候，长文本就崩，显存 8G")
    assert facts[0] == {"kind": "answer", "question": "symptom", "value": "long_input"}
    assert {f["question"]: f["value"] for f in facts[1:]} == {"model": "qwen2.5:7b", "budget": 8 * GiB}


def test_an_unreadable_answer_reaches_the_rules_as_dont_know():
    assert answer_facts("want_ctx", "no idea") == [{"kind": "answer", "question": "want_ctx", "value": None}]


def test_the_chat_reads_a_follow_up_model_answer_through_the_intake():
    console = Console(file=io.StringIO(), width=100)
    ui = ChatUI(console, stream=io.StringIO("I run qwen2.5:7b\n"), lang="en")
    assert ui.ask("model", "") == "qwen2.5:7b"


def test_the_chat_asks_again_when_an_answer_does_not_fit_then_takes_the_next():
    console = Console(file=io.StringIO(), width=100)
    ui = ChatUI(console, stream=io.StringIO("lots\n80%\n"), lang="zh")
    assert ui.ask("budget", "") == Share(0.8)
    assert "无法把这个回答理解为" in console.file.getvalue()


def test_consent_takes_ke_yi_as_yes():
    console = Console(file=io.StringIO(), width=100)
    ui = ChatUI(console, stream=io.StringIO("可以\n不要\n"), lang="zh", auto=False)
    step = {"action": "probe", "probe": "baseline", "args": {"model": "m"}}
    assert ui.consent(step) is True
    assert ui.consent(step) is False


def test_a_symptom_answer_is_an_intake():
    assert isinstance(parse_answer("symptom", "一加载就爆显存"), Intake)
