"""The current engine's compute buffer and sliding-window layers on real shapes.

``tests/data/llama_buffers_b11076.jsonl`` holds what llama-server b11076 (the
one Ollama v0.34.4 runs) logged when it loaded the real-size stand-ins
(``bench/llama_buffers.py``, one load per row: "CPU compute buffer size =
X MiB"). The formula's terms were derived from llama.cpp's graph and the
llama, qwen2, gemma3 and olmoe rows; the Mistral Nemo and Qwen3 8B rows
(``"held_out": true``) were measured after and never used to set a term:
they check it. Nemo with a quantized cache (``"gap": true``) is a known miss;
the Qwen3 MoE rows (``"unchecked": true``) miss by 30-44%, which is why that
architecture is not in the measured set and gets no prediction.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes import memmodel as m

ROWS = [json.loads(line) for line in
        (Path(__file__).parent / "data" / "llama_buffers_b11076.jsonl").read_text().splitlines() if line.strip()]
MIB = 1 << 20


def _id(row):
    return f"{row['model']}-{row['ctx']}-fa_{row['fa']}-{row['kv']}"


def _error(row) -> float:
    arch = m.Arch(**row["arch"])
    predicted = m.llama_server_compute_bytes(arch, row["ctx"], row["ub"], row["parallel"], row["fa"] == "on",
                                             row["kv"])
    measured = row["buffers"]["compute"]
    return (predicted - measured) / measured


@pytest.mark.parametrize("row", [r for r in ROWS if not (r.get("held_out") or r.get("unchecked"))], ids=_id)
def test_compute_buffer_within_one_percent_of_what_llama_server_logged(row):
    assert abs(_error(row)) < 0.01


@pytest.mark.parametrize("row", [r for r in ROWS if r.get("held_out") and not r.get("gap")], ids=_id)
def test_held_out_models_within_two_percent(row):
    assert abs(_error(row)) < 0.02


def test_an_architecture_the_formula_misses_is_not_in_the_measured_set():
    unchecked = [r for r in ROWS if r.get("unchecked")]
    assert unchecked and max(abs(_error(r)) for r in unchecked) > 0.2   # flash attention on: 30-44% low
    assert not any(m.compute_checked(m.Arch(**r["arch"])) for r in unchecked)


@pytest.mark.xfail(strict=True, reason="held out: Mistral Nemo with a q8_0 cache is 11-12% over the formula "
                   "(its Q is narrower than its embedding; what the quantized path keeps alive then is not "
                   "modelled yet)")
@pytest.mark.parametrize("row", [r for r in ROWS if r.get("gap")], ids=_id)
def test_held_out_model_with_a_quantized_cache(row):
    assert abs(_error(row)) < 0.02


def test_the_rows_cover_every_shape_both_attention_paths_and_a_held_out_model():
    assert {r["model"] for r in ROWS} >= {"shape-llama3.1-8b", "shape-qwen2.5-7b", "shape-gemma3-4b",
                                          "shape-olmoe-1b-7b", "shape-nemo-12b", "shape-qwen3-8b"}
    assert {r["fa"] for r in ROWS} == {"on", "off"}
    assert any(r.get("held_out") for r in ROWS)


def test_without_flash_attention_the_scores_of_every_head_dominate_at_long_context():
    llama = m.Arch("llama", 32, 32, 8, 4096, 131072, 128256, feed_forward_length=14336)
    on = m.llama_server_compute_bytes(llama, 32768, 1024, 1, True)
    off = m.llama_server_compute_bytes(llama, 32768, 1024, 1, False)
    assert off > 14 * on                                # gigabytes the old formula did not know about
    assert off >= 4 * 32768 * 1024 * 32                 # cells x ub x heads, f32


def test_footprint_passes_flash_attention_through():
    llama = m.Arch("llama", 32, 32, 8, 4096, 131072, 128256, feed_forward_length=14336)
    off = m.footprint(m.ENGINE_LLAMA_SERVER, llama, 0, 16384, flash_attention=False)
    on = m.footprint(m.ENGINE_LLAMA_SERVER, llama, 0, 16384)
    assert off.compute > on.compute and off.kv == on.kv


def test_only_measured_architectures_are_checked():
    assert m.compute_checked(m.Arch("qwen2", 28, 28, 4, 3584, 32768))
    assert not m.compute_checked(m.Arch("deepseek2", 27, 16, 16, 2048, 163840))


@pytest.mark.parametrize("info, swa", [
    # the GGUF's own per-layer pattern wins
    ({"x.attention.sliding_window": 512, "x.attention.sliding_window_pattern": [True, False, True, False]},
     [True, False, True, False]),
    # an int period: the last layer of each period is global
    ({"x.attention.sliding_window": 512, "x.attention.sliding_window_pattern": 2}, [True, False, True, False]),
    # a window but no pattern, on an architecture llama.cpp gives none: every layer global
    ({"x.attention.sliding_window": 512}, [False] * 4),
    # no window: nothing slides, whatever the pattern
    ({"x.attention.sliding_window_pattern": 2}, [False] * 4),
])
def test_sliding_window_layers_come_from_the_metadata(info, swa):
    base = {"general.architecture": "x", "x.block_count": 4, "x.attention.head_count": 4,
            "x.embedding_length": 256}
    arch = m.Arch.from_model_info({**base, **info})
    assert [arch.swa_layer(i) for i in range(4)] == swa


def test_gemma3_without_a_pattern_uses_llama_cpps_period_of_six():
    info = {"general.architecture": "gemma3", "gemma3.block_count": 12, "gemma3.attention.head_count": 4,
            "gemma3.embedding_length": 640, "gemma3.attention.sliding_window": 512}
    arch = m.Arch.from_model_info(info)
    assert [i for i in range(12) if not arch.swa_layer(i)] == [5, 11]


def test_moe_width_is_the_experts_a_token_uses():
    olmoe = m.Arch.from_model_info({"general.architecture": "olmoe", "olmoe.block_count": 16,
                                    "olmoe.attention.head_count": 16, "olmoe.embedding_length": 2048,
                                    "olmoe.feed_forward_length": 1024, "olmoe.expert_count": 64,
                                    "olmoe.expert_used_count": 8})
    assert m.llama_server.ffn_width(olmoe) == 8 * 1024
