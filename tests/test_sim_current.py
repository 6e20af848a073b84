"""The simulator playing the current llama-server engine (server.version >=
0.30): VRAM-tier default context, automatic back-off, measured /api/ps, the
engine's error texts and log lines; and the era of each text it sends."""
from __future__ import annotations

import pytest

from probes.oomtext import classify
from probes.serverlog import MemoryLog, parse
from oomsim.scenario import ScenarioError, scenario_from_dict
from oomsim.server import SimServer
from oomsim.messages import CRASH
from oomsim.settings import SimError
from oomsim.state import SimState

GiB, MiB = 1 << 30, 1 << 20
LLAMA8B = {"arch": "llama", "block_count": 32, "head_count": 32, "head_count_kv": 8, "embedding_length": 4096,
           "context_length": 131072, "vocab_size": 128256}


def scenario(version="0.34.4", total="24GiB", server=None, host=None, **over):
    data = {
        "device": {"name": "NVIDIA GeForce RTX 4090", "vendor": "nvidia", "total": total, "used_by_others": "0MiB"},
        "server": {"version": version, **(server or {})},
        "models": {"neohorse-1:q4_K_M": dict(LLAMA8B, weights="4.58GiB", quantization="Q4_K_M"),
                   "other:latest": dict(LLAMA8B, weights="1GiB", quantization="Q4_K_M"),
                   "big:latest": dict(LLAMA8B, weights="31GiB", quantization="Q4_K_M")},
        "timing": {"load_s": 0, "request_s": 0},
    }
    if host:
        data["host"] = host
    data.update(over)
    return scenario_from_dict(data, "test.yaml")


def digest(state: SimState, since: int = 0):
    return parse(MemoryLog(lambda: state.log).lines_since(since))


def test_zero_with_a_unit_is_a_size():
    assert scenario().device.used_by_others_bytes == 0
    with pytest.raises(ScenarioError, match="not a size"):
        scenario(device={"name": "x", "vendor": "nvidia", "total": "8GiB", "used_by_others": "zero"})


@pytest.mark.parametrize("total,ctx", [("16GiB", 4096), ("24GiB", 32768), ("48GiB", 131072)])
def test_a_request_without_num_ctx_gets_the_vram_tier(total, ctx):
    state = SimState(scenario(total=total))
    runner, _ = state.schedule("neohorse-1:q4_K_M", {}, None)
    assert runner.num_ctx == ctx and runner.auto_ctx  # 48 GiB: 256k clamped to the trained 131072
    d = digest(state)
    assert d.cmdline["engine"] == "llama-server" and d.cmdline["num_ctx"] == ctx
    assert d.default_ctx["default_num_ctx"] == {"16GiB": 4096, "24GiB": 32768, "48GiB": 262144}[total]
    if total == "48GiB":
        assert d.ctx_clamped == {"num_ctx": 262144, "n_ctx_train": 131072}


def test_the_legacy_version_keeps_4096_and_the_runner():
    state = SimState(scenario(version="0.11.4", server={"context_length": 4096}))
    runner, _ = state.schedule("neohorse-1:q4_K_M", {}, None)
    assert runner.num_ctx == 4096 and not runner.measured
    assert digest(state).cmdline is None  # the legacy sim logs its own runner line, not a llama-server start


def test_ps_shows_measured_buffers_on_current_and_the_estimate_on_legacy():
    current = SimServer(scenario())
    runner, _ = current.state.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    handler = type("H", (), {"sim": current})
    from oomsim.server import _Handler
    row = _Handler._ps(handler(), runner)
    assert row["size"] == runner.resident_gpu_bytes + runner.resident_cpu_bytes
    assert row["size_vram"] == current.state.used_bytes()  # what the device holds is what ps says
    logged = digest(current.state).buffer_total()
    assert abs(logged - row["size"]) < 2 * MiB
    legacy = SimServer(scenario(version="0.11.4", server={"context_length": 4096}))
    runner, _ = legacy.state.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    assert _Handler._ps(type("H", (), {"sim": legacy})(), runner)["size"] == runner.placement.size_bytes


def test_quantized_kv_without_flash_attention_fails_the_load_as_a_config_error():
    state = SimState(scenario(server={"kv_cache_type": "q8_0", "flash_attention": False}))
    with pytest.raises(SimError) as err:
        state.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)
    failure = classify(err.value.text)
    assert failure.kind == "config" and not failure.oom
    assert digest(state).kv_needs_fa


def test_quantized_kv_with_flash_attention_auto_is_used():
    state = SimState(scenario(server={"kv_cache_type": "q8_0"}))
    runner, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)
    assert runner.kv_type == "q8_0" and digest(state).cmdline["cache_type_k"] == "q8_0"


def test_an_automatic_context_that_does_not_fit_host_memory_is_backed_off_once():
    # 48 GiB card -> 131072 tokens: 31 GiB of weights and 16 GiB of KV cache do not fit it, fit moves
    # layers to the CPU, and host RAM is short; at 32768 (4 GiB of KV) everything fits the card
    state = SimState(scenario(total="48GiB", host={"total": "5GiB", "used": "4GiB"}))
    runner, _ = state.schedule("big:latest", {}, None)
    d = digest(state)
    assert d.auto_backoff == {"old_num_ctx": 131072, "new_num_ctx": 32768}
    assert runner.num_ctx == 32768 and d.cmdline["num_ctx"] == 32768
    assert any("failed to allocate buffer of size" in line for line in d.oom_lines)


def test_an_explicit_context_is_not_backed_off():
    state = SimState(scenario(total="48GiB", host={"total": "5GiB", "used": "4GiB"}))
    with pytest.raises(SimError) as err:
        state.schedule("big:latest", {"num_ctx": 131072}, None)
    assert classify(err.value.text).kind == "startup_oom" and digest(state).auto_backoff is None


def test_a_runtime_oom_expires_every_loaded_model_on_current():
    state = SimState(scenario(total="12GiB", faults={"peak_extra": "8GiB"}))
    state.schedule("other:latest", {"num_ctx": 2048}, None)
    runner, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 2048}, None)
    assert len(state.loaded()) == 2
    mark = len(state.log)
    with pytest.raises(SimError) as err:
        state.begin(runner, "hello", {})
    assert classify(err.value.text).kind == "runtime_oom"
    assert digest(state, mark).runtime_oom
    assert state.loaded() == []


def test_the_legacy_runtime_oom_leaves_other_models_and_logs_the_cuda_line():
    state = SimState(scenario(version="0.11.4", total="12GiB", server={"context_length": 4096},
                              faults={"peak_extra": "8GiB"}))
    state.schedule("other:latest", {"num_ctx": 2048}, None)
    runner, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 2048}, None)
    assert len(state.loaded()) == 2
    with pytest.raises(SimError) as err:
        state.begin(runner, "hello", {})
    assert classify(err.value.text).kind == "runtime_oom"
    assert [r.model.tag for r in state.loaded()] == ["other:latest"]
    # a request still streaming from the dead runner gets the captured error, not the generic text
    assert state.died_error(runner) == err.value.text != CRASH


def test_the_shipped_vram_tier_scenario_spills_at_its_default_and_fits_at_8192():
    from pathlib import Path

    from oomsim.scenario import load_scenario

    scn = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "vram_tier.yaml").with_timing(0, 0)
    state = SimState(scn)
    runner, _ = state.schedule("neohorse-1:q8_0", {}, None)
    assert (runner.num_ctx, runner.placement.where) == (32768, "partial")
    runner, _ = state.schedule("neohorse-1:q8_0", {"num_ctx": 8192}, None)
    assert runner.placement.where == "gpu"


def test_requests_with_the_options_of_the_load_reuse_its_runner_after_the_automatic_batch():
    # above 4096 the current engine raises an unset batch to 1024; a request that
    # again sets none (512) is the same request, not "options changed, reloading"
    state = SimState(scenario())
    first, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 16384}, None)
    again, _ = state.schedule("neohorse-1:q4_K_M", {"num_ctx": 16384, "num_batch": 512}, None)
    assert first.num_batch == 1024 and again is first
    assert not any("options changed" in line for line in state.log)
