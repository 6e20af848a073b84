"""Optional chat-model help for intake and the langchain-core transcript; no
server: fake chat models stand in, injected through llm_intake's chat_model."""
from __future__ import annotations

import socket

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from assistant.intake import Intake, parse
from assistant.intake.llm import IntakeFields, Transcript, combine, llm_intake

GiB = 1 << 30


class FakeStructuredChat:
    """Queue-driven stand-in for a chat model with structured output.

    ``enqueue`` an IntakeFields, a dict or an exception; ``history`` records
    the schema asked for and every message list sent.
    """

    def __init__(self):
        self.queue: list = []
        self.history: list = []

    def enqueue(self, item) -> "FakeStructuredChat":
        self.queue.append(item)
        return self

    def with_structured_output(self, schema, **kwargs):
        self.history.append(("schema", schema))
        return self

    def invoke(self, messages, config=None, **kwargs):
        self.history.append(("invoke", list(messages)))
        item = self.queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


class ToolCallingFake(GenericFakeChatModel):
    """A langchain-core fake that accepts tools, so the real
    BaseChatModel.with_structured_output path (tool call -> pydantic) runs."""

    def bind_tools(self, tools, **kwargs):
        return self


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- llm_intake

def test_structured_answer_becomes_an_intake_and_the_message_is_sent():
    chat = FakeStructuredChat().enqueue(
        IntakeFields(phase="slow", model="Qwen2.5:7B", want_ctx=8192, budget_gib=12, gpu="RTX 3060")
    )
    got = llm_intake("我的 3060 跑得很慢", "tiny", "http://unused", chat_model=chat).intake
    assert (got.phase, got.model, got.want_ctx, got.budget, got.gpu) == ("slow", "qwen2.5:7B", 8192, 12 * GiB, "RTX 3060")
    assert got.lang == "zh" and got.text == "我的 3060 跑得很慢"
    assert chat.history[0] == ("schema", IntakeFields)
    kind, sent = chat.history[1]
    assert kind == "invoke"
    assert isinstance(sent[0], SystemMessage) and isinstance(sent[1], HumanMessage)
    assert sent[1].content == "我的 3060 跑得很慢"


def test_a_dict_answer_is_accepted_too():
    chat = FakeStructuredChat().enqueue({"phase": "load", "keep_context": True})
    got = llm_intake("won't load", "tiny", "http://unused", chat_model=chat).intake
    assert (got.phase, got.keep_context, got.model) == ("load", True, None)


def test_model_failure_is_reported_in_one_line_and_reads_nothing():
    chat = FakeStructuredChat().enqueue(ConnectionError("refused\nmore detail"))
    reading = llm_intake("fails to load", "tiny", "http://unused", chat_model=chat)
    assert reading.intake is None and reading.error == "ConnectionError: refused"


def test_impossible_values_from_the_model_are_dropped():
    chat = FakeStructuredChat().enqueue(
        IntakeFields(phase="unknown", want_ctx=0, want_parallel=-2, budget_gib=-1.0, model="  ", error="null")
    )
    got = llm_intake("hm", "tiny", "http://unused", chat_model=chat).intake
    assert (got.want_ctx, got.want_parallel, got.budget, got.model, got.error) == (None, None, None, None, None)


def test_tool_calling_chat_model_goes_through_with_structured_output():
    reply = AIMessage(content="", tool_calls=[{
        "name": "IntakeFields", "id": "call_1",
        "args": {"phase": "concurrent", "want_parallel": 4, "budget_gib": 24},
    }])
    chat = ToolCallingFake(messages=iter([reply]))
    got = llm_intake("several users at once", "tiny", "http://unused", chat_model=chat).intake
    assert (got.phase, got.want_parallel, got.budget) == ("concurrent", 4, 24 * GiB)


def test_chat_model_without_structured_output_answers_in_json():
    reply = AIMessage(content='Sure:\n```json\n{"phase": "long_input", "want_ctx": 32768, "gpu": "RTX 4060"}\n```')
    chat = GenericFakeChatModel(messages=iter([reply]))
    got = llm_intake("长文本就崩", "tiny", "http://unused", chat_model=chat).intake
    assert (got.phase, got.want_ctx, got.gpu) == ("long_input", 32768, "RTX 4060")


@pytest.mark.parametrize("content", ["I am not sure what you mean.", '{"phase": "exploded"}', "{not json"])
def test_nonsense_from_the_model_reads_nothing_and_says_why(content):
    chat = GenericFakeChatModel(messages=iter([AIMessage(content=content)]))
    reading = llm_intake("x", "tiny", "http://unused", chat_model=chat)
    assert reading.intake is None and reading.error and "\n" not in reading.error


def test_no_server_gives_none_quickly():
    pytest.importorskip("langchain_ollama")
    host = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    reading = llm_intake("fails to load", "tiny", host, timeout_s=5)
    assert reading.intake is None and "Connect" in reading.error


# --------------------------------------------------------------------------- combine

def test_strong_parser_values_win_and_the_model_fills_gaps_and_says_which_won():
    parser = parse("neohorse-1:q8_0 fails to load on my 8G card")
    llm = Intake(lang="en", phase="crash", model="other:1b", want_ctx=4096, budget=24 * GiB, gpu="RTX 4060",
                 error="boom", keep_context=True, phase_cue="llm tiny")
    got, won = combine(parser, llm)
    assert (got.phase, got.model, got.budget) == ("load", "neohorse-1:q8_0", 8 * GiB)
    assert (got.want_ctx, got.gpu, got.error, got.keep_context) == (4096, "RTX 4060", "boom", True)
    assert got.text == parser.text and got.lang == parser.lang
    assert won == {"phase": "parser", "model": "parser", "budget": "parser", "want_ctx": "llm", "gpu": "llm",
                   "error": "llm", "keep_context": "llm"}


def test_the_model_overrides_what_the_parser_read_from_weak_evidence():
    # a guessed name, a phase from "what" alone, a context estimated from a length
    parser = parse("my-bot crashes on a 20k-word transcript")
    assert {"model", "want_ctx"} <= set(parser.weak)
    llm = Intake(phase="long_input", model="mybot:v2", want_ctx=32768, phase_cue="llm tiny")
    got, won = combine(parser, llm)
    assert (got.model, got.want_ctx, got.ctx_estimated) == ("mybot:v2", 32768, False)
    assert won["model"] == won["want_ctx"] == "llm"


def test_model_phase_is_used_only_where_the_parser_said_nothing_about_when():
    llm = Intake(phase="creeping", phase_cue="llm tiny")
    assert combine(parse("qwen2.5:7b on a 4090"), llm)[0].phase == "creeping"
    assert combine(parse("qwen2.5:7b crashes"), llm)[0].phase == "creeping"  # a crash, when unknown: weak
    assert combine(parse("long prompts crash"), llm)[0].phase == "long_input"


def test_combine_without_an_answer_is_the_parser_reading():
    parser = parse("一加载就爆显存")
    assert combine(parser, None) == (parser, {})


# --------------------------------------------------------------------------- transcript

def test_transcript_keeps_langchain_messages_in_order():
    tr = Transcript()
    tr.add_system("you are oomvet")
    tr.add_user("一加载就爆显存")
    tr.add_assistant("显卡有多少显存？")
    tr.add_user("8G 的卡")
    assert [type(m) for m in tr.messages] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert tr.to_json() == [
        {"role": "system", "content": "you are oomvet"},
        {"role": "user", "content": "一加载就爆显存"},
        {"role": "assistant", "content": "显卡有多少显存？"},
        {"role": "user", "content": "8G 的卡"},
    ]
    assert Transcript.from_json(tr.to_json()).to_json() == tr.to_json()


def test_transcript_reads_every_user_message_into_one_intake():
    tr = Transcript()
    tr.add_user("一加载就爆显存，模型 neohorse-1:q8_0")
    tr.add_assistant("What GPU?")
    tr.add_user("4060 8G")
    got = tr.intake()
    assert (got.phase, got.model, got.budget, got.gpu, got.lang) == ("load", "neohorse-1:q8_0", 8 * GiB, "4060", "zh")


def test_transcript_language_is_the_first_message_or_the_flag():
    tr = Transcript()
    tr.add_user("4060 8G")  # no words to tell a language from
    tr.add_user("长文本就崩")
    tr.add_user("long prompts crash")
    assert tr.lang == "zh"
    flagged = Transcript(lang="en")
    flagged.add_user("长文本就崩")
    assert flagged.lang == "en"


def test_transcript_messages_feed_a_chat_model_directly():
    chat = GenericFakeChatModel(messages=iter(["Which GPU do you have?"]))
    tr = Transcript()
    tr.add_user("long prompts crash")
    reply = chat.invoke(tr.messages)
    tr.add_assistant(reply.content)
    assert tr.to_json()[-1] == {"role": "assistant", "content": "Which GPU do you have?"}
    assert len(tr) == 2


def test_a_share_the_model_read_replaces_a_budget_the_parser_only_guessed():
    # "（8g）" beside the card: a budget only the learned ranker reads, so a weak one
    parser = parse("本人 4060 一张（8g），用 neohorse-1:q4_K_M，上下文开到 32k 就 OOM，短的没问题")
    assert parser.budget == 8 * GiB and "budget" in parser.learned and "budget" in parser.weak
    got, won = combine(parser, Intake(budget_share=0.6, phase_cue="llm tiny"))
    assert (got.budget, got.budget_share) == (None, 0.6) and won["budget_share"] == "llm"
    assert "budget" not in got.learned  # nothing guessed is left to confirm
    strong = parse("4060 8G 显存，用 neohorse-1:q4_K_M，上下文开到 32k 就 OOM")
    assert combine(strong, Intake(budget_share=0.6, phase_cue="llm tiny"))[0].budget == 8 * GiB  # said: kept


def test_a_field_the_chat_model_gave_is_unsure_and_asked():
    # issue 33: no replay has measured a chat model's readings, so what it fills is asked, never taken as sure
    from dataclasses import replace

    from assistant.intake import confidence

    parser = parse("qwen2.5:7b 一加载就崩")
    llm = replace(parse(""), model="qwen2.5:7b", want_ctx=8192, phase="load")
    combined, won = combine(parser, llm)
    assert combined.want_ctx == 8192 and won["want_ctx"] == "llm"
    assert "want_ctx" in confidence.unsure(combined)
    assert dict(combined.evidence)["model"] == "model.said"  # the parser's own reading keeps its class
