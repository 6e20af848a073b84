"""Stand-ins at real sizes: GGUF files with the exact tensor shapes, types and
memory-relevant metadata of models people run, for the memory benchmarks.

Nothing is downloaded and nothing is trained. Each file holds the shapes of a
published model (Llama 3.1 8B, Qwen 2.5 7B, Gemma 3 4B's text model, OLMoE
1B-7B, Mistral Nemo 12B), its tensors typed the way llama.cpp's quantizer
types them for the level (Q4_K_M keeps some tensors at Q6_K), and zeros for
values: a zero block is a valid block of every ggml type, and the file is
written sparse, so a 7 GiB stand-in costs almost no disk until an engine
reads it. A loaded stand-in allocates exactly what the real model would
(weights, KV cache, compute buffers); its answers are noise.

The files are cached beside the rig's other GGUFs and hard-linked into an
engine's blob store before ``ollama create``, which then finds the blob
present and copies nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

from oomrig.paths import Log, RigError, RigPaths, _stderr_log

Q = gguf.GGMLQuantizationType
#: bump when a spec or the writer changes: the cached files are named by it
FORMAT = 1
LEVELS = {"Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
          "F16": gguf.LlamaFileType.MOSTLY_F16}


@dataclass(frozen=True)
class Shape:
    """The shape of one published model, as its GGUF states it."""

    name: str                 # the stand-in's model name on the rig
    arch: str                 # general.architecture
    layers: int
    embd: int
    heads: int
    heads_kv: int
    ffn: int                  # feed-forward width (per expert for a MoE)
    vocab: int
    ctx_train: int
    head_dim: int | None = None   # key/value length when not embd / heads
    tied_output: bool = False     # no output.weight: the token embedding doubles as it
    qkv_bias: bool = False
    qk_norm: str | None = None    # "head" (per-head q/k norms) or "full" (OLMoE: over all heads)
    sandwich_norms: bool = False  # gemma: post-attention and post-FFN norms
    sliding_window: int | None = None
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0           # an expert's width where the GGUF states it apart (Qwen3 MoE)
    rope_freqs: bool = False      # Llama 3.1's rope_freqs.weight
    extra_kv: dict = field(default_factory=dict)
    source: str = ""              # where the figures come from (the model's config)

    @property
    def dk(self) -> int:
        return self.head_dim or self.embd // self.heads


SHAPES = {s.name: s for s in (
    Shape("shape-llama3.1-8b", "llama", 32, 4096, 32, 8, 14336, 128256, 131072, rope_freqs=True,
          extra_kv={"rope.freq_base": 500000.0, "rope.dimension_count": 128},
          source="meta-llama/Llama-3.1-8B config.json"),
    Shape("shape-qwen2.5-7b", "qwen2", 28, 3584, 28, 4, 18944, 152064, 32768, qkv_bias=True,
          extra_kv={"rope.freq_base": 1000000.0}, source="Qwen/Qwen2.5-7B-Instruct config.json"),
    Shape("shape-gemma3-4b", "gemma3", 34, 2560, 8, 4, 10240, 262144, 131072, head_dim=256, tied_output=True,
          qk_norm="head", sandwich_norms=True, sliding_window=1024,
          extra_kv={"rope.freq_base": 1000000.0}, source="google/gemma-3-4b-it config.json (text model)"),
    Shape("shape-olmoe-1b-7b", "olmoe", 16, 2048, 16, 16, 1024, 50304, 4096, qk_norm="full",
          experts=64, experts_used=8, extra_kv={"rope.freq_base": 10000.0},
          source="allenai/OLMoE-1B-7B-0924 config.json"),
    Shape("shape-nemo-12b", "llama", 40, 5120, 32, 8, 14336, 131072, 1024000, head_dim=128,
          extra_kv={"rope.freq_base": 1000000.0, "rope.dimension_count": 128},
          source="mistralai/Mistral-Nemo-Instruct-2407 config.json"),
    # two more, for the compute-buffer check only (bench/llama_buffers.py): the
    # MoE is 17 GiB at Q4_K_M, too big to load whole through Ollama here
    Shape("shape-qwen3-8b", "qwen3", 36, 4096, 32, 8, 12288, 151936, 40960, head_dim=128, qk_norm="head",
          extra_kv={"rope.freq_base": 1000000.0}, source="Qwen/Qwen3-8B config.json"),
    Shape("shape-qwen3-30b-a3b", "qwen3moe", 48, 2048, 32, 4, 6144, 151936, 40960, head_dim=128,
          qk_norm="head", experts=128, experts_used=8, expert_ffn=768, extra_kv={"rope.freq_base": 1000000.0},
          source="Qwen/Qwen3-30B-A3B config.json"),
)}
#: the five the whole-load bench (bench/bench_arch.py) runs by default
LOADED = ("shape-llama3.1-8b", "shape-qwen2.5-7b", "shape-gemma3-4b", "shape-olmoe-1b-7b", "shape-nemo-12b")


def tensors(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the model: name and ggml dims (ne0 first: a matrix
    that maps E to F is ``(E, F)``)."""
    E, F, V, dk = shape.embd, shape.ffn, shape.vocab, shape.dk
    out = [("token_embd.weight", (E, V)), ("output_norm.weight", (E,))]
    if not shape.tied_output:
        out.append(("output.weight", (E, V)))
    if shape.rope_freqs:
        out.append(("rope_freqs.weight", (dk // 2,)))
    for i in range(shape.layers):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (E,)), (b + "attn_q.weight", (E, shape.heads * dk)),
                (b + "attn_k.weight", (E, shape.heads_kv * dk)), (b + "attn_v.weight", (E, shape.heads_kv * dk)),
                (b + "attn_output.weight", (shape.heads * dk, E)), (b + "ffn_norm.weight", (E,))]
        if shape.qkv_bias:
            out += [(b + "attn_q.bias", (shape.heads * dk,)), (b + "attn_k.bias", (shape.heads_kv * dk,)),
                    (b + "attn_v.bias", (shape.heads_kv * dk,))]
        if shape.qk_norm == "head":
            out += [(b + "attn_q_norm.weight", (dk,)), (b + "attn_k_norm.weight", (dk,))]
        elif shape.qk_norm == "full":
            out += [(b + "attn_q_norm.weight", (shape.heads * dk,)), (b + "attn_k_norm.weight", (shape.heads_kv * dk,))]
        if shape.sandwich_norms:
            out += [(b + "post_attention_norm.weight", (E,)), (b + "post_ffw_norm.weight", (E,))]
        if shape.experts:
            X, F = shape.experts, shape.expert_ffn or F
            out += [(b + "ffn_gate_inp.weight", (E, X)), (b + "ffn_gate_exps.weight", (E, F, X)),
                    (b + "ffn_up_exps.weight", (E, F, X)), (b + "ffn_down_exps.weight", (F, E, X))]
        else:
            out += [(b + "ffn_gate.weight", (E, F)), (b + "ffn_up.weight", (E, F)), (b + "ffn_down.weight", (F, E))]
    return out


def _more_bits(i: int, n: int) -> bool:
    """The layers a _M K-quant keeps at a higher type: the first and last
    eighth, and every third one between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_type(shape: Shape, name: str, dims: tuple[int, ...], level: str) -> Q:
    """The ggml type llama.cpp's quantizer gives ``name`` at ``level``:
    1-D tensors and the MoE router stay F32; at Q4_K_M the output matrix
    (or a tied embedding) is Q6_K, and so are attn_v and ffn_down on the
    layers :func:`_more_bits` picks; a row that is not a whole number of
    256-value blocks falls back to a 32-block type."""
    if len(dims) == 1 or name.endswith("ffn_gate_inp.weight"):
        return Q.F32
    if level == "F16":
        return Q.F16
    if level == "Q8_0":
        return Q.Q8_0
    is_output = name == "output.weight" or (shape.tied_output and name == "token_embd.weight")
    kind = Q.Q4_K
    if is_output:
        kind = Q.Q6_K
    elif name.startswith("blk."):
        layer = int(name.split(".")[1])
        if (".attn_v." in name or ".ffn_down" in name) and _more_bits(layer, shape.layers):
            kind = Q.Q6_K
    if dims[0] % 256:
        kind = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}[kind]
    return kind


def _nbytes(dims: tuple[int, ...], kind: Q) -> int:
    block, size = gguf.GGML_QUANT_SIZES[kind]
    n = int(np.prod(dims))
    return n // block * size


def weights_bytes(shape: Shape, level: str) -> int:
    """Bytes of the tensors at ``level`` (what the file holds past its header)."""
    return sum(_nbytes(dims, tensor_type(shape, n, dims, level)) for n, dims in tensors(shape))


def _tokenizer(writer: gguf.GGUFWriter, vocab: int) -> None:
    """A SentencePiece vocabulary of the model's size: the three controls,
    the 256 byte pieces and numbered pieces, so every engine builds its
    token tables at their real size."""
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    toks += [f"\u2581t{i}" for i in range(vocab - len(toks))]
    types = [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(toks)
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)


def write_gguf(shape: Shape, level: str, dst: Path) -> Path:
    """Write the stand-in to ``dst`` (atomically): header, metadata, tensor
    table, then the data as a hole of the right length."""
    if level not in LEVELS:
        raise RigError(f"no stand-in level {level!r} (known: {', '.join(LEVELS)})")
    tmp = dst.with_name(dst.name + ".part")
    dst.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(tmp, shape.arch)
    writer.add_name(f"{shape.name} (zero-valued stand-in; shapes from {shape.source})")
    writer.add_file_type(int(LEVELS[level]))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    a = shape.arch
    writer.add_uint32(f"{a}.block_count", shape.layers)
    writer.add_uint32(f"{a}.context_length", shape.ctx_train)
    writer.add_uint32(f"{a}.embedding_length", shape.embd)
    writer.add_uint32(f"{a}.feed_forward_length", shape.ffn)
    writer.add_uint32(f"{a}.attention.head_count", shape.heads)
    writer.add_uint32(f"{a}.attention.head_count_kv", shape.heads_kv)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    if shape.head_dim:
        writer.add_uint32(f"{a}.attention.key_length", shape.head_dim)
        writer.add_uint32(f"{a}.attention.value_length", shape.head_dim)
    if shape.sliding_window:
        writer.add_uint32(f"{a}.attention.sliding_window", shape.sliding_window)
    if shape.experts:
        writer.add_uint32(f"{a}.expert_count", shape.experts)
        writer.add_uint32(f"{a}.expert_used_count", shape.experts_used)
        if shape.expert_ffn:
            writer.add_uint32(f"{a}.expert_feed_forward_length", shape.expert_ffn)
    for key, value in shape.extra_kv.items():
        (writer.add_float32 if isinstance(value, float) else writer.add_uint32)(f"{a}.{key}", value)
    _tokenizer(writer, shape.vocab)
    data = 0
    for name, dims in tensors(shape):
        kind = tensor_type(shape, name, dims, level)
        nbytes = _nbytes(dims, kind)
        writer.add_tensor_info(name, tuple(reversed(dims)), np.dtype(np.float32), nbytes, raw_dtype=kind)
        data += writer.ggml_pad(nbytes, writer.data_alignment)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        fout = writer.fout[0]
        writer.write_padding(fout, fout.tell())
        start = fout.tell()
        writer.close()
        os.truncate(tmp, start + data)   # the tensor data: zeros, as a hole
        os.replace(tmp, dst)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    return dst


def standin_path(paths: RigPaths, shape: Shape, level: str) -> Path:
    return paths.gguf_dir / "standins" / f"{shape.name}.{level}.v{FORMAT}.gguf"


def _digest(path: Path) -> str:
    """sha256 of the file, cached beside it (the file never changes under its name)."""
    side = path.with_name(path.name + ".sha256")
    if side.is_file() and side.stat().st_mtime >= path.stat().st_mtime:
        return side.read_text().strip()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    side.write_text(h.hexdigest())
    return h.hexdigest()


def tag(shape: Shape, level: str) -> str:
    return f"{shape.name}:{level.lower()}"


def ensure_standins(server, paths: RigPaths, names: list[str] | None = None, levels: tuple[str, ...] = ("Q4_K_M",),
                    log: Log = _stderr_log) -> dict[str, Path]:
    """Write (once) and register the stand-ins in ``server``'s store; tag -> file."""
    from probes.ollama_api import Ollama

    unknown = [level for level in levels if level not in LEVELS]
    if unknown:
        raise RigError(f"no stand-in level {unknown[0]!r} (known: {', '.join(LEVELS)})")
    api = Ollama(server.host, timeout_s=120)
    have = set(api.tags())
    made = {}
    for name in names or list(SHAPES):
        if name not in SHAPES:
            raise RigError(f"no stand-in shape {name!r} (known: {', '.join(SHAPES)})")
        shape = SHAPES[name]
        for level in levels:
            path = standin_path(paths, shape, level)
            if not path.is_file():
                log(f"writing {path.name} ({weights_bytes(shape, level) / 2**30:.2f} GiB of tensors, sparse)")
                write_gguf(shape, level, path)
            made[tag(shape, level)] = path
            if tag(shape, level) in have:
                continue
            blob = paths.models_dir / "blobs" / f"sha256-{_digest(path)}"
            if not blob.exists():
                blob.parent.mkdir(parents=True, exist_ok=True)
                os.link(path, blob)        # ollama create then finds the blob and uploads nothing
            log(f"creating {tag(shape, level)}")
            with tempfile.TemporaryDirectory() as tmp:
                modelfile = Path(tmp) / "Modelfile"
                modelfile.write_text(f"FROM {path}\n")
                proc = subprocess.run([server.ollama_bin, "create", tag(shape, level), "-f", str(modelfile)],
                                      env=server.process_env(), capture_output=True, text=True)
            if proc.returncode != 0:
                raise RigError(f"ollama create {tag(shape, level)} failed: "
                               f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return made


def describe() -> str:
    """The shapes, one JSON line each (for bench/README.md and --help)."""
    return "\n".join(json.dumps({"name": s.name, "arch": s.arch, "layers": s.layers, "embd": s.embd,
                                 "heads": s.heads, "heads_kv": s.heads_kv, "head_dim": s.dk, "ffn": s.ffn,
                                 "vocab": s.vocab, "experts": s.experts, "swa": s.sliding_window,
                                 "q4_k_m_GiB": round(weights_bytes(s, "Q4_K_M") / 2**30, 2)}) for s in SHAPES.values())
