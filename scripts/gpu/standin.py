"""The NeoHorse-1 stand-in for the device machine, without its weights.

The rig's stand-in GGUFs (SmolLM2-135M: 94 MiB as Q4_1, 258 MiB as F16) do
not fit the 64 MiB a device call carries. Memory on the card depends on the
tensors' shapes and types and the metadata (layers, heads, vocabulary,
context), never on the weights' values, so the bundle carries only those:
:func:`spec_of` reads them here from the shipped Q4_1 file into a small JSON
spec, and on the device :func:`write_q4_1` writes a GGUF with the same
metadata, tensor names, shapes and types and seeded random weights. The
F16 and Q8_0 tags are then made from it by the rig's own
:func:`oomrig.models.convert_gguf`, exactly as the rig makes them from the
real file, so every file has the size of the rig's to the byte.

What differs from the real model is the text it writes: untrained weights
answer with noise, so a coherence check of a lower-bit tag reads noise too.
"""
from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

import gguf
import numpy as np



def spec_of(src: Path) -> dict:
    """Metadata (key, value type, array item type, value) and tensors (name,
    shape in numpy order, type) of a GGUF, as plain JSON data."""
    reader = gguf.GGUFReader(src)
    kv = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # the header's own counts: the writer sets them
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        kv.append([key, int(vtype), None if sub is None else int(sub), field.contents()])
    tensors = [[t.name, [int(x) for x in reversed(t.shape)], t.tensor_type.name] for t in reader.tensors]
    return {"source": src.name, "kv": kv, "tensors": tensors}


def save_spec(spec: dict, dst: Path) -> Path:
    dst.write_bytes(lzma.compress(json.dumps(spec, ensure_ascii=False).encode()))
    return dst


def load_spec(path: Path) -> dict:
    return json.loads(lzma.decompress(path.read_bytes()))


def _weights(rng: np.random.Generator, shape: list[int], name: str) -> np.ndarray:
    """Seeded values of a trained model's scale: norms at 1, matrices small
    (0.02, as initialisers use), so activations stay finite on any backend."""
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)


def write_q4_1(spec: dict, dst: Path, seed: int = 1) -> Path:
    """The stand-in in its shipped form: each tensor in the type it has in
    the real file (Q4_1 matrices, a Q8_0 embedding, F32 norms)."""
    arch = next(v for k, _, _, v in spec["kv"] if k == "general.architecture")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    writer = gguf.GGUFWriter(tmp, arch)
    for key, vtype, sub, value in spec["kv"]:
        if key == "general.architecture":
            continue  # GGUFWriter writes it from `arch`
        writer.add_key_value(key, value, gguf.GGUFValueType(vtype),
                             sub_type=None if sub is None else gguf.GGUFValueType(sub))
    rng = np.random.default_rng(seed)
    for name, shape, type_name in spec["tensors"]:
        qtype = gguf.GGMLQuantizationType[type_name]
        data = _weights(rng, shape, name)
        if qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, data)
        else:
            packed = gguf.quants.quantize(data, qtype)
            writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
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
