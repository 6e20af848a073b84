"""The NeoHorse-1 stand-in for the device machine, without its weights.

The rig's stand-in GGUFs (SmolLM2-135M: 94 MiB as Q4_1, 258 MiB as F16) do
not fit the 64 MiB a device call carries. Memory on the card depends on the
tensors' shapes and types and the metadata (layers, heads, vocabulary,
context), never on the weights' values, so the bundle carries only those:
:func:`spec_of` keeps the shipped Q4_1 file's bytes up to its tensor data
(the header, every metadata key, the tensor table) and where each tensor's
data lies; on the device :func:`write_q4_1` writes that header unchanged and
seeded random weights, quantized to each tensor's own type, at the same
offsets: the file has the real one's size to the byte. The F16 and Q8_0 tags
are then made from it by the rig's own :func:`oomrig.models.convert_gguf`,
exactly as the rig makes them from the real file.

What differs from the real model is the text it writes: untrained weights
write a stream of unrelated words, so a coherence check of a lower-bit tag
reads noise.
"""
from __future__ import annotations

import base64
import json
import lzma
import os
from pathlib import Path

import gguf
import numpy as np


def spec_of(src: Path) -> dict:
    """The header bytes of a GGUF and its tensors (name, shape in numpy order,
    type, offset in the data section), as plain JSON data."""
    reader = gguf.GGUFReader(src)
    header = src.read_bytes()[:reader.data_offset]
    tensors = [[t.name, [int(x) for x in reversed(t.shape)], t.tensor_type.name, int(t.data_offset - reader.data_offset)]
               for t in reader.tensors]
    return {"source": src.name, "size": src.stat().st_size, "keys": len(reader.fields),
            "header": base64.b64encode(header).decode(), "tensors": tensors}


def save_spec(spec: dict, dst: Path) -> Path:
    dst.write_bytes(lzma.compress(json.dumps(spec).encode()))
    return dst


def load_spec(path: Path) -> dict:
    return json.loads(lzma.decompress(path.read_bytes()))


#: the matrices' spread. At a trained model's 0.02 the layers add little to the residual
#: stream, so with tied embeddings every token predicts itself: greedy decoding repeats one
#: token until Ollama aborts ("token repeat limit reached") and no retest can finish. At 0.1
#: the layers dominate and 700 greedy tokens on the CPU engine held no repeat.
SPREAD = 0.1


def _weights(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    """Seeded values: norms at 1, matrices normal with SPREAD, finite on any backend."""
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(SPREAD)


def write_q4_1(spec: dict, dst: Path, seed: int = 1) -> Path:
    """The stand-in in its shipped form: the real header, and each tensor in
    the type it has in the real file (Q4_1 matrices, a Q8_0 embedding, F32 norms)."""
    header = base64.b64decode(spec["header"])
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    rng = np.random.default_rng(seed)
    with open(tmp, "wb") as fh:
        fh.write(header)
        for name, shape, type_name, offset in spec["tensors"]:
            qtype = gguf.GGMLQuantizationType[type_name]
            data = _weights(rng, shape)
            if qtype != gguf.GGMLQuantizationType.F32:
                data = gguf.quants.quantize(data, qtype)
            fh.seek(len(header) + offset)
            fh.write(data.tobytes())
        fh.truncate(spec["size"])   # the alignment padding after the last tensor
    os.replace(tmp, dst)
    return dst


def write_levels(spec: dict, folder: Path) -> dict[str, Path]:
    """level -> file for Q4_1, F16 and Q8_0, as :func:`oomrig.models.ensure_ggufs` returns them."""
    from oomrig.models import convert_gguf

    stem = Path(spec["source"]).name.removesuffix(".Q4_1.gguf")
    files = {"Q4_1": write_q4_1(spec, folder / f"{stem}.Q4_1.gguf")}
    for level in ("F16", "Q8_0"):
        files[level] = convert_gguf(files["Q4_1"], folder / f"{stem}.{level}.gguf", level)
    return files
