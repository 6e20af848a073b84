"""The memory ledger (who holds the memory, every source side by side) and
an eviction seen during a step, on the simulated GPU."""
from __future__ import annotations

import oomsim as sim
from assistant.report.ledger import ledger_rows
from oomsim.scenario import scenario_from_dict
from probes import baseline
from probes.base import ProbeEnv
from probes.memory.select import select_reader
from probes.ollama_api import Ollama
from probes.units import fmt_size
from tests.test_sim_http import LLAMA8B

GiB, MiB = 1 << 30, 1 << 20


def _scenario(version: str):
    return scenario_from_dict({
        "device": {"name": "NVIDIA GeForce RTX 4090", "vendor": "nvidia", "total": "24GiB", "used_by_others": "700MiB"},
        "server": {"version": version},
        "models": {"chat:q8_0": dict(LLAMA8B, weights="8GiB", quantization="Q8_0"),
                   "embed:f16": dict(LLAMA8B, block_count=12, weights="1GiB", quantization="F16"),
                   "big:f16": dict(LLAMA8B, weights="15GiB", quantization="F16")},
        "timing": {"load_s": 0, "request_s": 0},
    }, "ledger.yaml")


def _env(handle, limit=23 * GiB) -> ProbeEnv:
    reader = select_reader(nvml_lib=handle.nvml, smi_runner=handle.smi_runner).reader
    return ProbeEnv(api=Ollama(handle.host), reader=reader, control=handle.control, limit_bytes=limit)


def test_the_ledger_lists_every_loaded_model_and_leaves_what_no_source_names_unaccounted():
    with sim.start(_scenario("0.34.4")) as handle:
        env = _env(handle)
        env.api.load("embed:f16", {"num_ctx": 2048})
        result = baseline.run(env, "chat:q8_0", num_ctx=4096, settle_s=0.2)
        embed = next(m for m in env.api.ps() if m.name == "embed:f16")
    (held,) = [f for f in result.facts if f["kind"] == "ledger"]
    models = {m["name"]: m for m in held["models"]}
    assert models["chat:q8_0"]["this"] is True and models["embed:f16"]["this"] is False
    assert models["embed:f16"]["bytes"] == embed.size_vram_bytes  # left loaded: oomvet unloads only its own
    assert held["total"] == 24 * GiB and held["ollama_seen"] > 8 * GiB
    # the 700 MiB the desktop holds is no compute process NVML names: it is what stays unaccounted
    assert abs(held["unaccounted"] - 700 * MiB) < 16 * MiB, held["unaccounted"] / MiB
    en, zh = dict(ledger_rows(held, "en")), dict(ledger_rows(held, "zh"))
    assert "chat:q8_0, this model (ollama ps)" in en and "embed:f16, another model (ollama ps)" in en
    assert "chat:q8_0，本模型（ollama ps）" in zh and "无法归属（已用 - 其他 - ollama ps）" in zh
    # the embedder stays loaded; what it holds, and that unloading it is the user's call, is said
    from assistant.report.ledger import others_note

    size = fmt_size(embed.size_vram_bytes)
    assert f"hold {size}: embed:f16 ({size})" in others_note(held, "en")
    assert "would free" in others_note(held, "en", auto=True) and "stay loaded" in others_note(held, "en", auto=True)
    assert "不会卸载它们" in others_note(held, "zh")
    alone = dict(held, models=[m for m in held["models"] if m["this"]])
    assert others_note(alone, "en") is None


def test_a_model_evicted_during_a_step_is_said_and_its_peak_is_not_counted():
    # the legacy scheduler unloads an idle model to make room: the device reading
    # falls by its size in the middle of the step
    with sim.start(_scenario("0.11.4")) as handle:
        env = _env(handle)
        env.api.load("chat:q8_0", {"num_ctx": 2048})
        result = baseline.run(env, "big:f16", num_ctx=2048, settle_s=0.2)
        left = {m.name for m in env.api.ps()}
    load = result.facts[0]
    assert "chat:q8_0" in left  # loaded again afterwards: the server is left as it was found
    assert load["evicted"] == ["chat:q8_0"] and load["measured"] is False
    assert "Ollama unloaded chat:q8_0 during the step" in load["unmeasured"]
    assert load["peak"] is None  # never a low peak passed off as the model's


def test_a_step_with_nothing_evicted_carries_no_eviction():
    with sim.start(_scenario("0.34.4")) as handle:
        env = _env(handle)
        result = baseline.run(env, "chat:q8_0", num_ctx=2048, settle_s=0.2)
    assert "evicted" not in result.facts[0] and result.facts[0]["measured"] is True
