"""The simulator on machines with several cards and MIG slices: where Ollama
puts a model's layers (checked against the arithmetic of Ollama's own
EstimateGPULayers, done here by hand), what NVML and the ``*-smi`` tools read
per card, and the scheduler's evictions (a second model that does not fit,
``OLLAMA_MAX_LOADED_MODELS``)."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

import oomsim as sim
from oomsim.devices import SimNvml
from oomsim.nvml_errors import NVMLError
from oomsim.scenario import ScenarioError, load_scenario, scenario_from_dict
from oomsim.smi import SmiRunner
from oomsim.state import SimState

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
MiB, GiB = 1 << 20, 1 << 30
NEOHORSE = {"arch": "llama", "block_count": 32, "head_count": 32, "head_count_kv": 8, "embedding_length": 4096,
            "context_length": 32768, "vocab_size": 128256, "weights": "4.58GiB", "quantization": "Q4_K_M"}


def state_of(name: str, env: dict | None = None) -> SimState:
    state = SimState(load_scenario(SCENARIOS / f"{name}.yaml").with_timing(0, 0))
    if env:
        state.restart(env)
    return state


def nvml_of(state: SimState) -> SimNvml:
    nvml = SimNvml(state)
    nvml.nvmlInit()
    return nvml


def post(h, path: str, body: dict):
    req = urllib.request.Request(h.host + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def ps(h) -> list[dict]:
    with urllib.request.urlopen(h.host + "/api/ps", timeout=30) as resp:
        return json.loads(resp.read())["models"]


# -- placement on two cards --------------------------------------------------------------

def test_a_model_too_big_for_either_card_is_split_24_and_12_as_estimate_gpu_layers_splits_it():
    """neohorse-32b:q6_K (25 GiB, 64 blocks, E 5120, 40 heads, 8 KV heads, vocab
    152064) at num_ctx 4096 on 24 GiB + 12 GiB, worked out from Ollama's
    algorithm: the 4090 (most free) is tried alone and cannot hold 25 GiB;
    over both, layer i goes to gpusWithSpace[i % 2], so the odd layers go to
    the 3060 until it is full, then it leaves the list and the rest (and the
    output layer) go to the 4090."""
    state = state_of("two_cards")
    runner, _ = state.schedule("neohorse-32b:q6_K", {"num_ctx": 4096}, None)

    E, H, Hkv, V, n_blocks, C, B = 5120, 40, 8, 152064, 64, 4096, 512
    weights = 25 * GiB
    kv_layer = C * (128 + 128) * Hkv * 2                             # 16 MiB of f16 K and V per layer
    assert kv_layer == 16 * MiB
    out = weights * (V * E) // (V * E + n_blocks * 12 * E * E)       # output.weight's share of the file
    block = (weights - out) // n_blocks
    L = block + kv_layer
    layer0 = L                                                       # the spare layer each card keeps
    partial = 4 * B * E + max(4 * B * (1 + E + max(C, E)) + E * E * 9 // 16 + 4 * C * (B * H + (E // H) * Hkv),
                              4 * B * (E + V) + E * V * 105 // 128)  # llama's partial graph
    minimum = 457 * MiB
    free0, free1 = 24 * GiB, 12 * GiB
    # a layer goes on a card while free > minimum + spare + placed + graph + layer
    n1 = (free1 - 1 - minimum - layer0 - partial) // L
    assert 0 < n1 < n_blocks // 2                                    # the 3060 fills before the odd layers run out
    n0 = n_blocks - n1
    assert minimum + layer0 + n0 * L + out + partial < free0         # the 4090 takes the rest and the output
    assert runner.split.devices == (0, 1)
    assert runner.split.layers == (n0 + 1, n1)
    assert runner.placement.where == "gpu" and runner.placement.layers_gpu == n_blocks + 1
    alloc0 = minimum + layer0 + n0 * L + out + partial
    alloc1 = minimum + layer0 + n1 * L + partial
    assert abs(runner.split.alloc[0] - alloc0) < 64 and abs(runner.split.alloc[1] - alloc1) < 64
    assert abs(runner.placement.size_vram_bytes - (alloc0 + alloc1)) < 128  # /api/ps: the sum over the cards
    assert any(f"layers.split={n0 + 1},{n1}" in line for line in state.log)
    assert any(f"--tensor-split {n0 + 1},{n1}" in line for line in state.log)


def test_a_model_that_fits_one_card_stays_on_it_unless_sched_spread():
    alone = state_of("two_cards")
    runner, _ = alone.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)
    assert runner.split.devices == (0,) and runner.device_bytes().keys() == {0}
    assert alone.used_bytes(index=1) == 0
    assert any("new model will fit in available VRAM in single GPU" in line for line in alone.log)

    spread = state_of("two_cards", {"OLLAMA_SCHED_SPREAD": "1"})
    runner, _ = spread.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)
    assert runner.split.devices == (0, 1) and all(n > 0 for n in runner.split.layers)
    assert spread.used_bytes(index=0) > 0 and spread.used_bytes(index=1) > 0


def test_layers_that_fit_on_neither_card_go_to_the_cpu():
    state = state_of("two_cards")
    runner, _ = state.schedule("neohorse-32b:q6_K", {"num_ctx": 32768}, None)
    p = runner.placement
    assert p.where == "partial" and p.size_vram_bytes < p.size_bytes
    assert sum(runner.split.layers) == p.layers_gpu < p.layers_total
    assert runner.resident_cpu_bytes > 0


def test_the_current_engine_picks_one_card_at_80_percent_else_spreads_with_a_buffer_line_per_card():
    data = {"devices": [{"name": "NVIDIA GeForce RTX 4090", "vendor": "nvidia", "total": "24GiB"},
                        {"name": "NVIDIA GeForce RTX 3060", "vendor": "nvidia", "total": "12GiB"}],
            "server": {"version": "0.34.4"},
            "models": {"small:q4_K_M": NEOHORSE,
                       "big:q6_K": dict(NEOHORSE, block_count=64, head_count=40, embedding_length=5120,
                                        vocab_size=152064, weights="25GiB", quantization="Q6_K")}}
    state = SimState(scenario_from_dict(data).with_timing(0, 0))
    small, _ = state.schedule("small:q4_K_M", {"num_ctx": 4096}, None)
    assert small.split.devices == (0,)
    assert any('msg="selecting single GPU for llama-server model"' in line for line in state.log)
    assert any("--split-mode none --main-gpu 0" in line for line in state.log)
    state.restart({})
    big, _ = state.schedule("big:q6_K", {"num_ctx": 4096}, None)
    assert big.split.devices == (0, 1) and all(big.split.layers)
    buffers = [line for line in state.log if "model buffer size" in line]
    assert any("CUDA0" in line for line in buffers) and any("CUDA1" in line for line in buffers)
    assert state.used_bytes(index=0) + state.used_bytes(index=1) == big.resident_gpu_bytes


# -- what the readers see --------------------------------------------------------------------

def test_per_card_nvml_readings_add_up_to_the_total_and_each_card_lists_its_own_processes():
    state = state_of("two_cards")
    runner, _ = state.schedule("neohorse-32b:q6_K", {"num_ctx": 8192}, None)
    nvml = nvml_of(state)
    assert nvml.nvmlDeviceGetCount() == 2
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    memory = [nvml.nvmlDeviceGetMemoryInfo(h) for h in handles]
    assert [m.total for m in memory] == [24 * GiB, 12 * GiB]
    assert all(m.used + m.free == m.total for m in memory)
    assert sum(m.used for m in memory) == runner.resident_gpu_bytes  # nobody else on these cards
    procs = [nvml.nvmlDeviceGetComputeRunningProcesses(h) for h in handles]
    assert [[p.pid for p in ps_] for ps_ in procs] == [[runner.pid], [runner.pid]]
    assert [ps_[0].usedGpuMemory for ps_ in procs] == [m.used for m in memory]
    assert [nvml.nvmlDeviceGetName(h) for h in handles] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3060"]
    assert len({nvml.nvmlDeviceGetUUID(h) for h in handles}) == 2
    with pytest.raises(NVMLError):
        nvml.nvmlDeviceGetMigMode(handles[0])       # a GeForce card has no MIG

    smi = SmiRunner(state)
    rows = smi(["nvidia-smi", "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"])
    assert rows.splitlines() == [f"0, {memory[0].used // MiB}, {24 * 1024}", f"1, {memory[1].used // MiB}, {12 * 1024}"]
    apps = smi(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"])
    assert [line.split(", ")[1] for line in apps.splitlines()] == [nvml.nvmlDeviceGetUUID(h) for h in handles]


def test_rocm_smi_reports_each_card():
    data = {"devices": [{"name": "Radeon RX 7900 XTX", "vendor": "amd", "total": "24GiB"},
                        {"name": "Radeon RX 7600", "vendor": "amd", "total": "8GiB", "used_by_others": "512MiB"}],
            "server": {}, "models": {"small:q4_K_M": NEOHORSE}}
    state = SimState(scenario_from_dict(data).with_timing(0, 0))
    state.schedule("small:q4_K_M", {"num_ctx": 4096}, None)
    out = json.loads(SmiRunner(state)(["rocm-smi", "--showmeminfo", "vram", "--json"]))
    assert sorted(out) == ["card0", "card1"]
    assert int(out["card1"]["VRAM Total Used Memory (B)"]) == 512 * MiB
    assert int(out["card0"]["VRAM Total Used Memory (B)"]) == state.used_bytes(index=0) > 0


def test_a_mig_slice_is_a_device_of_its_own_under_a_card_in_mig_mode():
    state = state_of("mig_slice")
    runner, _ = state.schedule("neohorse-32b:q8_0", {"num_ctx": 8192}, None)
    nvml = nvml_of(state)
    assert nvml.nvmlDeviceGetCount() == 1
    card = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetMigMode(card) == [1, 1]
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(card) == 7
    assert nvml.nvmlDeviceGetName(card) == "NVIDIA H100 80GB HBM3"
    assert nvml.nvmlDeviceGetMemoryInfo(card).total == 80 * GiB
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 0)
    assert nvml.nvmlDeviceIsMigDeviceHandle(mig) == 1
    assert nvml.nvmlDeviceGetUUID(mig).startswith("MIG-")
    memory = nvml.nvmlDeviceGetMemoryInfo(mig)
    assert memory.total == 40 * GiB and memory.used == runner.resident_gpu_bytes
    [proc] = nvml.nvmlDeviceGetComputeRunningProcesses(mig)
    assert (proc.pid, proc.gpuInstanceId) == (runner.pid, 2)
    with pytest.raises(NVMLError) as err:
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 1)   # no second instance
    assert isinstance(err.value, SimNvml.NVMLError_NotFound)
    assert "MIG 3g.40gb" in SmiRunner(state)(["nvidia-smi", "-L"])
    # the limit is the slice, not the card: 32768 spills although the card has 80 GiB
    big, _ = state.schedule("neohorse-32b:q8_0", {"num_ctx": 32768}, None)
    assert big.placement.where == "partial"


def test_scenario_files_refuse_mixed_or_impossible_devices():
    base = {"server": {}, "models": {"small:q4_K_M": NEOHORSE}}
    with pytest.raises(ScenarioError, match="not both"):
        scenario_from_dict(dict(base, device={"name": "a", "vendor": "nvidia", "total": "8GiB"},
                                devices=[{"name": "a", "vendor": "nvidia", "total": "8GiB"}]))
    with pytest.raises(ScenarioError, match="one vendor"):
        scenario_from_dict(dict(base, devices=[{"name": "a", "vendor": "nvidia", "total": "8GiB"},
                                               {"name": "b", "vendor": "amd", "total": "8GiB"}]))
    with pytest.raises(ScenarioError, match=r"devices\[0\]\.mig: MIG slices exist on nvidia cards only"):
        scenario_from_dict(dict(base, devices=[{"name": "a", "vendor": "amd", "total": "8GiB",
                                                "mig": {"parent": "x", "parent_total": "80GiB",
                                                        "profile": "1g.10gb"}}]))
    one = scenario_from_dict(dict(base, device={"name": "a", "vendor": "nvidia", "total": "8GiB"}))
    assert one.devices == (one.device,)


# -- evictions -------------------------------------------------------------------------------

def test_an_embedder_that_does_not_fit_beside_the_idle_chat_model_evicts_it_in_api_ps():
    scn = load_scenario(SCENARIOS / "embedder_evicts.yaml").with_timing(0, 0)
    with sim.start(scn) as h:
        assert post(h, "/api/generate", {"model": "neohorse-1:q4_K_M"})["done_reason"] == "load"
        assert [m["name"] for m in ps(h)] == ["neohorse-1:q4_K_M"]
        out = post(h, "/api/embed", {"model": "neoembed-m3:f16", "input": ["where is the pump manual?"]})
        assert len(out["embeddings"][0]) == 1024
        assert [m["name"] for m in ps(h)] == ["neoembed-m3:f16"]   # the chat model is gone
        log = h.log()
        assert any('msg="resetting model to expire immediately to make room" runner.name=neohorse-1:q4_K_M' in line
                   for line in log)
        assert any('model=neohorse-1:q4_K_M' in line and 'reason="evicted to make room"' in line for line in log)
        # and the next chat request evicts the embedder in turn
        post(h, "/api/generate", {"model": "neohorse-1:q4_K_M"})
        assert [m["name"] for m in ps(h)] == ["neohorse-1:q4_K_M"]


def test_models_that_fit_together_stay_loaded_until_max_loaded_models_is_one():
    data = {"device": {"name": "NVIDIA GeForce RTX 4090", "vendor": "nvidia", "total": "24GiB"},
            "server": {}, "models": {"one:q4_K_M": NEOHORSE, "two:q4_K_M": NEOHORSE}}
    state = SimState(scenario_from_dict(data).with_timing(0, 0))
    state.schedule("one:q4_K_M", {}, None)
    state.schedule("two:q4_K_M", {}, None)
    assert sorted(r.model.tag for r in state.loaded()) == ["one:q4_K_M", "two:q4_K_M"]

    state.restart({"OLLAMA_MAX_LOADED_MODELS": "1"})
    state.schedule("one:q4_K_M", {}, None)
    state.schedule("two:q4_K_M", {}, None)
    assert [r.model.tag for r in state.loaded()] == ["two:q4_K_M"]
    assert any('msg="max runners achieved, unloading one to make room" runner_count=1' in line for line in state.log)


def test_a_spread_model_loads_beside_a_small_one_when_both_fit_and_evicts_it_when_not():
    state = state_of("two_cards")
    state.schedule("neohorse-1:q4_K_M", {"num_ctx": 4096}, None)     # 5.96 GiB on the 4090
    big, _ = state.schedule("neohorse-32b:q6_K", {"num_ctx": 4096}, None)
    assert sorted(r.model.tag for r in state.loaded()) == ["neohorse-1:q4_K_M", "neohorse-32b:q6_K"]
    assert big.placement.where == "gpu"
    # at 8192 the 4090's share no longer fits beside the small model: it goes, the big one stays on GPU
    big, _ = state.schedule("neohorse-32b:q6_K", {"num_ctx": 8192}, None)
    assert [r.model.tag for r in state.loaded()] == ["neohorse-32b:q6_K"]
    assert big.placement.where == "gpu"
    assert any("runner.name=neohorse-1:q4_K_M runner.inference=cuda" in line for line in state.log)
