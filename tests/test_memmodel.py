"""The memory model against the worked numbers in shared/ollama-notes.md and
the rules of Ollama v0.11.4's estimate it follows."""
from __future__ import annotations

import pytest

from probes import memmodel as mm
from probes.memmodel import Arch

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

SMOLLM2 = Arch("llama", block_count=30, head_count=9, head_count_kv=3, embedding_length=576,
               context_length=8192, vocab_size=49152)
LLAMA31_8B = Arch("llama", block_count=32, head_count=32, head_count_kv=8, embedding_length=4096,
                  context_length=131072, vocab_size=128256)


def test_smollm2_kv_is_22_5_kib_per_token_and_180_mib_at_8192():
    assert mm.kv_bytes_per_token(SMOLLM2) == 22.5 * KiB
    assert mm.kv_cache_bytes(SMOLLM2, 8192) == 180 * MiB


def test_llama31_8b_kv_is_128_kib_per_token_and_512_mib_at_4096():
    assert mm.kv_bytes_per_token(LLAMA31_8B) == 128 * KiB
    assert mm.kv_cache_bytes(LLAMA31_8B, 4096) == 512 * MiB


def test_quantized_kv_uses_real_ggml_block_sizes():
    f16 = mm.kv_bytes_per_token(LLAMA31_8B, "f16")
    assert mm.kv_bytes_per_token(LLAMA31_8B, "q8_0") == f16 * 1.0625 / 2
    assert mm.kv_bytes_per_token(LLAMA31_8B, "q4_0") == f16 * 0.5625 / 2
    with pytest.raises(ValueError, match="unknown KV cache type"):
        mm.kv_bytes_per_token(LLAMA31_8B, "q5_1")


def test_quantized_kv_cache_needs_flash_attention():
    assert mm.effective_kv_type("q8_0", flash_attention=False) == "f16"
    assert mm.effective_kv_type("q8_0", flash_attention=True) == "q8_0"
    assert mm.effective_kv_type("q4_0", flash_attention=True, fa_supported=False) == "f16"
    assert mm.effective_kv_type("f16", flash_attention=True) == "f16"


def test_parallel_slots_multiply_the_kv_cache():
    assert mm.kv_cache_bytes(LLAMA31_8B, 4096, num_parallel=4) == 4 * 512 * MiB


def test_num_ctx_above_the_training_context_is_clamped_per_slot():
    assert mm.clamp_ctx(SMOLLM2, 32768) == 8192
    assert mm.clamp_ctx(SMOLLM2, 1) == 4
    assert mm.kv_cache_bytes(SMOLLM2, 32768) == mm.kv_cache_bytes(SMOLLM2, 8192)
    assert mm.kv_cache_bytes(SMOLLM2, 32768, num_parallel=2) == 2 * 180 * MiB


def test_key_and_value_length_override_the_head_dimension():
    arch = Arch("qwen3", 28, 16, 8, 1024, 40960, key_length=128, value_length=128)
    assert mm.kv_bytes_per_token(arch) == 28 * 256 * 8 * 2


def test_llama_graph_follows_the_notes_formula():
    C, B, E, H, V, Hkv, Dh = 2048, 512, 576, 9, 49152, 3, 64
    full = max(4 * B * (1 + 4 * E + C * (1 + H)), 4 * B * (E + V))
    partial = 4 * B * E + max(4 * B * (1 + E + max(C, E)) + E * E * 9 // 16 + 4 * C * (B * H + Dh * Hkv),
                              4 * B * (E + V) + E * V * 105 // 128)
    assert mm.graph_bytes(SMOLLM2, 2048) == (full, partial)


def test_graph_batch_is_capped_by_the_context():
    # B = min(C, num_batch): a 256-token context uses a 256-token batch
    assert mm.graph_bytes(SMOLLM2, 256, num_batch=512) == mm.graph_bytes(SMOLLM2, 256, num_batch=256)


def test_unlisted_architecture_graph_is_gqa_times_kv_over_six():
    arch = Arch("qwen3", 28, 16, 8, 1024, 40960)
    kv = mm.kv_cache_bytes(arch, 4096)
    assert mm.graph_bytes(arch, 4096) == ((16 // 8) * kv // 6, (16 // 8) * kv // 6)


def test_gemma3_sliding_layers_hold_only_the_window():
    arch = Arch("gemma3", 6, 8, 4, 2560, 131072, key_length=256, value_length=256, sliding_window=1024)
    per_cell = (256 + 256) * 4 * 2
    # 5 sliding layers of (window + batch) cells, 1 global layer of num_ctx cells
    assert mm.kv_cache_bytes(arch, 8192) == 5 * (1024 + 512) * per_cell + 8192 * per_cell


def test_arch_from_model_info_reads_scalars_lists_and_vocab():
    info = {
        "general.architecture": "llama",
        "llama.block_count": 30, "llama.context_length": 8192, "llama.embedding_length": 576,
        "llama.attention.head_count": 9, "llama.attention.head_count_kv": [3, 3, 1],
        "tokenizer.ggml.tokens": ["a"] * 49152,
    }
    arch = Arch.from_model_info(info)
    assert arch == SMOLLM2
    info["tokenizer.ggml.tokens"] = None  # long arrays come back null without verbose
    assert Arch.from_model_info(info).vocab_size is None


def test_arch_from_model_info_names_the_missing_key():
    with pytest.raises(mm.ModelInfoError, match="llama.block_count"):
        Arch.from_model_info({"general.architecture": "llama", "llama.embedding_length": 576,
                              "llama.attention.head_count": 9})
    with pytest.raises(mm.ModelInfoError, match="general.architecture"):
        Arch.from_model_info({})


def test_head_count_kv_defaults_to_head_count_without_gqa():
    arch = Arch.from_model_info({"general.architecture": "phi2", "phi2.block_count": 32,
                                 "phi2.embedding_length": 2560, "phi2.attention.head_count": 32})
    assert arch.head_count_kv == 32


def test_bits_per_weight_orders_ollama_levels():
    order = ["F32", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_1", "Q4_K_M", "Q4_0", "Q3_K_M", "Q2_K"]
    bits = [mm.bits_per_weight(level) for level in order]
    assert bits == sorted(bits, reverse=True)
    assert mm.bits_per_weight("q4_k_m") == mm.bits_per_weight("Q4_K_M") == pytest.approx(4.85)
    assert mm.bits_per_weight("Q8_0") == 8.5
    assert mm.bits_per_weight("BF16") == 16
    assert mm.bits_per_weight("Q5_K_M") == pytest.approx(5.5, abs=0.2)
    assert mm.bits_per_weight("Q2_K") == pytest.approx(2.6, abs=0.1)


def test_unknown_quantization_level_raises():
    with pytest.raises(ValueError, match="unknown quantization level"):
        mm.bits_per_weight("Q9_Z")


def test_level_from_tag_is_a_hint_from_the_name():
    assert mm.level_from_tag("llama3:8b-instruct-q4_K_M") == "Q4_K_M"
    assert mm.level_from_tag("neohorse-1:f16") == "F16"
    assert mm.level_from_tag("neohorse-1:latest") is None


def test_place_small_model_fits_entirely():
    p = mm.place(SMOLLM2, 270 * MiB, 2048, 1, 512, "f16", gpu_free_bytes=4 * GiB)
    assert p.full_gpu and p.where == "gpu"
    assert p.layers_total == 31 and p.layers_gpu == 31
    assert p.size_bytes == p.size_vram_bytes
    # minimum + buffer layer + weights + KV + full graph
    full, _ = mm.graph_bytes(SMOLLM2, 2048)
    assert p.size_vram_bytes == mm.MIN_GPU_BYTES_CUDA + p.buffer_bytes + 270 * MiB + p.kv_bytes + full


def test_place_spills_layers_to_cpu_when_short():
    free = 8 * GiB - 600 * MiB
    p = mm.place(LLAMA31_8B, int(14.9 * GiB), 4096, 1, 512, "f16", gpu_free_bytes=free)
    assert p.where == "partial"
    assert 0 < p.layers_gpu < p.layers_total
    assert p.size_vram_bytes < p.size_bytes
    assert p.size_vram_bytes <= free


def test_place_keeps_everything_on_cpu_when_not_even_two_layers_fit():
    p = mm.place(LLAMA31_8B, int(4.58 * GiB), 4096, 1, 512, "f16", gpu_free_bytes=600 * MiB)
    assert p.where == "cpu" and p.size_vram_bytes == 0
    assert p.size_bytes == int(4.58 * GiB) + p.kv_bytes


def test_forced_num_gpu_is_placed_even_when_it_does_not_fit():
    free = 8 * GiB - 600 * MiB
    p = mm.place(LLAMA31_8B, int(14.9 * GiB), 4096, 1, 512, "f16", gpu_free_bytes=free, num_gpu=99)
    assert p.full_gpu
    assert p.size_vram_bytes > free  # the runner will fail with a CUDA OOM


def test_num_gpu_zero_is_cpu_only_with_the_full_graph():
    p = mm.place(SMOLLM2, 270 * MiB, 2048, 1, 512, "f16", gpu_free_bytes=4 * GiB, num_gpu=0)
    full, _ = mm.graph_bytes(SMOLLM2, 2048)
    assert p.where == "cpu" and p.size_vram_bytes == 0
    assert p.size_bytes == p.buffer_bytes + 270 * MiB + p.kv_bytes + full


def test_gpu_overhead_counts_against_the_fit():
    free = 7 * GiB
    without = mm.place(LLAMA31_8B, int(4.58 * GiB), 8192, 1, 512, "f16", free)
    with_overhead = mm.place(LLAMA31_8B, int(4.58 * GiB), 8192, 1, 512, "f16", free, overhead_bytes=1 * GiB)
    assert without.full_gpu and not with_overhead.full_gpu


def test_longer_context_moves_layers_off_the_gpu():
    free = 8 * GiB - 600 * MiB
    layers = [mm.place(LLAMA31_8B, int(4.58 * GiB), ctx, 1, 512, "f16", free).layers_gpu
              for ctx in (8192, 16384, 32768)]
    assert layers[0] == 33 and layers[0] > layers[1] > layers[2]


def test_quantized_kv_cache_lets_a_longer_context_fit():
    free = 8 * GiB - 600 * MiB
    f16 = mm.place(LLAMA31_8B, int(4.58 * GiB), 12288, 1, 512, "f16", free)
    q8 = mm.place(LLAMA31_8B, int(4.58 * GiB), 12288, 1, 512, "q8_0", free)
    assert not f16.full_gpu and q8.full_gpu
    assert q8.kv_bytes == pytest.approx(f16.kv_bytes * 1.0625 / 2, rel=1e-6)


def test_unified_memory_uses_the_full_graph_for_a_partial_offload():
    free = 6 * GiB
    p = mm.place(LLAMA31_8B, int(7.95 * GiB), 8192, 1, 512, "f16", free, min_gpu_bytes=mm.MIN_GPU_BYTES_METAL,
                 unified=True)
    full, _ = mm.graph_bytes(LLAMA31_8B, 8192)
    assert p.where == "partial" and p.graph_bytes == full


def test_the_estimate_counts_at_least_2048_cells_but_the_runner_does_not():
    # measured on Ollama 0.11.4: /api/ps size is the same at num_ctx 1024 and 2048
    at_1024 = mm.place(SMOLLM2, 270 * MiB, 1024, 1, 512, "f16", 0, cpu_only=True)
    at_2048 = mm.place(SMOLLM2, 270 * MiB, 2048, 1, 512, "f16", 0, cpu_only=True)
    assert at_1024.size_bytes == at_2048.size_bytes
    real = mm.place(SMOLLM2, 270 * MiB, 1024, 1, 512, "f16", 0, cpu_only=True, estimate_min_ctx=0)
    assert real.kv_bytes == mm.kv_cache_bytes(SMOLLM2, 1024) < at_1024.kv_bytes
    # two slots of 1024 are 2048 cells: no floor left to apply
    assert mm.place(SMOLLM2, 270 * MiB, 1024, 2, 512, "f16", 0, cpu_only=True).kv_bytes == at_2048.kv_bytes


def test_cpu_estimate_matches_ollama_0_11_4_log_for_smollm2_at_8192():
    # rig log, neohorse-1:q4_1 at num_ctx 8192: memory.required.kv="180.0 MiB"
    # memory.graph.full="164.5 MiB" memory.graph.partial="168.4 MiB"
    full, partial = mm.graph_bytes(SMOLLM2, 8192)
    assert mm.kv_cache_bytes(SMOLLM2, 8192) == 180 * MiB
    assert round(full / MiB, 1) == 164.5 and round(partial / MiB, 1) == 168.4
