"""The real-size stand-ins: files that hold exactly the shapes and types they claim.

A small shape is written and read back with gguf's own reader (not the
writer's code); the published shapes are checked against the sizes their
Q4_K_M files have on the Hugging Face hub and ollama.com, rounded as those
pages show them.
"""
from __future__ import annotations

import gguf
import pytest

from oomrig import standins
from oomrig.paths import RigError

TINY = standins.Shape("shape-tiny", "llama", 4, 256, 4, 2, 512, 300, 2048, qkv_bias=False,
                      extra_kv={"rope.freq_base": 10000.0})
TINY_MOE = standins.Shape("shape-tiny-moe", "olmoe", 2, 256, 4, 4, 256, 300, 4096, qk_norm="full",
                          experts=8, experts_used=2)


@pytest.mark.parametrize("level", ["Q4_K_M", "Q8_0", "F16"])
def test_written_file_reads_back_with_its_shapes_and_a_hole_for_data(tmp_path, level):
    path = standins.write_gguf(TINY, level, tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(path)
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.block_count"].contents() == 4
    assert reader.fields["llama.attention.head_count_kv"].contents() == 2
    assert len(reader.fields["tokenizer.ggml.tokens"].contents()) == 300
    by_name = {t.name: t for t in reader.tensors}
    assert len(by_name) == 2 + 1 + 4 * 9
    assert tuple(int(x) for x in by_name["blk.0.attn_k.weight"].shape) == (256, 128)
    assert tuple(int(x) for x in by_name["token_embd.weight"].shape) == (256, 300)
    assert by_name["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    data = sum(int(t.n_bytes) for t in reader.tensors)
    assert data == standins.weights_bytes(TINY, level)
    assert path.stat().st_size >= data
    assert not (path.read_bytes()[-data:]).strip(b"\0")   # zero-valued


def test_q4_k_m_keeps_more_bits_where_llama_cpp_does(tmp_path):
    types = {n: standins.tensor_type(TINY, n, d, "Q4_K_M") for n, d in standins.tensors(TINY)}
    Q = gguf.GGMLQuantizationType
    assert types["output.weight"] == Q.Q6_K
    assert types["token_embd.weight"] == Q.Q4_K
    # 4 layers: no first eighth (4 // 8 == 0), the last eighth from layer 7*4//8 = 3, every third from 0: layer 2
    assert [types[f"blk.{i}.ffn_down.weight"] for i in range(4)] == [Q.Q4_K, Q.Q4_K, Q.Q6_K, Q.Q6_K]
    assert [types[f"blk.{i}.attn_v.weight"] for i in range(4)] == [Q.Q4_K, Q.Q4_K, Q.Q6_K, Q.Q6_K]
    assert types["blk.1.attn_q.weight"] == Q.Q4_K


def test_tied_output_makes_the_embedding_the_high_bit_tensor():
    gemma = standins.SHAPES["shape-gemma3-4b"]
    names = [n for n, _ in standins.tensors(gemma)]
    assert "output.weight" not in names
    dims = dict(standins.tensors(gemma))["token_embd.weight"]
    assert standins.tensor_type(gemma, "token_embd.weight", dims, "Q4_K_M") == gguf.GGMLQuantizationType.Q6_K


def test_moe_has_three_expert_tensors_per_layer_and_an_f32_router(tmp_path):
    path = standins.write_gguf(TINY_MOE, "Q8_0", tmp_path / "moe.gguf")
    reader = gguf.GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    assert tuple(int(x) for x in by_name["blk.1.ffn_down_exps.weight"].shape) == (256, 256, 8)
    assert by_name["blk.1.ffn_gate_inp.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert reader.fields["olmoe.expert_used_count"].contents() == 2


@pytest.mark.parametrize("name, published_gb", [
    ("shape-llama3.1-8b", 4.92),    # ollama.com llama3.1:8b-instruct-q4_K_M: 4.9 GB
    ("shape-qwen2.5-7b", 4.68),     # ollama.com qwen2.5:7b-instruct-q4_K_M: 4.7 GB
    ("shape-nemo-12b", 7.48),       # Mistral-Nemo-Instruct-2407 Q4_K_M GGUF: 7.48 GB
    ("shape-olmoe-1b-7b", 4.21),    # OLMoE-1B-7B-0924-Instruct Q4_K_M GGUF: 4.21 GB
    ("shape-qwen3-8b", 5.03),       # Qwen3-8B Q4_K_M GGUF: 5.03 GB
    ("shape-qwen3-30b-a3b", 18.6),  # Qwen3-30B-A3B Q4_K_M GGUF: 18.6 GB
])
def test_published_shapes_weigh_what_their_q4_k_m_files_do(name, published_gb):
    got = standins.weights_bytes(standins.SHAPES[name], "Q4_K_M") / 1e9
    assert abs(got - published_gb) / published_gb < 0.01


def test_unknown_level_is_refused(tmp_path):
    with pytest.raises(RigError, match="no stand-in level"):
        standins.write_gguf(TINY, "Q3_K_S", tmp_path / "x.gguf")
