"""Blind tests of how the chat reads short replies and answers side questions.

Written from the behaviour described for ``assistant.session.replies`` and
``assistant.session.explain`` only, phrased the way people type in chats.
"""
from __future__ import annotations

import re

import pytest

from assistant.session.explain import answer, terms_in
from assistant.session.replies import (ANSWER, BACK, QUESTION, SKIP, after_stop, correction,
                                       read_reply, yes_no)
from common.catalog import set_lang

HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def lang():
    """Set the output language for one test and put it back afterwards."""
    def _set(code):
        set_lang(code)
    yield _set
    set_lang(None)


# ---------------------------------------------------------------- yes_no

@pytest.mark.parametrize("text, expected", [
    # yes, bare or with fillers and reasons
    ("yes please", True),
    ("sure, go ahead", True),
    ("ok, run it", True),
    ("no problem", True),
    ("Yes. It has to stay at 8k for my RAG setup", True),
    ("好的呀", True),
    ("好的，可以", True),
    ("可以的，跑吧", True),
    ("要保持，我的文档就是要 8k", True),
    # no, bare or with reasons
    ("no thanks", False),
    ("no, 4k is plenty", False),
    ("nope. not needed", False),
    ("不用，4k 就够了", False),
    ("不要保持", False),
    ("不需要了，谢谢", False),
    ("不行；太慢了", False),
    # neither: must not be read as a confident yes (or no)
    ("maybe", None),
    ("8k", None),
    ("好像不太行吧", None),
    ("not sure, depends on the model", None),
])
def test_yes_no(text, expected):
    assert yes_no(text) is expected


# ---------------------------------------------------------------- read_reply

@pytest.mark.parametrize("text, kind, why", [
    ("why do you need to run it again?", QUESTION, True),
    ("why is that", QUESTION, True),
    ("为什么要测上下文？", QUESTION, True),
    ("what does KV cache mean?", QUESTION, False),
    ("量化是什么", QUESTION, False),
    ("num_ctx 什么意思", QUESTION, False),
    ("这个会影响速度吗", QUESTION, None),
    ("go back", BACK, None),
    ("返回上一步", BACK, None),
    ("skip", SKIP, None),
    ("跳过", SKIP, None),
    ("8k", ANSWER, None),
    ("qwen2.5:7b", ANSWER, None),
    ("sure", ANSWER, None),
    ("sure, why not?", ANSWER, None),
])
def test_read_reply(text, kind, why):
    reply = read_reply(text)
    assert reply.kind == kind
    if why is not None:
        assert reply.why is why


# ---------------------------------------------------------------- correction

@pytest.mark.parametrize("text, expected", [
    ("actually it's qwen2.5:14b", True),
    ("sorry, I meant 16k", True),
    ("其实是 8k 的", True),
    ("不对，应该是 32k", True),
    ("8k", False),
    ("qwen2.5:7b please", False),
])
def test_correction(text, expected):
    assert correction(text) is expected


# ---------------------------------------------------------------- after_stop

@pytest.mark.parametrize("text, expected", [
    ("1", "again"),
    ("2", "skip"),
    ("3", "stop"),
    ("run it again", "again"),
    ("retry pls", "again"),
    ("重新跑一下", "again"),
    ("skip it", "skip"),
    ("跳过吧", "skip"),
    ("stop here", "stop"),
    ("以后再说", "stop"),
    ("退出", "stop"),
    ("1 or 2, whatever", None),
    ("hmm", None),
])
def test_after_stop(text, expected):
    assert after_stop(text) == expected


# ---------------------------------------------------------------- terms_in

@pytest.mark.parametrize("text, expected", [
    ("what is the kv cache", ["kv_cache"]),
    ("KV 缓存和上下文有什么关系", ["kv_cache", "num_ctx"]),
    ("is Q4_K_M much worse than Q8_0?", ["quantization"]),
    ("does flash attention help with parallel requests?", ["flash_attention", "num_parallel"]),
    ("为什么会溢出到 CPU", ["spill"]),
    ("并发数设多少合适", ["num_parallel"]),
    ("what's the weather like today", []),
])
def test_terms_in(text, expected):
    assert terms_in(text) == expected


# ---------------------------------------------------------------- answer

CONTEXT_PROBE = {"action": "probe", "probe": "context"}
QUANT_PROBE = {"action": "probe", "probe": "quant"}
ASK_CTX = {"action": "ask", "question": "want_ctx"}


def test_answer_zh_why_context_probe(lang):
    lang("zh")
    lines = answer(read_reply("为什么要测上下文？"), CONTEXT_PROBE)
    assert lines
    assert all(HAN.search(line) for line in lines)
    joined = "".join(lines)
    assert "KV" in joined or "上下文" in joined


def test_answer_en_what_is_flash_attention(lang):
    lang("en")
    lines = answer(read_reply("what is flash attention?"), ASK_CTX)
    assert len(lines) == 1
    assert "flash attention" in lines[0].lower()


def test_answer_en_nothing_known_gives_one_listing_line(lang):
    lang("en")
    lines = answer(read_reply("what's that supposed to mean?"), ASK_CTX)
    assert len(lines) == 1


def test_answer_zh_nothing_known_gives_one_chinese_line(lang):
    lang("zh")
    lines = answer(read_reply("这是啥意思？"), ASK_CTX)
    assert len(lines) == 1
    assert HAN.search(lines[0])


def test_answer_at_most_three_entries(lang):
    lang("en")
    reply = read_reply("what do kv cache, num_ctx, quantization and flash attention mean?")
    lines = answer(reply, ASK_CTX)
    assert len(lines) == 3


def test_answer_zh_what_is_quantization(lang):
    lang("zh")
    lines = answer(read_reply("量化是什么"), CONTEXT_PROBE)
    assert len(lines) == 1
    assert HAN.search(lines[0])


def test_answer_why_includes_given_reason(lang):
    lang("en")
    reason = "your card only has 8 GB free"
    lines = answer(read_reply("why?"), QUANT_PROBE, reason=reason)
    assert lines
    assert any(reason in line for line in lines)


def test_answer_why_naming_another_step_adds_its_reason(lang):
    lang("en")
    plain = answer(read_reply("why?"), CONTEXT_PROBE)
    named = answer(read_reply("why do you need the baseline?"), CONTEXT_PROBE)
    assert plain
    assert set(plain) <= set(named)
    assert len(named) > len(plain)


def test_answer_en_why_during_retest(lang):
    lang("en")
    lines = answer(read_reply("why are we testing this again?"), {"action": "change"})
    assert lines
    assert all(isinstance(line, str) and line.strip() for line in lines)
