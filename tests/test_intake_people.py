"""Sizes, lengths and model names as people write them (issue 15): each row
is one phrasing the intake must read, with the value it must give."""
from __future__ import annotations

import pytest

from assistant.intake import parse

MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("OOMVET_RAISE", "1")


@pytest.mark.parametrize("text,budget", [
    ("还剩 350M 左右能用", 350 * MiB),
    ("I only have 8 gigs of vram", 8 * GiB),
    ("笔记本只有 2 个 G 的显存", 2 * GiB),
    ("显存还有 500 兆左右", 500 * MiB),
    ("还剩 5G 显存", 5 * GiB),
    ("an 8-gig card", 8 * GiB),
    ("给 ollama 留了 10G", 10 * GiB),
    ("a 6 GB budget on a 4060 Ti", 6 * GiB),
    ("at most 6GB for the model", 6 * GiB),
    ("最多用 6G", 6 * GiB),
    ("A100 80G 只分给我 20G", 20 * GiB),
])
def test_a_size_as_people_write_it_is_the_budget(text, budget):
    got = parse(text)
    assert (got.budget, got.budget_share) == (budget, None)


@pytest.mark.parametrize("text,share", [
    ("只能用 80% 的显存", 0.8),
    ("We may use 60% of the GPU", 0.6),
])
def test_a_share_of_the_device_is_kept_as_a_share(text, share):
    got = parse(text)
    assert got.budget is None and got.budget_share == pytest.approx(share)


@pytest.mark.parametrize("text,tokens", [
    ("一份三万字的报告一贴就爆", 30000),
    ("输入大概两万字", 20000),
    ("Pasted a 50,000 character log", 12500),
    ("A 20k-word transcript", 26667),
])
def test_a_length_of_text_becomes_an_estimated_context(text, tokens):
    got = parse(text)
    assert (got.want_ctx, got.ctx_estimated) == (tokens, True)


def test_a_context_in_tokens_is_not_an_estimate():
    got = parse("num_ctx 32k 就崩")
    assert (got.want_ctx, got.ctx_estimated) == (32768, False)


@pytest.mark.parametrize("text,model", [
    ("qwen-finetune-v2 一长就崩", "qwen-finetune-v2"),
    ("nomic-embed-text 跑着跑着显存就满了", "nomic-embed-text"),
    ("我的模型是自己导入的 my-law-assistant，合同一长就挂了", "my-law-assistant"),
    ("llama-server 跑 qwen2.5-7b-instruct-q4_k_m.gguf 一上来就 OOM", "qwen2.5-7b-instruct-q4_k_m"),
    ("llama3.1-8b crashes at 16k", "llama3.1:8b"),
    ("my custom model mybot:v3 crashes", "mybot:v3"),
])
def test_a_name_the_user_typed_is_the_model(text, model):
    assert parse(text).model == model


@pytest.mark.parametrize("text", [
    "it runs out-of-memory in multi-turn chats",
    "VRAM doesn't go back down after the model unloads",
    "nvidia-smi still shows 6G used",
])
def test_english_compounds_and_tools_are_not_model_names(text):
    assert parse(text).model is None


def test_a_server_tag_found_in_the_message_is_the_model_as_the_server_spells_it():
    tags = ["nomic-embed-text:latest", "mybot:latest", "qwen2.5:7b"]
    assert parse("nomic-embed-text fills the VRAM over time", tags=tags).model == "nomic-embed-text:latest"
    assert parse("mybot 一长就崩", tags=tags).model == "mybot:latest"
    assert parse("mybot 一长就崩").model is None  # a plain word is a name only when the server has it


@pytest.mark.parametrize("text,when,what,phase", [
    ("刚 ollama run 就闪退", "load", "crash", "load"),
    ("with a 40k-token prompt it dies", "long_input", "crash", "long_input"),
    ("跑批处理 10 条一起发就崩", "concurrent", "crash", "concurrent"),
    ("qwen-finetune-v2 一长就崩", "long_input", "crash", "long_input"),
    ("nomic-embed-text 跑着跑着显存就满了", "over_time", "oom", "creeping"),
    ("it is very slow, 2 tokens/s", "unknown", "slow", "slow"),
    ("the answer stops mid-sentence", "unknown", "cut", "long_input"),
    ("it just hangs", "unknown", "hang", "crash"),
])
def test_when_and_what_are_two_axes_and_the_phase_follows_when_first(text, when, what, phase):
    got = parse(text)
    assert (got.when, got.what, got.phase) == (when, what, phase)
