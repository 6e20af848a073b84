"""What the simulated server shows about a model: ``/api/tags`` details,
``/api/show`` model_info and tensors (the GGUF keys a memory model reads),
and the embedding vectors ``/api/embed`` answers with — all derived from the
scenario's model entry, the same every time."""
from __future__ import annotations

import hashlib
import math
from typing import Any

from oomsim.scenario import ModelSpec

_FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
              "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
              "Q5_K_M": 17, "Q6_K": 18, "IQ2_XXS": 19, "IQ2_XS": 20, "Q2_K_S": 21, "IQ3_XS": 22,
              "IQ3_XXS": 23, "IQ1_S": 24, "IQ4_NL": 25, "IQ3_S": 26, "IQ3_M": 27, "IQ2_S": 28,
              "IQ2_M": 29, "IQ4_XS": 30, "IQ1_M": 31, "BF16": 32, "TQ1_0": 36, "TQ2_0": 37, "MXFP4": 38}
MODIFIED_AT = "2025-08-06T10:00:00.000000000Z"


def digest(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()


def details(model: ModelSpec) -> dict:
    return {"parent_model": "", "format": "gguf", "family": model.family, "families": [model.family],
            "parameter_size": model.parameter_size, "quantization_level": model.quantization}


def model_info(model: ModelSpec, verbose: bool = False) -> dict:
    """``/api/show`` model_info: the GGUF keys a memory model reads."""
    a = model.arch
    p = a.arch
    params = int(model.weights_bytes * 8 / model.bits)
    info: dict[str, Any] = {
        "general.architecture": p,
        "general.basename": model.tag.split(":", 1)[0],
        "general.file_type": _FILE_TYPE.get(model.quantization, 15),
        "general.parameter_count": params,
        "general.quantization_version": 2,
        f"{p}.block_count": a.block_count,
        f"{p}.context_length": a.context_length,
        f"{p}.embedding_length": a.embedding_length,
        f"{p}.feed_forward_length": feed_forward(a),
        f"{p}.attention.head_count": a.head_count,
        f"{p}.attention.head_count_kv": a.head_count_kv,
        f"{p}.attention.layer_norm_rms_epsilon": 1e-05,
        f"{p}.rope.freq_base": 500000,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    for key in ("key_length", "value_length", "sliding_window"):
        value = getattr(a, key)
        if value:
            info[f"{p}.attention.{key}"] = value
    if a.vocab_size:
        info[f"{p}.vocab_size"] = a.vocab_size
        # arrays over 1024 items come back null unless verbose, as in Ollama
        info["tokenizer.ggml.tokens"] = [f"<t{i}>" for i in range(a.vocab_size)] if verbose else None
        info["tokenizer.ggml.token_type"] = [1] * a.vocab_size if verbose else None
    return info


def feed_forward(arch) -> int:
    """The FFN width: the scenario's, else 3.5 x the embedding (Llama 3.1 8B's 14336 for 4096)."""
    return arch.feed_forward_length or arch.embedding_length * 7 // 2


def tensors(model: ModelSpec) -> list[dict]:
    """A plausible tensor list (names, types, shapes) for ``/api/show``."""
    a = model.arch
    E, V = a.embedding_length, a.vocab_size or 32000
    kv = a.head_count_kv * a.head_dim_k
    ff = feed_forward(a)
    t = model.quantization
    out = [{"name": "token_embd.weight", "type": t, "shape": [E, V]}]
    for i in range(a.block_count):
        for name, shape in (("attn_norm.weight", [E]), ("attn_q.weight", [E, E]), ("attn_k.weight", [E, kv]),
                            ("attn_v.weight", [E, kv]), ("attn_output.weight", [E, E]), ("ffn_norm.weight", [E]),
                            ("ffn_gate.weight", [E, ff]), ("ffn_up.weight", [E, ff]), ("ffn_down.weight", [ff, E])):
            out.append({"name": f"blk.{i}.{name}", "type": "F32" if name.endswith("norm.weight") else t,
                        "shape": shape})
    out += [{"name": "output_norm.weight", "type": "F32", "shape": [E]},
            {"name": "output.weight", "type": t, "shape": [E, V]}]
    return out


def capabilities(model: ModelSpec) -> list[str]:
    return ["embedding"] if model.embedding else ["completion"]


def embedding(model: ModelSpec, text: str) -> list[float]:
    """A unit vector of ``embedding_length`` numbers, fixed for a model and a text."""
    seed = hashlib.sha256(f"{model.tag}\x00{text}".encode("utf-8")).digest()
    values = []
    for i in range(model.arch.embedding_length):
        h = hashlib.blake2b(seed + i.to_bytes(4, "little"), digest_size=4).digest()
        values.append(int.from_bytes(h, "little") / 2 ** 31 - 1.0)
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]
