"""One answer parser (issue 12): every chat answer, answers-file value and
consent goes through assistant.session.answers, read by the same intake as the first
message; the rules receive parsed values only."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from assistant.session.answers import Share, answer_facts, parse_answer, parse_yes_no
from assistant.intake import Intake, confidence
from assistant.session.ui import ChatUI
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


@pytest.mark.parametrize("text", ["6", "8.5", "0", "1048576"])
def test_a_budget_answer_of_a_small_bare_number_asks_for_a_unit_rather_than_reading_bytes(text):
    # after "8.00 GiB?" a person who types 6 means 6 GiB, not 6 bytes: refused with an example
    with pytest.raises(ValueError, match="8GiB"):
        parse_answer("budget", text)
    assert parse_answer("budget", str(8 << 30)) == 8 << 30  # large enough to be a byte count


def test_an_answers_file_budget_without_a_unit_is_refused_in_one_line(tmp_path):
    from assistant.session.answers import load_answers
    from common.errors import UsageError
    path = tmp_path / "answers.yaml"
    path.write_text("budget: 6\n", encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        load_answers(path)
    assert "\n" not in str(caught.value) and "budget" in str(caught.value)


# "（8g）" beside the card: the size grammar reads no budget here, the learned ranker does
_LEARNED_BUDGET = "本人 4060 一张（8g），用 neohorse-1:q4_K_M，上下文开到 32k 就 OOM，短的没问题"


def test_a_later_symptom_answer_with_a_learned_budget_is_asked_like_the_first_message():
    console = Console(file=io.StringIO(), width=200)
    ui = ChatUI(console, stream=io.StringIO(_LEARNED_BUDGET + "\n6GiB\n"), lang="zh")
    read = ui.ask("symptom", "")
    assert "模型最多可以用多少显存？[1]\n  1) 8.00 GiB\n  2) 没有限制：按整张卡测量\n  3) 其他数值\n" in console.file.getvalue()
    assert read.budget == 6 << 30 and "budget" not in read.learned and "budget" not in read.weak
    assert "budget" not in confidence.unsure(read)  # the user's word: not asked again
    facts = answer_facts("symptom", read)
    assert {"kind": "answer", "question": "budget", "value": 6 << 30} in facts


def test_a_learned_budget_kept_is_the_users_word_from_then_on():
    ui = ChatUI(Console(file=io.StringIO(), width=200), stream=io.StringIO(_LEARNED_BUDGET + "\n\n"), lang="zh")
    read = ui.ask("symptom", "")
    assert read.budget == 8 << 30 and "budget" not in read.learned and "budget" not in read.weak


def test_a_learned_budget_declined_leaves_no_limit_of_the_users():
    for reply in ("2", "不", "no"):
        ui = ChatUI(Console(file=io.StringIO(), width=200), stream=io.StringIO(f"{_LEARNED_BUDGET}\n{reply}\n"), lang="zh")
        read = ui.ask("symptom", "")
        assert read.budget is None and read.budget_share is None, reply


def test_a_learned_budget_gives_way_silently_to_a_limit_already_in_force():
    from types import SimpleNamespace
    console = Console(file=io.StringIO(), width=200)
    ui = ChatUI(console, stream=io.StringIO(_LEARNED_BUDGET + "\n"), lang="zh")
    transcript = SimpleNamespace(add_assistant=lambda text: None, add_user=lambda text: None)
    ui.session = SimpleNamespace(world=SimpleNamespace(budget="6GiB", env=None), transcript=transcript)  # --budget 6GiB
    read = ui.ask("symptom", "")
    assert "显存" not in console.file.getvalue().split("\n", 2)[-1]  # nothing asked about memory
    assert read.budget is None and read.budget_share is None and "budget" not in read.learned
    assert read.want_ctx == 32768  # the rest of the answer is kept


def test_a_budget_question_asks_again_on_a_bare_number_or_back():
    from assistant.intake import parse
    from assistant.session import readback

    console = Console(file=io.StringIO(), width=200)
    ui = ChatUI(console, stream=io.StringIO("/back\n6\n6GiB\n"), lang="en")
    read = readback.confirm(ui, parse("my laptop whose NVIDIA chip has 8 gigs runs neohorse-1:q4_K_M fine until the "
                                      "context reaches 32k, then it OOMs"))
    assert read.budget == 6 << 30
    out = console.file.getvalue()
    assert out.count("How much memory may the model use?") == 3
    assert out.count("I could not read that as a choice or a size") == 1


@pytest.mark.parametrize("question,text,value", [
    ("want_ctx", "三万二", 32000), ("want_ctx", "一万六左右", 16000), ("want_ctx", "16千", 16000),
    ("want_ctx", "两千五", 2500), ("want_ctx", "thirty-two thousand", 32000), ("want_ctx", "eight k", 8192),
    ("want_ctx", "about sixteen thousand tokens", 16000), ("want_parallel", "four", 4),
])
def test_numbers_said_in_words_answer_a_count(question, text, value):
    # issue 30: "numbers and sizes in words", beside the digits
    assert parse_answer(question, text) == value
