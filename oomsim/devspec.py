"""The simulated machine's GPUs as a scenario file gives them: one ``device:``
mapping, or a ``devices:`` list of 2-4 cards, each optionally a MIG slice of
a larger card (an instance NVML reaches through its parent, with memory of
its own). This module reads and checks that part of a scenario; the rest of
the file is :mod:`oomsim.scenario`'s, whose field reader it is handed."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

VENDORS = ("nvidia", "amd", "apple")
MAX_DEVICES = 4
DEFAULT_DRIVER = "550.54.14"
_PROFILE = re.compile(r"^\d+g\.\d+gb(?:\+me)?$")


@dataclass(frozen=True)
class MigSpec:
    """This device is a MIG instance of ``parent`` (e.g. "NVIDIA H100 80GB HBM3"),
    profile ``3g.40gb``; slices naming the same parent share one card."""

    parent: str
    parent_total_bytes: int
    profile: str
    gpu_instance: int = 0      # nvmlDeviceGetGpuInstanceId
    compute_instance: int = 0  # nvmlDeviceGetComputeInstanceId


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    vendor: str                    # nvidia | amd | apple
    total_bytes: int
    used_by_others_bytes: int = 0
    driver_version: str = DEFAULT_DRIVER
    mig: MigSpec | None = None

    @property
    def unified(self) -> bool:
        return self.vendor == "apple"


def read_devices(r, top: dict) -> tuple[DeviceSpec, ...]:
    """``device:`` (one card) or ``devices:`` (a list of 1-4), never both."""
    one, many = top.get("device") is not None, top.get("devices") is not None
    if one and many:
        r.fail("devices", "give either device (one card) or devices (a list of cards), not both")
    if not (one or many):
        r.fail("device", "missing")
    if one:
        return (_device(r, top["device"], "device"),)
    raw = top["devices"]
    if not isinstance(raw, list) or not raw:
        r.fail("devices", "must be a list of cards (- {name: ..., vendor: ..., total: ...})")
    if len(raw) > MAX_DEVICES:
        r.fail("devices", f"at most {MAX_DEVICES} cards, got {len(raw)}")
    devices = tuple(_device(r, d, f"devices[{i}]") for i, d in enumerate(raw))
    vendors = {d.vendor for d in devices}
    if len(vendors) > 1:
        r.fail("devices", f"all cards must have one vendor, got {', '.join(sorted(vendors))}")
    if len(devices) > 1 and devices[0].unified:
        r.fail("devices", "apple has one unified memory pool: give one device")
    parents: dict[str, int] = {}
    for i, d in enumerate(devices):
        if d.mig is not None:
            if d.mig.parent_total_bytes != parents.setdefault(d.mig.parent, d.mig.parent_total_bytes):
                r.fail(f"devices[{i}].mig.parent_total", f"differs from another slice of {d.mig.parent!r}")
    for parent, total in parents.items():
        sliced = sum(d.total_bytes for d in devices if d.mig is not None and d.mig.parent == parent)
        if sliced > total:
            r.fail("devices", f"the MIG slices of {parent!r} add up to more than its memory")
    return devices


def _device(r, data: Any, path: str) -> DeviceSpec:
    d = r.mapping(data, path, required=("name", "vendor", "total"), optional=("used_by_others", "driver", "mig"))
    total = r.size(d["total"], f"{path}.total")
    others = r.size(d.get("used_by_others", 0), f"{path}.used_by_others", zero_ok=True)
    if others >= total:
        r.fail(f"{path}.used_by_others", f"must be less than {path}.total")
    vendor = r.choice(d["vendor"], f"{path}.vendor", VENDORS)
    mig = None
    if d.get("mig") is not None:
        if vendor != "nvidia":
            r.fail(f"{path}.mig", "MIG slices exist on nvidia cards only")
        m = r.mapping(d["mig"], f"{path}.mig", required=("parent", "parent_total", "profile"),
                      optional=("gpu_instance", "compute_instance"))
        profile = r.text(m["profile"], f"{path}.mig.profile")
        if not _PROFILE.match(profile):
            r.fail(f"{path}.mig.profile", f"not a MIG profile: {profile!r} (e.g. 3g.40gb, 1g.10gb)")
        parent_total = r.size(m["parent_total"], f"{path}.mig.parent_total")
        if total > parent_total:
            r.fail(f"{path}.total", "a MIG slice cannot be larger than its card")
        mig = MigSpec(parent=r.text(m["parent"], f"{path}.mig.parent"), parent_total_bytes=parent_total,
                      profile=profile, gpu_instance=r.integer(m.get("gpu_instance", 0), f"{path}.mig.gpu_instance"),
                      compute_instance=r.integer(m.get("compute_instance", 0), f"{path}.mig.compute_instance"))
    return DeviceSpec(name=r.text(d["name"], f"{path}.name"), vendor=vendor, total_bytes=total,
                      used_by_others_bytes=others,
                      driver_version=r.text(d.get("driver", DEFAULT_DRIVER), f"{path}.driver"), mig=mig)


def device_uuid(dev: DeviceSpec, index: int) -> str:
    """The UUID NVML reports: ``GPU-...`` for a card, ``MIG-...`` for a slice
    (the first card's is the one a one-card scenario always had)."""
    return _uuid(dev.name if index == 0 and dev.mig is None else f"{dev.name}#{index}", "MIG" if dev.mig else "GPU")


def card_uuid(card: "Card", index: int) -> str:
    """A physical card's UUID: its device's, or for a MIG-enabled card its own."""
    return _uuid(f"{card.name}@card{index}", "GPU")


def _uuid(seed: str, prefix: str) -> str:
    d = hashlib.sha1(seed.encode()).hexdigest()
    return f"{prefix}-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


@dataclass(frozen=True)
class Card:
    """One physical card as NVML and ``nvidia-smi`` count them: a plain
    device, or a MIG-enabled card whose slices are scenario devices."""

    name: str
    total_bytes: int
    devices: tuple[int, ...]   # scenario device indices: the card itself, or its MIG slices in order
    mig: bool = False

    #: MIG instances one card can hold (A100 / H100 / H200)
    MAX_MIG = 7


def cards(devices: tuple[DeviceSpec, ...]) -> list[Card]:
    """The physical cards behind the scenario's devices, in order of first appearance."""
    out: list[Card] = []
    parents: dict[str, int] = {}
    for i, d in enumerate(devices):
        if d.mig is None:
            out.append(Card(d.name, d.total_bytes, (i,)))
        elif d.mig.parent in parents:
            k = parents[d.mig.parent]
            out[k] = Card(out[k].name, out[k].total_bytes, out[k].devices + (i,), True)
        else:
            parents[d.mig.parent] = len(out)
            out.append(Card(d.mig.parent, d.mig.parent_total_bytes, (i,), True))
    return out
