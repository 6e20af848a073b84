"""Intake of English messages written the way people write GitHub issues and
forum posts: each row pins the phase and every value the parser reads."""
from __future__ import annotations

import pytest

from assistant.intake import parse
from tests.intake_table import GiB, observed, expect_in

expect = expect_in('en')


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    """Let a bug inside the parser surface instead of being turned into `unknown`."""
    monkeypatch.setenv("OOMVET_RAISE", "1")


CASES = [
    pytest.param(
        "Running neohorse-1:q8_0 on an RTX 4060 8GB. It fails to load: "
        "Error: llama runner process has terminated: cudaMalloc failed: out of memory",
        expect("load", model="neohorse-1:q8_0", budget=8 * GiB, gpu="RTX 4060",
               error="llama runner process has terminated: cudaMalloc failed: out of memory"),
        id="fails-to-load-runner-terminated",
    ),
    pytest.param(
        "qwen2.5:7b works fine with short prompts but as soon as I paste a long document "
        "(~20k tokens) it crashes. 3060 12GB.",
        expect("long_input", model="qwen2.5:7b", want_ctx=20480, budget=12 * GiB, gpu="3060"),
        id="short-ok-long-document-crashes",
    ),
    pytest.param(
        "Is there a memory leak? VRAM usage keeps growing even when idle, after a few hours "
        "ollama gets OOM killed. llama3.1:8b on a 4090.",
        expect("creeping", model="llama3.1:8b", gpu="4090"),
        id="leak-keeps-growing-idle",
    ),
    pytest.param(
        "With OLLAMA_NUM_PARALLEL=4 and 4 concurrent users the server crashes with "
        "CUDA error: out of memory. Single user is fine. num_ctx 8192, 24GB VRAM (RTX 3090).",
        expect("concurrent", want_ctx=8192, want_parallel=4, budget=24 * GiB, gpu="RTX 3090",
               error="CUDA error: out of memory"),
        id="four-concurrent-users",
    ),
    pytest.param(
        "ollama ps shows 48%/52% CPU/GPU for deepseek-r1:14b and generation is painfully slow, "
        "like 3 tokens/s. GTX 1080 Ti with 11GB.",
        expect("slow", model="deepseek-r1:14b", budget=11 * GiB, gpu="GTX 1080 Ti"),
        id="split-cpu-gpu-slow",
    ),
    pytest.param(
        "Error: model requires more system memory (12.3 GiB) than is available (8.0 GiB)",
        expect("load", error="model requires more system memory (12.3 GiB) than is available (8.0 GiB)"),
        id="system-memory-error-alone-is-load",
    ),
    pytest.param(
        "I need a 32k context window for RAG but with num_ctx 32768 gemma3:12b won't even start "
        "on my 16GB card. 8k works. I can't reduce the context.",
        expect("long_input", model="gemma3:12b", want_ctx=32768, budget=16 * GiB, keep_context=True),
        id="smaller-context-works-beats-wont-start",
    ),
    pytest.param(
        "llama runner process has terminated: exit status 0xc0000409 on Windows, happens randomly. "
        "Model is mistral:7b-instruct.",
        expect("crash", model="mistral:7b-instruct",
               error="llama runner process has terminated: exit status 0xc0000409"),
        id="runner-terminated-random-crash",
    ),
    pytest.param(
        "Getting `unable to allocate CUDA0 buffer` when loading qwen2.5:32b-instruct-q4_K_M on a 24GB 4090, "
        "even with num_ctx 2048.",
        expect("load", model="qwen2.5:32b-instruct-q4_K_M", want_ctx=2048, budget=24 * GiB, gpu="4090",
               error="unable to allocate CUDA0 buffer"),
        id="cuda-oom-when-loading-is-load",
    ),
    pytest.param(
        "Ollama is extremely slow with llama3.1:70b, ollama ps says 100% CPU even though I have "
        "an RTX 4070 Ti Super 16GB",
        expect("slow", model="llama3.1:70b", budget=16 * GiB, gpu="RTX 4070 Ti Super"),
        id="hundred-percent-cpu",
    ),
    pytest.param(
        "After a few rounds of chat the model dies. First messages are fine, but once the conversation "
        "gets long it runs out of memory. phi3:14b, num_ctx 16k, 12GB 3060.",
        expect("long_input", model="phi3:14b", want_ctx=16384, budget=12 * GiB, gpu="3060"),
        id="conversation-gets-long",
    ),
    pytest.param(
        'When 3 people use our internal chatbot at the same time, Ollama crashes with "model runner has '
        "unexpectedly stopped, this may be due to resource limitations or an internal error, check ollama "
        'server logs for details". Model: qwen2.5:14b, A100 40GB.',
        expect("concurrent", model="qwen2.5:14b", want_parallel=3, budget=40 * GiB, gpu="A100",
               error="model runner has unexpectedly stopped, this may be due to resource limitations or an "
                     "internal error, check ollama server logs for details"),
        id="three-people-at-the-same-time",
    ),
    pytest.param(
        "My M2 Max with 32GB unified memory gets really slow with llama3.3:70b, Activity Monitor shows swap. "
        "Is it memory?",
        expect("slow", model="llama3.3:70b", budget=32 * GiB, gpu="M2 Max"),
        id="apple-unified-memory-slow",
    ),
    pytest.param(
        "ollama run neohorse-1 -> Error: timed out waiting for llama runner to start - progress 1.00",
        expect("load", model="neohorse-1", error="timed out waiting for llama runner to start - progress 1.00"),
        id="runner-start-timeout",
    ),
    pytest.param(
        "how do I pick num_ctx for a 8GB card?",
        expect("unknown", budget=8 * GiB),
        id="question-without-symptom",
    ),
    pytest.param(
        "Memory is not released after requests finish - nvidia-smi still shows 7.5GB used by ollama "
        "30 minutes later. Model llama3.2:3b.",
        expect("creeping", model="llama3.2:3b"),
        id="not-released-after-requests",
    ),
    pytest.param(
        "Segmentation fault (core dumped) right after the first token with gemma2:9b on a Tesla T4 16GB",
        expect("crash", model="gemma2:9b", budget=16 * GiB, gpu="T4", error="Segmentation fault (core dumped)"),
        id="segfault",
    ),
    pytest.param(
        "Works with 4k context, but set num_ctx to 65536 and it OOMs immediately. 2x RTX 3090 (24GB each). "
        "Model: qwen2.5-coder:32b",
        expect("long_input", model="qwen2.5-coder:32b", want_ctx=65536, budget=24 * GiB, gpu="RTX 3090"),
        id="raising-num-ctx-ooms",
    ),
    pytest.param(
        "Ollama uses the CPU instead of the GPU for llama3.1:8b, GPU utilization is 0% and it's slow. RTX 2060 6GB.",
        expect("slow", model="llama3.1:8b", budget=6 * GiB, gpu="RTX 2060"),
        id="cpu-instead-of-gpu",
    ),
    pytest.param(
        "I'm serving mistral-nemo:12b to a team via Open WebUI, with OLLAMA_NUM_PARALLEL=8 it gets OOM "
        "as soon as several users chat simultaneously.",
        expect("concurrent", model="mistral-nemo:12b", want_parallel=8),
        id="num-parallel-several-users",
    ),
    pytest.param(
        "llama3.1:8b, 8GB VRAM, need the full 128k context. Currently crashes above 32k with "
        "cudaMalloc failed: out of memory.",
        expect("long_input", model="llama3.1:8b", want_ctx=131072, budget=8 * GiB, keep_context=True,
               error="cudaMalloc failed: out of memory"),
        id="need-full-128k-crashes-above-32k",
    ),
    pytest.param(
        "vram keeps climbing with every request until ollama crashes, restarting the service frees it. codellama:13b",
        expect("creeping", model="codellama:13b"),
        id="keeps-climbing-until-crash",
    ),
    pytest.param(
        "I don't mind a smaller context, 8k is enough. I just want qwen2.5:14b to run on my 4060 Ti 16GB "
        "without spilling to CPU.",
        expect("unknown", model="qwen2.5:14b", want_ctx=8192, budget=16 * GiB, gpu="4060 Ti", keep_context=False),
        id="wish-not-symptom-context-may-shrink",
    ),
    pytest.param(
        "Why does deepseek-r1:32b run so slowly? ollama ps: 19 GB 25%/75% CPU/GPU. I have a 4090.",
        expect("slow", model="deepseek-r1:32b", gpu="4090"),
        id="ollama-ps-paste-slow",
    ),
    pytest.param(
        "Getting 'server busy, please try again.  maximum pending requests exceeded' when our CI hits "
        "the endpoint, model llama3.2:1b",
        expect("concurrent", model="llama3.2:1b",
               error="server busy, please try again.  maximum pending requests exceeded"),
        id="server-busy-is-concurrency",
    ),
    pytest.param(
        "GGML_ASSERT(ctx->mem_buffer != NULL) failed on every request, model tinyllama",
        expect("crash", model="tinyllama", error="GGML_ASSERT(ctx->mem_buffer != NULL) failed"),
        id="ggml-assert",
    ),
    pytest.param(
        "Ran the same prompt at 2k, 8k and 16k context: 2k and 8k fine, 16k gives CUDA error: out of memory. "
        "llama3.1:8b-instruct-fp16 on 24GB.",
        expect("long_input", model="llama3.1:8b-instruct-fp16", want_ctx=16384, error="CUDA error: out of memory"),
        id="tiers-by-hand",
    ),
    pytest.param(
        "Everything was fine until I bumped context length to 32k; now answers take minutes and nvidia-smi "
        "shows only 5GB used on my 8GB card",
        expect("slow", want_ctx=32768, budget=8 * GiB),
        id="bigger-context-now-slow",
    ),
    pytest.param(
        "ollama keeps eating more VRAM over time, it never goes down even after keep_alive expires. "
        "Model: neohorse-1:q4_K_M",
        expect("creeping", model="neohorse-1:q4_K_M"),
        id="never-goes-down",
    ),
    pytest.param(
        "can't load NeoHorse-1 on my laptop (RTX 3050 4GB): Error: llama runner process has terminated: "
        "error loading model: unable to allocate CUDA0 buffer",
        expect("load", model="neohorse-1", budget=4 * GiB, gpu="RTX 3050",
               error="llama runner process has terminated: error loading model: unable to allocate CUDA0 buffer"),
        id="cant-load-bare-name-normalised",
    ),
    pytest.param(
        "qwen2.5:7b is fine for me alone, but when two users ask questions concurrently the second request fails",
        expect("concurrent", model="qwen2.5:7b", want_parallel=2),
        id="two-users-concurrently",
    ),
    pytest.param(
        "Summarizing a 50-page PDF with llama3.1:8b kills the runner: signal: killed. 32GB RAM, no GPU.",
        expect("long_input", model="llama3.1:8b", error="signal: killed"),
        id="long-pdf-system-ram-is-not-budget",
    ),
    pytest.param(
        "What's the best quant of llama3.1:70b for 2x 24GB?",
        expect("unknown", model="llama3.1:70b"),
        id="quant-question",
    ),
    pytest.param(
        'Loading qwen2.5:72b on a 48GB A6000 gives "llama runner process has terminated: CUDA error: out of memory"',
        expect("load", model="qwen2.5:72b", budget=48 * GiB, gpu="A6000",
               error="llama runner process has terminated: CUDA error: out of memory"),
        id="loading-quoted-error",
    ),
    pytest.param(
        "Open WebUI with 5 concurrent users on a single L4 (24GB) - ollama ps shows the model partially "
        "offloaded and everyone waits forever",
        expect("concurrent", want_parallel=5, budget=24 * GiB, gpu="L4"),
        id="concurrency-beats-slow",
    ),
    pytest.param(
        "context 8192 works, 16k fails to load with unable to allocate CUDA0 buffer (neohorse-1:q8_0, 12GB 3060)",
        expect("long_input", model="neohorse-1:q8_0", want_ctx=16384, budget=12 * GiB, gpu="3060",
               error="unable to allocate CUDA0 buffer"),
        id="smaller-context-works-larger-fails-to-load",
    ),
    pytest.param(
        "Even a short prompt like 'hi' OOMs with Llama 3.1 8B on my GTX 1650 4GB",
        expect("load", model="llama3.1:8b", budget=4 * GiB, gpu="GTX 1650"),
        id="even-short-prompt-is-load",
    ),
    pytest.param(
        "It is not slow and there is no concurrency, it just crashes with OLLAMA_NUM_PARALLEL=1 and long prompts",
        expect("long_input", want_parallel=1),
        id="negated-slow-and-concurrency",
    ),
    pytest.param(
        "The model loads but every second request takes 40 seconds, GPU usage drops to 0%",
        expect("slow"),
        id="seconds-per-request-gpu-idle",
    ),
    pytest.param(
        "Loading neohorse-1:f16 is fine but then it answers at about two tokens a second. "
        "ollama ps says 14.9 GB and only part of it on the GPU.",
        expect("slow", model="neohorse-1:f16"),
        id="two-tokens-a-second",
    ),
    pytest.param(
        "Budget is 6GiB on a shared A100; I must keep 32k context for neohorse-1:q8_0. What fits?",
        expect("unknown", model="neohorse-1:q8_0", want_ctx=32768, budget=6 * GiB, gpu="A100", keep_context=True),
        id="budget-on-shared-gpu",
    ),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_english_message_reads_as_expected(text, expected):
    assert observed(text) == expected


def test_at_least_thirty_english_cases():
    assert len(CASES) >= 30


def test_phase_cue_names_the_words_that_decided():
    got = parse("works with short prompts, long prompts crash")
    assert got.phase == "long_input"
    assert got.phase_cue in {"short prompts", "long prompts"}


def test_facts_carry_the_text_and_validate():
    text = "neohorse-1:q8_0 fails to load on my 8GB card"
    symptom, target = parse(text).facts()
    assert symptom == {"kind": "symptom", "phase": "load", "text": text, "error": None}
    assert target == {"kind": "target", "model": "neohorse-1:q8_0", "want_ctx": None,
                      "want_parallel": None, "budget": 8 * GiB, "keep_context": None}
