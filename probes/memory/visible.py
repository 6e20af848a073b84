"""Which GPUs a program started in this environment would see: the
``*_VISIBLE_DEVICES`` variables, read the way the runtimes read them, so the
per-device readings (``devices()`` of the GPU readers) show what Ollama's
runner can use, not every card in the box. The environment is any mapping
(``os.environ`` by default) so tests never touch the process's own.

``CUDA_VISIBLE_DEVICES`` (NVIDIA; from the CUDA environment-variable
reference, the MPS guide, and PyTorch's tests that pin the same parsing):

- unset: every GPU; set to an empty or blank string: none at all;
- a comma list; each entry is an index or a UUID as ``nvidia-smi -L`` prints
  it (``GPU-8932f937-...``, ``MIG-...``), and any leading part of a UUID that
  only one device has will do (``GPU-8932f937``);
- an index is read like C's ``strtoul``: the leading digits count, the rest
  of the entry is ignored (``1gpu`` is 1, ``+3`` is 3, ``-0`` is 0);
- the first entry that names no device (not a number, a negative number, an
  index with no GPU, a UUID part that matches none or several) ends the
  list there: ``0,2,-1,1`` means GPUs 0 and 2;
- naming one device twice leaves CUDA with no device at all.

Not followed: the pre-R470 MIG form ``MIG-GPU-<uuid>/<gi>/<ci>`` is not
resolved (it ends the list); indices are NVML's, i.e. nvidia-smi's PCI-bus
order, which is CUDA's only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or
identical cards (CUDA's default is fastest first); and a CUDA process uses
only one MIG instance, while every visible instance is listed here.

AMD (the ROCm "GPU isolation" guide): ``ROCR_VISIBLE_DEVICES`` is read by
the ROCm runtime first, indices or UUIDs (``GPU-`` and the card's 16-digit
unique id); ``HIP_VISIBLE_DEVICES`` then picks among what ROCR left,
numbered again from 0. Their entries are read with the rules above; the
guide does not say what an invalid entry does. Shell equivalents::

    nvidia-smi -L          # indices and UUIDs, MIG instances included
    rocminfo | grep Uuid   # GPU-<unique id>
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

Env = Mapping[str, str]

CUDA_VAR = "CUDA_VISIBLE_DEVICES"
ROCR_VAR = "ROCR_VISIBLE_DEVICES"
HIP_VAR = "HIP_VISIBLE_DEVICES"

_INDEX = re.compile(r"[+-]?\d+")
_UUID_KINDS = ("GPU-", "MIG-")


@dataclass(frozen=True)
class Candidate:
    """A device an entry may name: by ``index`` (None: only by UUID, as a
    MIG instance) or by ``uuid``; ``item`` is what the reader keeps for it."""

    index: int | None
    uuid: str | None
    item: Any


def visible(spec: str | None, candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates ``spec`` (one variable's value; None: unset) makes visible, in its order."""
    if spec is None:
        return list(candidates)
    chosen: list[Candidate] = []
    for entry in spec.split(","):
        found = _resolve(entry.strip(), candidates)
        if found is None:
            break
        if any(found is c for c in chosen):
            return []
        chosen.append(found)
    return chosen


def _resolve(entry: str, candidates: Sequence[Candidate]) -> Candidate | None:
    number = _INDEX.match(entry)
    if number:
        n = int(number.group())
        return None if n < 0 else next((c for c in candidates if c.index == n), None)
    if entry.upper().startswith(_UUID_KINDS):
        wanted = entry.lower()
        hits = [c for c in candidates if c.uuid and c.uuid.lower().startswith(wanted)]
        return hits[0] if len(hits) == 1 else None
    return None


def nvidia_visible(candidates: Sequence[Candidate], env: Env) -> list[Candidate]:
    return visible(env.get(CUDA_VAR), candidates)


def amd_visible(candidates: Sequence[Candidate], env: Env) -> list[Candidate]:
    rocr = visible(env.get(ROCR_VAR), candidates)
    hip = env.get(HIP_VAR)
    if hip is None:
        return rocr
    renumbered = [Candidate(pos, c.uuid, c) for pos, c in enumerate(rocr)]
    return [c.item for c in visible(hip, renumbered)]
