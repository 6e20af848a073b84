"""Intake of mixed Chinese/English messages, language detection, merging a
chat's messages, and the promise that no text makes intake fail."""
from __future__ import annotations

import random

import pytest

from assistant.intake import Intake, detect_lang, merge, normalise_model, parse
from rules.facts import PHASES, validate
from tests.intake_table import GiB, observed, expect


MIXED = [
    pytest.param(
        "用 ollama 跑 llama3.1:8b，when context > 16k it crashes with cudaMalloc failed: out of memory, 4060 8G",
        expect("en", "long_input", model="llama3.1:8b", want_ctx=16384, budget=8 * GiB, gpu="4060",
               error="cudaMalloc failed: out of memory"),
        id="mostly-english-prose",
    ),
    pytest.param(
        "neohorse-1:q8_0 在 RTX 3090 24GB 上 fails to load，报错 unable to allocate CUDA0 buffer，是不是要换 q4？",
        expect("zh", "load", model="neohorse-1:q8_0", budget=24 * GiB, gpu="RTX 3090",
               error="unable to allocate CUDA0 buffer"),
        id="english-phrase-in-chinese-sentence",
    ),
    pytest.param(
        "我们有 4 concurrent users，OLLAMA_NUM_PARALLEL=4 之后 qwen2.5:14b 就 OOM 了",
        expect("zh", "concurrent", model="qwen2.5:14b", want_parallel=4),
        id="concurrent-users-mixed",
    ),
    pytest.param(
        "long prompt 就崩，short 的没问题，num_ctx 32k，8G VRAM",
        expect("zh", "long_input", want_ctx=32768, budget=8 * GiB),
        id="long-prompt-short-ok-mixed",
    ),
    pytest.param(
        "显存 keeps growing，一直不释放，model 是 neohorse-1",
        expect("zh", "creeping", model="neohorse-1"),
        id="keeps-growing-mixed",
    ),
    pytest.param(
        "My 4090 跑 qwen2.5:32b 特别慢, ollama ps says 30%/70% CPU/GPU",
        expect("zh", "slow", model="qwen2.5:32b", gpu="4090"),
        id="slow-mixed",
    ),
    pytest.param(
        "I run 通义千问 qwen2.5 on a 8GB card and it crashes when context > 8k",
        expect("en", "long_input", model="qwen2.5", want_ctx=8192, budget=8 * GiB),
        id="chinese-model-name-in-english",
    ),
    pytest.param(
        "报错如下：\n```\nError: llama runner process has terminated: cudaMalloc failed: out of memory\n```\n"
        "ollama run neohorse-1:q8_0 的时候出现的",
        expect("zh", "load", model="neohorse-1:q8_0",
               error="llama runner process has terminated: cudaMalloc failed: out of memory"),
        id="code-fence-log-paste",
    ),
]


@pytest.mark.parametrize("text, expected", MIXED)
def test_mixed_message_reads_as_expected(text, expected, raise_errors):
    assert observed(text) == expected


# --------------------------------------------------------------------------- language

@pytest.mark.parametrize("text, lang", [
    ("一加载就爆显存", "zh"),
    ("慢", "zh"),
    ("fails to load", "en"),
    ("报错如下：llama runner process has terminated: cudaMalloc failed: out of memory "
     "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0", "zh"),
    ("帮忙看看：time=2025-01-01T10:00:00Z level=ERROR source=sched.go:455 msg=\"error loading llama server\"", "zh"),
    ("the model replied 你 and then crashed with a long prompt on my card", "en"),
    ("", "en"),
    ("4060 8G 32k", "en"),
])
def test_language_follows_the_prose_not_the_pasted_log(text, lang):
    assert detect_lang(text) == lang


# --------------------------------------------------------------------------- nothing to read

@pytest.mark.parametrize("text", [
    "", "   ", "\n\t", "asdfgh qwerty zxcv", "😀🔥💥", "？？？", "!!!", "1234567890", "```", '"""',
    "\x00\x01\x02", "k k k 32k", "G" * 500, "上下文", "ollama", "OOM?"[:0], "\u200b\u200d",
])
def test_text_with_no_symptom_is_unknown_without_exception(text, raise_errors):
    got = parse(text)
    assert got.phase == "unknown"
    for fact in got.facts():
        validate(fact)


@pytest.mark.parametrize("value", [None, 42, b"fails to load", ["long prompts"]])
def test_non_text_is_read_as_empty(value):
    got = parse(value)
    assert (got.phase, got.model, got.text) == ("unknown", None, "")


def test_random_text_never_breaks_the_parser(raise_errors):
    alphabet = list("ab kKgGmM0123456789.:/-_=%()[]\"'`，。：；！？\n") + list("上下文显存并发长慢崩加载释放一直涨个的卡") + ["😀"]
    rng = random.Random(20240611)
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        got = parse(text)
        assert got.phase in PHASES
        assert got.budget is None or got.budget > 0
        assert got.want_ctx is None or got.want_ctx > 0
        for fact in got.facts():
            validate(fact)


def test_a_long_paste_is_read_in_reasonable_time(raise_errors):
    import time

    log = ('time=2025-01-01T10:00:00.000Z level=INFO source=server.go:123 msg="offload" '
           'layers.requested=-1 memory.available="[7.5 GiB]" memory.required.kv="1.0 GiB"\n') * 200
    text = "一跑长文档就崩\n" + log + "sha256-" + "0" * 5000 + "\nError: llama runner process has terminated: exit status 2"
    start = time.perf_counter()
    got = parse(text)
    assert time.perf_counter() - start < 5.0
    assert got.phase == "long_input"
    assert got.error == "llama runner process has terminated: exit status 2"


# --------------------------------------------------------------------------- a chat is several messages

def test_later_message_fills_what_the_first_left_out():
    first = parse("一加载就爆显存，模型是 neohorse-1:q8_0")
    second = parse("8G 的卡")
    merged = merge(first, second)
    assert (merged.phase, merged.model, merged.budget, merged.lang) == ("load", "neohorse-1:q8_0", 8 * GiB, "zh")
    assert merged.text == "一加载就爆显存，模型是 neohorse-1:q8_0\n8G 的卡"


def test_later_message_overrides_values_and_phase():
    first = parse("num_ctx 8192 crashes with qwen2.5:7b")
    second = parse("actually it only breaks with long prompts, and I need 32k context")
    merged = merge(first, second)
    assert (merged.phase, merged.want_ctx, merged.model, merged.keep_context) == ("long_input", 32768, "qwen2.5:7b", True)


def test_unknown_phase_in_a_later_message_keeps_the_earlier_one():
    merged = merge(parse("fails to load"), parse("4090"))
    assert merged.phase == "load"
    assert merged.gpu == "4090"


def test_language_comes_from_the_first_message_with_words():
    assert merge(parse("long prompts crash"), parse("显存 8G，上下文 32k")).lang == "en"
    assert merge(parse(""), parse("长文本就崩")).lang == "zh"
    assert merge(parse("4060 8G"), parse("长文本就崩")).lang == "zh"


def test_merge_of_empty_messages_is_empty():
    assert merge(Intake(), parse("")) == Intake()


@pytest.mark.parametrize("name, tidy", [
    ("NeoHorse-1", "neohorse-1"),
    ("NeoHorse-1:Q8_0", "neohorse-1:Q8_0"),
    ("llama3.1:8b-instruct-q4_K_M", "llama3.1:8b-instruct-q4_K_M"),
    ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"),
    ("  ", None),
    (None, None),
])
def test_model_names_are_normalised_as_ollama_resolves_them(name, tidy):
    assert normalise_model(name) == tidy
