"""One classifier for both engines' error texts: what counts as out-of-memory,
and what only counts with evidence from the server log or the kernel."""
from __future__ import annotations

import pytest

from probes.ollama_api import Generation
from probes.oomtext import OOM_KINDS, classify, is_oom_text, oom_marker
from rules.facts import FAILURES

GENERIC = ("model runner has unexpectedly stopped, this may be due to resource limitations or an internal "
           "error, check ollama server logs for details")


@pytest.mark.parametrize("text,kind,era", [
    # legacy runner (v0.11.4)
    ("llama runner process has terminated: cudaMalloc failed: out of memory", "startup_oom", "legacy"),
    ("llama runner process has terminated: error loading model: unable to allocate CUDA0 buffer",
     "startup_oom", "legacy"),
    ("model requires more system memory (12.3 GiB) than is available (8.0 GiB)", "startup_oom", "legacy"),
    ("an error was encountered while running the model: CUDA error: out of memory", "runtime_oom", None),
    ("an error was encountered while running the model: error:Insufficient Memory "
     "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)", "runtime_oom", None),
    ("llama runner process has terminated: GGML_ASSERT(n_dims == 2) failed", "crash", "legacy"),
    ("timed out waiting for llama runner to start - progress 0.00 - ", "timeout", "legacy"),
    # current llama-server engine (v0.34.4)
    ("llama-server reported out-of-memory during startup: ggml_backend_cpu_buffer_type_alloc_buffer: "
     "failed to allocate buffer of size 2147483648", "startup_oom", "current"),
    ("llama-server startup failed before projector CPU offload retry: llama-server reported out-of-memory "
     "during startup: ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1048576", "startup_oom",
     "current"),
    ("llama-server process has terminated: exit status 1: llama_init_from_model: failed to initialize the "
     "context: quantized V cache requires flash_attn to be enabled", "config", "current"),
    ("llama-server process has terminated: exit status 0xe06d7363", "crash", "current"),
    ("error starting llama-server: llama-server binary not found (checked: /usr/lib/ollama/llama-server). "
     "Run 'cmake -S llama/server --preset cpu && cmake --build --preset cpu' first", "engine_missing", "current"),
    (GENERIC + ": ggml_backend_cuda_graph_compute: CUDA error: out of memory", "runtime_oom", None),
    ("model 'neohorse-9' not found", "not_found", None),
    ("model \"x\" not found, try pulling it first", "not_found", None),
    ("server busy, please try again.  maximum pending requests exceeded", "busy", None),
    ("the prompt is longer than the context length currently available to the model", "error", None),
])
def test_each_era_text_gets_its_kind(text, kind, era):
    failure = classify(text)
    assert (failure.kind, failure.era) == (kind, era)
    assert failure.oom is (kind in OOM_KINDS)
    assert failure.kind in FAILURES


def test_the_generic_runner_stopped_text_alone_is_a_crash_not_oom():
    assert classify(GENERIC).kind == "crash"
    assert not is_oom_text(GENERIC)


def test_the_generic_text_is_oom_with_an_oom_line_from_that_request_in_the_log():
    log = ['time=... level=INFO source=server.go msg="llama runner started"',
           "CUDA error: out of memory",
           "  current device: 0, in function ggml_backend_cuda_graph_compute at ggml-cuda.cu:2345"]
    failure = classify(GENERIC, log)
    assert (failure.kind, failure.marker, failure.evidence) == ("runtime_oom", "out of memory", "log")


def test_ollamas_own_runtime_oom_line_is_evidence():
    failure = classify(GENERIC, ['level=WARN msg="runtime OOM detected; expiring loaded models to clear memory '
                                 'before next request"'])
    assert failure.kind == "runtime_oom"


def test_benign_fit_lines_are_not_evidence():
    log = ["common_fit_params: failed to fit params to free device memory: n_gpu_layers already set by user to 33, "
           "abort", "common_params_fit_impl: cannot meet free memory target of 1024 MiB, need to reduce device "
           "memory by 300 MiB"]
    assert classify(GENERIC, log).kind == "crash"


def test_signal_killed_is_the_oom_killer_only_with_a_kernel_line():
    text = "llama-server process has terminated: signal: killed"
    assert classify(text).kind == "crash"
    kernel = ["[12345.6] Out of memory: Killed process 4242 (llama-server) total-vm:9000000kB, anon-rss:8000000kB"]
    failure = classify(text, kernel)
    assert (failure.kind, failure.evidence, failure.oom) == ("killed", "log", True)


def test_a_missing_engine_is_never_oom_even_with_oom_lines_in_the_log():
    text = "error starting llama-server: llama-server binary not found (checked: a, b)"
    assert classify(text, ["cudaMalloc failed: out of memory"]).kind == "engine_missing"


def test_the_phase_decides_startup_or_runtime_for_a_bare_marker():
    assert classify("CUDA error: out of memory", phase="load").kind == "startup_oom"
    assert classify("CUDA error: out of memory", phase="request").kind == "runtime_oom"


def test_no_error_is_no_failure():
    assert classify(None) is None and classify("  ") is None
    assert oom_marker("all good") is None


def test_fact_fields_carry_kind_and_marker():
    assert classify("llama runner process has terminated: cudaMalloc failed: out of memory").fields() == {
        "failure": "startup_oom", "oom_marker": "out of memory"}
    assert classify(GENERIC).fields() == {"failure": "crash", "oom_marker": None}


def test_generation_oom_and_failure_use_the_classifier():
    gen = Generation(ok=False, status=-1, error=GENERIC)
    assert not gen.oom
    assert gen.failure(["ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1"]).kind == "runtime_oom"
    assert Generation(ok=True).failure() is None


def test_a_refused_llama_arg_variable_is_a_config_failure_seen_in_the_log():
    # seen on the rig (v0.34.4): LLAMA_ARG_KV_OFFLOAD=<bad> makes llama-server exit 1 at start
    log = ['error while handling environment variable "LLAMA_ARG_KV_OFFLOAD": invalid boolean value']
    assert classify("llama-server process has terminated: exit status 1").kind == "crash"
    failure = classify("llama-server process has terminated: exit status 1", log)
    assert (failure.kind, failure.evidence, failure.oom) == ("config", "log", False)
