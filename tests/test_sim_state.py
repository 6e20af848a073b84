"""The simulated server's memory behaviour, without HTTP: placement as the
memory model predicts it, reloads, out-of-memory texts, leaks, truncation."""
from __future__ import annotations

import pytest

from probes import memmodel as mm
from oomsim.scenario import scenario_from_dict
from oomsim.messages import LOAD_OOM, RUNTIME_OOM
from oomsim.settings import SimError, parse_keep_alive
from oomsim.state import SimState

GiB, MiB = 1 << 30, 1 << 20
LLAMA8B = {"arch": "llama", "block_count": 32, "head_count": 32, "head_count_kv": 8, "embedding_length": 4096,
           "context_length": 32768, "vocab_size": 128256}


def scenario(**over):
    data = {
        "device": {"name": "NVIDIA GeForce RTX 4060", "vendor": "nvidia", "total": "8GiB",
                   "used_by_others": "600MiB"},
        "server": {"context_length": 4096},
        "models": {"neohorse-1:f16": dict(LLAMA8B, weights="14.9GiB", quantization="F16"),
                   "neohorse-1:q4_K_M": dict(LLAMA8B, weights="4.58GiB", quantization="Q4_K_M")},
        "timing": {"load_s": 0, "request_s": 0},
    }
    for key, value in over.items():
        data[key] = value
    return scenario_from_dict(data, "test.yaml")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(state: SimState, tag: str, prompt: str = "Hello there.", **options):
    runner, _ = state.schedule(tag, options, None)
    ticket = state.begin(runner, prompt, options)
    state.finish(ticket)
    return runner, ticket


ARCH = mm.Arch("llama", 32, 32, 8, 4096, 32768, 128256)
FREE = 8 * GiB - 600 * MiB


def test_placement_is_the_memory_model_prediction():
    state = SimState(scenario())
    runner, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    assert runner.placement == mm.place(ARCH, round(4.58 * GiB), 8192, 1, 512, "f16", FREE)
    assert runner.placement.where == "gpu"


def test_device_reads_others_plus_the_runner_without_its_spare_layer():
    state = SimState(scenario())
    idle = state.used_bytes()
    assert idle == 600 * MiB
    runner, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    p = runner.placement
    assert state.used_bytes() - idle == p.size_vram_bytes - p.buffer_bytes


def test_f16_on_8gib_spills_layers_to_cpu():
    state = SimState(scenario())
    runner, _ = state.schedule("neohorse-1:f16", {"num_ctx": 2048}, None)
    p = runner.placement
    assert p.where == "partial" and p.size_vram_bytes < p.size_bytes
    assert state.used_bytes() <= 8 * GiB


def test_kv_growth_per_token_on_the_device_matches_the_model():
    state = SimState(scenario())
    used = {}
    for ctx in (2048, 8192):
        state.schedule("neohorse-1:q4_K_M", {"num_ctx": ctx}, None)
        used[ctx] = state.used_bytes()
    graph_growth = mm.graph_bytes(ARCH, 8192)[0] - mm.graph_bytes(ARCH, 2048)[0]
    per_token = (used[8192] - used[2048] - graph_growth) / 6144
    # the spare layer is not allocated, but its KV share is part of the estimate's buffer
    assert per_token == pytest.approx(mm.kv_bytes_per_token(ARCH), rel=0.05)


def test_a_different_num_ctx_reloads_and_the_same_does_not():
    state = SimState(scenario())
    first, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 2048}, None)
    same, load_ns = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 2048, "num_gpu": -1}, None)
    assert same is first and load_ns == 0
    other, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)
    assert other is not first and not first.alive
    assert [r.num_ctx for r in state.loaded()] == [4096]


def test_a_request_without_num_ctx_gets_the_server_default():
    state = SimState(scenario(server={"context_length": 2048}))
    runner, _ = state.schedule("neohorse-1:q4_K_M", {}, None)
    assert runner.num_ctx == 2048


def test_forced_num_gpu_beyond_the_device_fails_with_the_cuda_oom_text():
    state = SimState(scenario())
    with pytest.raises(SimError) as err:
        state.schedule("neohorse-1:f16", {"num_ctx": 2048, "num_gpu": 99}, None)
    assert (err.value.status, err.value.text) == (500, LOAD_OOM)
    assert state.loaded() == [] and state.used_bytes() == 600 * MiB


def test_forced_num_gpu_that_fits_loads_those_layers():
    state = SimState(scenario())
    runner, _ = state.schedule("neohorse-1:f16", {"num_ctx": 2048, "num_gpu": 5}, None)
    assert runner.placement.layers_gpu == 5


def test_unknown_model_is_404_with_ollamas_text():
    with pytest.raises(SimError) as err:
        SimState(scenario()).schedule("llama9:70b", {}, None)
    assert (err.value.status, err.value.text) == (404, "model 'llama9:70b' not found")


def test_prompt_longer_than_num_ctx_is_truncated_to_num_ctx():
    state = SimState(scenario())
    long_prompt = "word " * 3000
    _, ticket = run(state, "neohorse-1:q4_K_M", long_prompt, num_ctx=1024)
    assert ticket.truncated and ticket.prompt_tokens == 1024 and ticket.sent_tokens > 1024
    assert any("truncating input prompt" in line for line in state.log)
    _, ticket = run(state, "neohorse-1:q4_K_M", long_prompt, num_ctx=8192)
    assert not ticket.truncated and ticket.prompt_tokens == ticket.sent_tokens


def test_num_ctx_is_clamped_to_the_training_context():
    state = SimState(scenario())
    runner, ticket = run(state, "neohorse-1:q4_K_M", "word " * 40000, num_ctx=65536)
    assert runner.num_ctx == 65536  # /api/ps shows what was asked
    assert ticket.prompt_tokens == 32768  # the runner holds the training context
    assert runner.placement.kv_bytes == mm.kv_cache_bytes(ARCH, 32768)


def test_num_predict_gives_length_and_a_natural_end_gives_stop():
    state = SimState(scenario())
    _, ticket = run(state, "neohorse-1:q4_K_M", num_predict=5)
    assert len(ticket.pieces) == 5 and ticket.done_reason == "length"
    _, ticket = run(state, "neohorse-1:q4_K_M", num_predict=-1)
    assert ticket.done_reason == "stop" and 20 < len(ticket.pieces) < 400


def test_generated_text_is_deterministic_for_a_seed():
    state = SimState(scenario())
    a = run(state, "neohorse-1:q4_K_M", "Summarise: 12 apples.", seed=7)[1].pieces
    b = run(state, "neohorse-1:q4_K_M", "Summarise: 12 apples.", seed=7)[1].pieces
    c = run(state, "neohorse-1:q4_K_M", "Summarise: 12 apples.", seed=8)[1].pieces
    assert a == b and a != c


def test_parallel_slots_multiply_the_kv_cache_after_a_restart():
    state = SimState(scenario())
    one, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 2048}, None)
    state.restart({"OLLAMA_NUM_PARALLEL": "4"})
    assert state.loaded() == []  # a restart unloads everything
    four, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 2048}, None)
    assert four.placement.kv_bytes == 4 * one.placement.kv_bytes
    assert state.env()["OLLAMA_NUM_PARALLEL"] == "4"
    state.restart({"OLLAMA_NUM_PARALLEL": ""})  # empty = back to the default
    assert state.env()["OLLAMA_NUM_PARALLEL"] == "1"


def test_kv_cache_type_applies_only_with_flash_attention():
    state = SimState(scenario())
    state.restart({"OLLAMA_KV_CACHE_TYPE": "q8_0"})
    f16, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    assert f16.kv_type == "f16"
    assert any("quantized kv cache requested but flash attention disabled" in line for line in state.log)
    state.restart({"OLLAMA_FLASH_ATTENTION": "1"})
    q8, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    assert q8.kv_type == "q8_0"
    assert q8.placement.kv_bytes == mm.kv_cache_bytes(ARCH, 8192, kv_type="q8_0")


def test_leak_per_request_keeps_memory_until_a_request_crashes_the_runner():
    state = SimState(scenario(faults={"leak_per_request": "400MiB"}))
    runner, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)
    after_load = state.used_bytes()
    readings = []
    with pytest.raises(SimError) as err:
        for _ in range(20):
            run(state, "neohorse-1:q4_K_M", num_ctx=4096)
            readings.append(state.used_bytes())
    assert readings[0] - after_load == 400 * MiB
    assert readings == sorted(readings)  # never given back
    # the crash says what the runtime printed, and the log has the OOM line (not the generic text alone)
    assert (err.value.status, err.value.text) == (500, RUNTIME_OOM)
    assert any("CUDA error: out of memory" in line for line in state.log)
    assert not runner.alive and state.used_bytes() == 600 * MiB  # a dead runner frees everything


def test_leak_per_minute_creeps_while_idle():
    clock = Clock()
    state = SimState(scenario(faults={"leak_per_minute": "120MiB"}), clock=clock)
    state.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)
    before = state.used_bytes()
    clock.now += 30
    assert state.used_bytes() - before == 60 * MiB


def test_peak_extra_beyond_the_device_crashes_the_request_not_the_load():
    state = SimState(scenario(faults={"peak_extra": "2GiB"}))
    runner, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    with pytest.raises(SimError, match="CUDA error: out of memory"):
        state.begin(runner, "hello", {})
    assert state.loaded() == []


def test_scratch_memory_is_held_only_during_a_request():
    state = SimState(scenario())
    runner, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)
    before = state.used_bytes()
    ticket = state.begin(runner, "a prompt of some length " * 20, {})
    during = state.used_bytes()
    state.finish(ticket)
    assert during > before and state.used_bytes() == before


def test_runner_error_fault_fails_requests_with_ollamas_wrapper_text():
    state = SimState(scenario(faults={"runner_error": {"neohorse-1:q4_K_M": "GGML_ASSERT(ok) failed"}}))
    runner, _ = state.schedule("neohorse-1:q4_K_M", {}, None)
    with pytest.raises(SimError, match="an error was encountered while running the model: GGML_ASSERT"):
        state.begin(runner, "hi", {})


def test_keep_alive_expires_the_model():
    clock = Clock()
    state = SimState(scenario(), clock=clock)
    state.schedule("neohorse-1:q4_K_M", {}, "10s")
    clock.now += 9
    assert len(state.loaded()) == 1
    clock.now += 2
    assert state.loaded() == []
    state.schedule("neohorse-1:q4_K_M", {}, -1)
    clock.now += 10 ** 6
    assert len(state.loaded()) == 1


def test_loading_a_model_that_does_not_fit_evicts_an_idle_one():
    state = SimState(scenario())
    state.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    state.schedule("neohorse-1:f16", {"num_ctx": 2048}, None)
    assert [r.model.tag for r in state.loaded()] == ["neohorse-1:f16"]


def test_spilling_beyond_system_ram_fails_the_load():
    state = SimState(scenario(host={"total": "16GiB", "used": "12GiB"}))
    with pytest.raises(SimError, match=r"model requires more system memory \(.* GiB\) than is available"):
        state.schedule("neohorse-1:f16", {"num_ctx": 2048}, None)


def test_keep_alive_values_read_like_ollama():
    assert parse_keep_alive("5m", None) == 300
    assert parse_keep_alive("1h30m", None) == 5400
    assert parse_keep_alive(0, 300) == 0
    assert parse_keep_alive(-1, 300) is None
    assert parse_keep_alive("-1m", 300) is None
    assert parse_keep_alive(None, 300) == 300
    with pytest.raises(SimError, match="invalid duration"):
        parse_keep_alive("soon", 300)


def test_a_context_below_2048_shows_the_estimate_floor_but_reads_the_real_kv():
    state = SimState(scenario())
    small, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 1024}, None)
    used_small, ps_small = state.used_bytes(), small.placement.size_bytes
    big, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 2048}, None)
    assert ps_small == big.placement.size_bytes  # /api/ps: Ollama sizes at least 2048 cells
    grown = state.used_bytes() - used_small
    assert grown >= 1024 * mm.kv_bytes_per_token(ARCH)  # the runner really holds only 1024


def test_unload_during_a_request_waits_for_its_answer():
    state = SimState(scenario())
    runner, _ = state.schedule("neohorse-1:q4_K_M", {}, None, hold=True)
    ticket = state.begin(runner, "hello", {})
    state.unload("neohorse-1:q4_K_M")
    assert runner.alive and len(state.loaded()) == 1
    state.finish(ticket, "5m")
    state.release(runner)
    assert state.loaded() == [] and not runner.alive
