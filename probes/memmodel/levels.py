"""Quantization levels and tensor types: bits per weight of each Ollama
level (``details.quantization_level``), a level read from a tag name, and the
bytes of the weights from ``/api/show``'s tensor list."""
from __future__ import annotations

import math
import re

# average bits per weight of a whole file at each Ollama quantization level.
# Block types are exact (Q8_0 = 34 bytes / 32 weights = 8.5); the K-quant
# mixes (_S/_M/_L) keep some tensors at a higher type, so their figures are
# llama.cpp's measured averages on Llama-class models.
_BITS = {
    "F32": 32.0, "F16": 16.0, "BF16": 16.0,
    "Q8_0": 8.5, "Q6_K": 6.5625,
    "Q5_1": 6.0, "Q5_K_M": 5.69, "Q5_K_S": 5.54, "Q5_0": 5.5,
    "Q4_1": 5.0, "Q4_K_M": 4.85, "Q4_K_S": 4.58, "Q4_0": 4.5, "IQ4_NL": 4.5,
    "MXFP4": 4.25, "IQ4_XS": 4.25,
    "Q3_K_L": 4.27, "Q3_K_M": 3.91, "IQ3_M": 3.66, "Q3_K_S": 3.5, "IQ3_S": 3.44,
    "IQ3_XS": 3.3, "IQ3_XXS": 3.06,
    "Q2_K": 2.63, "Q2_K_S": 2.5, "IQ2_M": 2.7, "IQ2_S": 2.5, "IQ2_XS": 2.31,
    "IQ2_XXS": 2.06, "TQ2_0": 2.06,
    "IQ1_M": 1.75, "TQ1_0": 1.69, "IQ1_S": 1.56,
}

# bytes per block and values per block of each ggml tensor type (ggml.c type traits)
GGML_TYPE_SIZE = {
    "F32": (4, 1), "F16": (2, 1), "BF16": (2, 1), "F64": (8, 1), "I8": (1, 1), "I16": (2, 1), "I32": (4, 1),
    "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32), "Q8_1": (36, 32),
    "Q2_K": (84, 256), "Q3_K": (110, 256), "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256),
    "Q8_K": (292, 256), "IQ2_XXS": (66, 256), "IQ2_XS": (74, 256), "IQ2_S": (82, 256), "IQ3_XXS": (98, 256),
    "IQ3_S": (110, 256), "IQ1_S": (50, 256), "IQ1_M": (56, 256), "IQ4_NL": (18, 32), "IQ4_XS": (136, 256),
    "TQ1_0": (54, 256), "TQ2_0": (66, 256), "MXFP4": (17, 32),
}


def bits_per_weight(level: str) -> float:
    """Average bits per weight of an Ollama quantization level
    (``details.quantization_level``), for ordering levels and sizing tags.
    Case does not matter; an unknown level raises ValueError."""
    key = str(level).strip().upper()
    if key in _BITS:
        return _BITS[key]
    raise ValueError(f"unknown quantization level {level!r} (known: {', '.join(_BITS)})")


def known_levels() -> tuple[str, ...]:
    """Every level :func:`bits_per_weight` knows, most bits first."""
    return tuple(sorted(_BITS, key=lambda k: -_BITS[k]))

def weights_for_level(params: int, level: str) -> int:
    """Bytes of a model with ``params`` weights at ``level`` (for sizing a tag
    that does not exist yet)."""
    return int(math.ceil(params * bits_per_weight(level) / 8))


_LEVEL_IN_TAG = re.compile(r"(?i)(?:^|[-_:.])((?:i?q\d(?:_[0-9a-z]+)*)|f16|f32|bf16|fp16|mxfp4)(?:$|[-_.])")


def level_from_tag(tag: str) -> str | None:
    """A quantization level guessed from a tag name (``llama3:8b-q4_K_M`` ->
    ``Q4_K_M``); only a hint: tag names are free text, ``/api/show`` decides."""
    name = tag.split(":", 1)[-1]
    for m in _LEVEL_IN_TAG.finditer(name):
        parts = m.group(1).upper().replace("FP16", "F16").split("_")
        for n in range(len(parts), 0, -1):  # q4_0_instruct -> Q4_0
            if "_".join(parts[:n]) in _BITS:
                return "_".join(parts[:n])
    return None

def tensor_bytes(tensors) -> int | None:
    """Bytes of the weights as the file stores them: the sum over ``/api/show``
    ``tensors`` (verbose) of elements x the type's bytes per block / values per
    block. None when the list is missing or holds a type we do not know, so a
    caller falls back to the file size instead of trusting a partial sum."""
    if not tensors:
        return None
    total = 0
    for t in tensors:
        kind = str(t.get("type", "")).upper()
        if kind not in GGML_TYPE_SIZE:
            return None
        size, block = GGML_TYPE_SIZE[kind]
        n = 1
        for dim in t.get("shape") or []:
            n *= int(dim)
        total += -(-n // block) * size
    return total

