"""The legacy runner's buffers (Ollama v0.11.4) on real shapes, and the peak
its process reaches on the rig's CPU.

``tests/data/runner_buffers_0.11.4.jsonl`` holds what v0.11.4's runner logged
("CPU KV buffer size", "CPU compute buffer size", ...) when it loaded the
real-size stand-ins (``bench/bench_arch.py``, one load per row). The formula
was derived from llama.cpp's graph and set on llama-server b11076's lines
(``test_memmodel_compute.py``); these rows never set a term. Gemma 3 runs on
Ollama's own Go engine there: no KV line, a graph of its own, so no
prediction is made for it on that engine.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes import memmodel as m
from probes import predict

ROWS = [json.loads(line) for line in
        (Path(__file__).parent / "data" / "runner_buffers_0.11.4.jsonl").read_text().splitlines() if line.strip()]
LLAMA_CPP = [r for r in ROWS if r["arch"]["arch"] not in m.OLLAMA_ENGINE_ARCHS]
MIB = 1 << 20


def _id(row):
    return f"{row['model']}-{row['ctx']}-x{row['parallel']}"


def _footprint(row) -> m.Footprint:
    return m.footprint(m.ENGINE_RUNNER, m.Arch(**row["arch"]), row["buffers"]["model"], row["ctx"], row["parallel"],
                       row["kv"], row["batch"], flash_attention=row["fa"] == "1")


@pytest.mark.parametrize("row", LLAMA_CPP, ids=_id)
def test_runner_buffers_within_half_a_percent_of_what_v0114_logged(row):
    f, logged = _footprint(row), row["buffers"]
    assert f.kv == logged["KV"]  # num_ctx x parallel cells in one cache, no 2048-cell floor
    # the compute buffer: never under what was logged, and over by at most 12 MiB (the current
    # engine's graph, which the formula follows, keeps one Q and two K/V-sized tensors more)
    assert 0 <= f.compute - logged["compute"] <= 12 * MIB, (f.compute / MIB, logged["compute"] / MIB)
    assert f.total == pytest.approx(sum(logged.values()), rel=0.005)


def test_the_rows_cover_four_llama_cpp_architectures_and_several_slots():
    assert {r["arch"]["arch"] for r in LLAMA_CPP} == {"llama", "qwen2", "olmoe"}
    assert {r["model"] for r in LLAMA_CPP} >= {"shape-llama3.1-8b", "shape-qwen2.5-7b", "shape-nemo-12b",
                                               "shape-olmoe-1b-7b"}
    assert {r["parallel"] for r in LLAMA_CPP} == {1, 4}


def test_several_slots_share_one_cache_so_the_scores_span_all_of_it():
    llama = m.Arch(**LLAMA_CPP[0]["arch"])
    one, four = (m.footprint(m.ENGINE_RUNNER, llama, 0, 4096, p, flash_attention=False) for p in (1, 4))
    assert four.compute == m.footprint(m.ENGINE_RUNNER, llama, 0, 16384, 1, flash_attention=False).compute
    assert four.transient == 4 * one.transient


def test_a_small_model_reserves_logits_for_a_whole_batch_that_a_request_does_not_touch():
    # SmolLM2-135M's shape: 49152 tokens of vocabulary outweigh its attention at 2048
    smol = m.Arch("llama", 30, 9, 3, 576, 8192, 49152, feed_forward_length=1536)
    f = m.footprint(m.ENGINE_RUNNER, smol, 0, 2048, 1, flash_attention=False)
    assert f.compute == 4 * 512 * (576 + 49152)           # v0.11.4 logged 98.25 MiB for the rig's F16 tag
    assert f.touched < f.compute and f.peak == f.total - f.compute + f.touched + f.transient + f.overhead


@pytest.mark.parametrize("arch", ["gemma3", "gptoss", "mistral3"])
def test_architectures_v0114_runs_on_its_own_engine_get_no_prediction_there(arch):
    shape = predict.ModelShape("x", m.Arch(arch, 26, 8, 4, 2560, 131072, 262144), 1 << 30, "tensors", "Q4_K_M")
    assert predict.no_prediction(shape, m.ENGINE_RUNNER) == arch
    assert arch != "gemma3" or predict.no_prediction(shape, m.ENGINE_LLAMA_SERVER) is None


def test_a_quantized_cache_without_flash_attention_is_f16_on_the_runner():
    llama = m.Arch(**LLAMA_CPP[0]["arch"])
    f = m.footprint(m.ENGINE_RUNNER, llama, 0, 4096, kv_type="q8_0", flash_attention=False)
    assert f.kv_type == "f16" and f.kv == m.footprint(m.ENGINE_RUNNER, llama, 0, 4096).kv


# v0.11.4 on the rig's CPU: the F16 tag (SmolLM2-135M's shape, "CPU model buffer size =
# 256.63 MiB"), each context loaded and filled to 97 % by a prompt, host RSS of the runner
# process at its peak (bench/bench_predict.py --fill 0.97, 2026-12-06, bench/README.md)
SMOL = m.Arch("llama", 30, 9, 3, 576, 8192, 49152, feed_forward_length=1536)
F16_PEAKS_MIB = {2048: 430.77, 4096: 531.06, 6144: 633.08, 8192: 735.14}


@pytest.mark.parametrize("ctx", sorted(F16_PEAKS_MIB))
def test_the_predicted_peak_is_within_one_percent_of_the_filled_runner(ctx):
    f = m.footprint(m.ENGINE_RUNNER, SMOL, int(256.63 * MIB), ctx, 1, flash_attention=False)
    measured = F16_PEAKS_MIB[ctx] * MIB
    assert abs(f.peak - measured) / measured <= 0.01, (f.peak / MIB, F16_PEAKS_MIB[ctx])
    # Ollama's own estimate, which the model used to follow, was 5-17 % low on the same loads
    assert f.total < f.peak


def test_the_largest_context_under_640_mib_is_the_one_measured_to_fit():
    # issue 31: the old model said 7936 for a 640 MiB limit; 6144 peaked at 633 MiB, 8192 at 735 MiB
    f16 = lambda c: m.footprint(m.ENGINE_RUNNER, SMOL, int(256.63 * MIB), c, 1, flash_attention=False).peak
    assert m.largest_fitting_ctx(f16, 640 * MIB, 256, 8192) == 6144


def test_the_runner_runs_the_cpu_without_flash_attention_whatever_the_setting_says():
    on = {"OLLAMA_FLASH_ATTENTION": "1"}
    assert predict.flash_attention(m.ENGINE_RUNNER, on, on_gpu=True) is True
    assert predict.flash_attention(m.ENGINE_RUNNER, on, on_gpu=False) is False
    assert predict.flash_attention(m.ENGINE_LLAMA_SERVER, on, on_gpu=False) is True   # auto: the CPU has it
    assert predict.flash_attention(m.ENGINE_RUNNER, None) is None                      # not read: unknown
