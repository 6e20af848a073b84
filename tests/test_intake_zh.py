"""Intake of Chinese messages as Chinese users write them on forums and in
issues (full-width punctuation, no spaces around Latin words, colloquial
"8G 的卡"): each row pins the phase and every value the parser reads."""
from __future__ import annotations

import pytest

from assistant.intake import parse
from tests.intake_table import GiB, observed, expect_in

expect = expect_in('zh')


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    """Let a bug inside the parser surface instead of being turned into `unknown`."""
    monkeypatch.setenv("OOMVET_RAISE", "1")


CASES = [
    pytest.param(
        "用 ollama 跑 NeoHorse-1，4060 8G 显存，上下文开到 32k 就报 cudaMalloc failed: out of memory",
        expect("long_input", model="neohorse-1", want_ctx=32768, budget=8 * GiB, gpu="4060",
               error="cudaMalloc failed: out of memory"),
        id="context-raised-to-32k-cudamalloc",
    ),
    pytest.param(
        "一加载就爆显存，模型是 qwen2.5:14b，显卡 3060 12G",
        expect("load", model="qwen2.5:14b", budget=12 * GiB, gpu="3060"),
        id="oom-as-soon-as-loaded",
    ),
    pytest.param(
        "短的问题都没问题，一输入长文本就崩溃，llama3.1:8b，显存 8G",
        expect("long_input", model="llama3.1:8b", budget=8 * GiB),
        id="short-fine-long-text-crashes",
    ),
    pytest.param(
        "4 个并发的时候就 OOM，单个请求正常。OLLAMA_NUM_PARALLEL=4，num_ctx 8192，A100 40G",
        expect("concurrent", want_ctx=8192, want_parallel=4, budget=40 * GiB, gpu="A100"),
        id="four-concurrent-oom",
    ),
    pytest.param(
        "ollama ps 显示 48%/52% CPU/GPU，生成特别慢，每秒只有 2 个 token，deepseek-r1:32b，4090 24G",
        expect("slow", model="deepseek-r1:32b", budget=24 * GiB, gpu="4090"),
        id="split-cpu-gpu-tokens-per-second",
    ),
    pytest.param(
        "显存一直涨，放着不动也不释放，跑几个小时之后就 OOM 了。模型 glm4:9b",
        expect("creeping", model="glm4:9b"),
        id="keeps-rising-not-released",
    ),
    pytest.param(
        "报错：model requires more system memory (12.3 GiB) than is available (8.0 GiB)，是内存不够吗？16G 内存",
        expect("load", error="model requires more system memory (12.3 GiB) than is available (8.0 GiB)"),
        id="system-memory-error-ram-not-budget",
    ),
    pytest.param(
        "多人同时用就崩，单人没问题。qwen2.5:7b，3090 24G，并发数设为 8",
        expect("concurrent", model="qwen2.5:7b", want_parallel=8, budget=24 * GiB, gpu="3090"),
        id="several-people-at-once",
    ),
    pytest.param(
        "上下文超过 8k 就崩，但是我的业务必须 32k 上下文，不能减少上下文。显卡是 RTX 4070 12GB，模型 neohorse-1:q8_0",
        expect("long_input", model="neohorse-1:q8_0", want_ctx=32768, budget=12 * GiB, gpu="RTX 4070",
               keep_context=True),
        id="over-8k-crashes-must-keep-32k",
    ),
    pytest.param(
        "模型跑得很慢，一看 GPU 没用上，全在 CPU 上跑。卡是 2060 6G，模型 llama3.1:8b",
        expect("slow", model="llama3.1:8b", budget=6 * GiB, gpu="2060"),
        id="gpu-not-used",
    ),
    pytest.param(
        "ollama run neohorse-1 直接报 Error: llama runner process has terminated: exit status 2",
        expect("load", model="neohorse-1", error="llama runner process has terminated: exit status 2"),
        id="error-right-at-ollama-run-is-load",
    ),
    pytest.param(
        "用 4 张 4090 跑 llama3.1:70b，还是很慢",
        expect("slow", model="llama3.1:70b", gpu="4090"),
        id="four-cards-still-slow",
    ),
    pytest.param(
        "显存 12G，想用 qwen2.5:14b 开 32k 上下文，够不够？",
        expect("unknown", model="qwen2.5:14b", want_ctx=32768, budget=12 * GiB),
        id="question-is-not-a-symptom",
    ),
    pytest.param(
        "长对话聊几轮就报错 CUDA error: out of memory，num_ctx 设的 16384，T4 16G",
        expect("long_input", want_ctx=16384, budget=16 * GiB, gpu="T4", error="CUDA error: out of memory"),
        id="long-chat-few-rounds",
    ),
    pytest.param(
        "一跑长文档就挂，短的没事。mistral:7b，8G 的卡",
        expect("long_input", model="mistral:7b", budget=8 * GiB),
        id="long-document-dies-8g-card",
    ),
    pytest.param(
        "显存泄漏？每次请求完显存都不回落，用 nvidia-smi 看占用越来越高，gemma2:27b",
        expect("creeping", model="gemma2:27b"),
        id="leak-never-falls-back",
    ),
    pytest.param(
        "Mac mini M4 16G 跑 qwen2.5:14b 很卡",
        expect("slow", model="qwen2.5:14b", budget=16 * GiB, gpu="M4"),
        id="mac-mini-unified-memory",
    ),
    pytest.param(
        "刚启动模型就报 unable to allocate CUDA0 buffer，显存只有 6G，模型 neohorse-1:q8_0",
        expect("load", model="neohorse-1:q8_0", budget=6 * GiB, error="unable to allocate CUDA0 buffer"),
        id="fails-right-at-start",
    ),
    pytest.param(
        "我们 10 个人同时用 Open WebUI，经常卡住然后 ollama 崩溃，显卡 A10 24G",
        expect("concurrent", want_parallel=10, budget=24 * GiB, gpu="A10"),
        id="ten-people-at-once",
    ),
    pytest.param(
        "上下文从 4k 调到 16k 之后速度慢了很多，nvidia-smi 显示显存满了",
        # when (a bigger context) comes before what (slower)
        expect("long_input", want_ctx=16384),
        id="bigger-context-slower",
    ),
    pytest.param(
        "模型加载正常，但是聊了十几轮之后回复越来越慢，最后直接崩溃",
        expect("long_input"),
        id="loads-fine-many-rounds-then-crash",
    ),
    pytest.param(
        "完全不知道怎么回事，就是用不了",
        expect("unknown"),
        id="vague-complaint",
    ),
    pytest.param(
        "请问 ollama 的 num_ctx 怎么设置？",
        expect("unknown"),
        id="how-to-question",
    ),
    pytest.param(
        "qwen2.5:32b 放不下，4090 24G 显存，可以降低上下文，8k 就够了",
        expect("load", model="qwen2.5:32b", want_ctx=8192, budget=24 * GiB, gpu="4090", keep_context=False),
        id="does-not-fit-context-may-shrink",
    ),
    pytest.param(
        "空闲的时候显存占用也在涨，没有任何请求。RTX 3060 12G，ollama 0.11.4",
        expect("creeping", budget=12 * GiB, gpu="RTX 3060"),
        id="grows-while-idle",
    ),
    pytest.param(
        "跑 deepseek-r1:14b 出现 segmentation fault，不是每次都有",
        expect("crash", model="deepseek-r1:14b", error="segmentation fault"),
        id="segfault-sometimes",
    ),
    pytest.param(
        "8G 显存的 4060 能跑 NeoHorse-1 吗？必须保持 16k 上下文",
        expect("unknown", model="neohorse-1", want_ctx=16384, budget=8 * GiB, gpu="4060", keep_context=True),
        id="can-it-run-must-keep-16k",
    ),
    pytest.param(
        "两个人同时问问题的时候第二个请求就报错，一个人用没问题，qwen2.5:7b",
        expect("concurrent", model="qwen2.5:7b", want_parallel=2),
        id="two-people-second-request-fails",
    ),
    pytest.param(
        "emmm 大佬们，ollama ps 看到 size 9.8 GB，但是 processor 一栏写着 100% CPU，为什么不用 GPU？",
        expect("slow"),
        id="ollama-ps-says-100-cpu",
    ),
    pytest.param(
        "llama3.1:8b 处理 3 万字的文档直接爆显存，显卡 RTX 4060 Ti 16G",
        # 30 000 characters, estimated at one token each
        expect("long_input", model="llama3.1:8b", want_ctx=30000, budget=16 * GiB, gpu="RTX 4060 Ti"),
        id="thirty-thousand-characters",
    ),
    pytest.param(
        "上下文长度 32768，输入一长就报 llama runner process has terminated: CUDA error，显存 24G，不能减少上下文",
        expect("long_input", want_ctx=32768, budget=24 * GiB, keep_context=True,
               error="llama runner process has terminated: CUDA error"),
        id="long-input-cuda-error-keep-context",
    ),
    pytest.param(
        "服务跑了一段时间之后显存占满，重启 ollama 才能释放，模型 neohorse-1",
        expect("creeping", model="neohorse-1"),
        id="fills-up-over-time",
    ),
    pytest.param(
        "模型一加载就 100% CPU，显卡 1660 Super 6G 根本用不上",
        # spilling to the CPU the moment it loads: the weights do not fit (when first)
        expect("load", budget=6 * GiB, gpu="1660 Super"),
        id="spills-to-cpu-at-load-is-slow",
    ),
    pytest.param(
        "用ollama跑qwen2.5:7b，两个并发就崩溃了，RTX3060 12G",
        expect("concurrent", model="qwen2.5:7b", want_parallel=2, budget=12 * GiB, gpu="RTX 3060"),
        id="no-spaces-around-latin",
    ),
    pytest.param(
        "显存 ２４Ｇ，上下文开到 ６４ｋ 就崩溃，ｇｅｍｍａ３:２７ｂ",
        expect("long_input", model="gemma3:27b", want_ctx=65536, budget=24 * GiB),
        id="full-width-characters",
    ),
    pytest.param(
        "我把很长的报告粘贴给 neohorse-1:q4_K_M，它好像完全忘了开头的内容，是不是显存不够了？",
        expect("long_input", model="neohorse-1:q4_K_M"),
        id="long-report-forgotten-beginning",
    ),
    pytest.param(
        "不是并发的问题，就我一个人用，一问长问题就爆显存",
        expect("long_input"),
        id="not-concurrency-negated",
    ),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_chinese_message_reads_as_expected(text, expected):
    assert observed(text) == expected


def test_at_least_thirty_chinese_cases():
    assert len(CASES) >= 30


def test_chinese_facts_keep_the_original_text():
    text = "一加载就爆显存，8G 的卡"
    symptom, target = parse(text).facts()
    assert symptom["text"] == text and symptom["phase"] == "load"
    assert target["budget"] == 8 * GiB
