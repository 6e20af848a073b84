"""AMD memory through ``rocm-smi``'s JSON output.

Parsers are pure functions over the tool's text (tested on real samples).
rocm-smi sometimes prints a warning line before the JSON, writes numbers as
strings, and marks missing values "N/A" or "unknown"; all of that reads as
None rather than an error. All cards are summed, as Ollama spreads a model
over every GPU it sees; ``devices()`` reads each card apart, only those
``ROCR_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` leave visible
(:mod:`probes.memory.visible`). A card's UUID is ``GPU-`` and its unique id
in 16 hex digits, as rocminfo prints it; rocm-smi's ``cardN`` numbers are
taken as the runtime's indices, which they are unless a card is hidden from
one of them. Shell equivalents::

    rocm-smi --showmeminfo vram --json
    rocm-smi --showproductname --json
    rocm-smi --showuniqueid --json
    rocm-smi --showpids --json
"""
from __future__ import annotations

import json
import os
import re
import time

from probes.memory.base import (CommandRunner, DeviceInfo, DeviceReading, ProcessUsage, Reading,
                                run_command, tool_failure)
from probes.memory.nvml import _join_names
from probes.memory.visible import Candidate, Env, amd_visible

MEM_QUERY = ("rocm-smi", "--showmeminfo", "vram", "--json")
NAME_QUERY = ("rocm-smi", "--showproductname", "--json")
UNIQUEID_QUERY = ("rocm-smi", "--showuniqueid", "--json")
PIDS_QUERY = ("rocm-smi", "--showpids", "--json")

_TOTAL_KEY = "vram total memory (b)"
_USED_KEY = "vram total used memory (b)"
_CARD = re.compile(r"^card(\d+)$", re.IGNORECASE)


class RocmParseError(ValueError):
    """rocm-smi printed something that is not its JSON."""


def load_json(text: str) -> dict:
    """The JSON object in rocm-smi's stdout, skipping any warning lines before it."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        if not text.strip():
            return {}
        raise RocmParseError(f"rocm-smi: no JSON in output: {text.strip().splitlines()[0][:80]}")
    try:
        data = json.loads(text[start:end + 1])
    except json.JSONDecodeError as exc:
        raise RocmParseError(f"rocm-smi: unreadable JSON ({exc.msg})") from None
    return data if isinstance(data, dict) else {}


def _cards(data: dict) -> list[tuple[int, dict]]:
    cards = []
    for key, value in data.items():
        m = _CARD.match(key)
        if m and isinstance(value, dict):
            cards.append((int(m.group(1)), {k.lower().strip(): v for k, v in value.items()}))
    return sorted(cards)


def _int(value) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def parse_meminfo(text: str) -> list[dict]:
    """``--showmeminfo vram --json`` -> ``[{"card": 0, "total": B, "used": B}]``."""
    return [{"card": n, "total": _int(f.get(_TOTAL_KEY)), "used": _int(f.get(_USED_KEY))}
            for n, f in _cards(load_json(text))]


def parse_productname(text: str) -> dict[int, str]:
    """``--showproductname --json`` -> {card: "AMD Radeon RX 7900 XTX"}."""
    names = {}
    for n, f in _cards(load_json(text)):
        for key in ("card series", "device name", "card model"):
            name = str(f.get(key) or "").strip()
            if name and name.upper() != "N/A":
                names[n] = name
                break
    return names


def parse_uniqueid(text: str) -> dict[int, str]:
    """``--showuniqueid --json`` -> {card: "GPU-18f68e602b8a790f"}; a card
    without one ("N/A") is left out."""
    uuids = {}
    for n, f in _cards(load_json(text)):
        raw = str(f.get("unique id") or "").strip().lower()
        raw = raw[2:] if raw.startswith("0x") else raw
        if raw and all(ch in "0123456789abcdef" for ch in raw):
            uuids[n] = "GPU-" + raw.zfill(16)
    return uuids


def parse_pids(text: str) -> list[ProcessUsage]:
    """``--showpids --json`` -> processes. rocm-smi writes each as
    ``"PID1234": "name, gpus, vram bytes, sdma, cu occupancy"`` under
    ``"system"``; an idle GPU prints no such entries."""
    out = []
    for key, value in (load_json(text).get("system") or {}).items():
        m = re.match(r"^PID(\d+)$", str(key), re.IGNORECASE)
        if not m:
            continue
        fields = [f.strip() for f in str(value).split(",")]
        if len(fields) >= 5:
            name, vram = ", ".join(fields[:-4]), _int(fields[-3])
        else:
            name, vram = (fields[0] if fields else "?"), None
        out.append(ProcessUsage(int(m.group(1)), name or "?", vram))
    return sorted(out, key=lambda p: p.pid)


class RocmSmiReader:
    name = "rocm-smi"

    def __init__(self, runner: CommandRunner | None = None, *, env: Env | None = None):
        self._run = runner or run_command
        self._env = os.environ if env is None else env

    def probe(self) -> tuple[bool, str]:
        try:
            cards = parse_meminfo(self._run(list(MEM_QUERY)))
        except Exception as exc:  # noqa: BLE001 - any failure means "not usable", said in one line
            return False, tool_failure("rocm-smi", exc)
        if not cards:
            return False, "rocm-smi: no AMD GPU listed"
        gpus = "1 GPU" if len(cards) == 1 else f"{len(cards)} GPUs"
        return True, f"rocm-smi: {gpus}, {self.info().name}"

    def info(self) -> DeviceInfo:
        try:
            cards = parse_meminfo(self._run(list(MEM_QUERY)))
        except Exception:  # noqa: BLE001
            cards = []
        try:
            names = parse_productname(self._run(list(NAME_QUERY)))
        except Exception:  # noqa: BLE001 - the name is nice to have
            names = {}
        labels = [names.get(c["card"], "AMD GPU") for c in cards] or ["AMD GPU (name n/a)"]
        totals = [c["total"] for c in cards]
        return DeviceInfo(
            name=_join_names(labels),
            vendor="amd",
            total_bytes=sum(totals) if totals and None not in totals else None,
            unified=False,
            source=self.name,
            count=max(len(cards), 1),
        )

    def read(self) -> Reading:
        try:
            cards = parse_meminfo(self._run(list(MEM_QUERY)))
        except Exception:  # noqa: BLE001 - a failed call is a reading nobody could take
            cards = []
        t = time.monotonic()
        used = [c["used"] for c in cards]
        total = [c["total"] for c in cards]
        used_b = sum(used) if used and None not in used else None
        total_b = sum(total) if total and None not in total else None
        free_b = total_b - used_b if used_b is not None and total_b is not None else None
        return Reading(t, used_b, total_b, free_b)

    def devices(self) -> list[DeviceReading]:
        """Each visible card read apart; free = total - used."""
        try:
            cards = parse_meminfo(self._run(list(MEM_QUERY)))
        except Exception:  # noqa: BLE001 - a failed call is a reading nobody could take
            return []
        names = self._optional(parse_productname, NAME_QUERY)
        uuids = self._optional(parse_uniqueid, UNIQUEID_QUERY)
        candidates = [Candidate(c["card"], uuids.get(c["card"]), c) for c in cards]
        out = []
        for c in amd_visible(candidates, self._env):
            total, used = c.item["total"], c.item["used"]
            out.append(DeviceReading(
                index=c.index, name=names.get(c.index, "AMD GPU"), total_bytes=total, used_bytes=used,
                free_bytes=total - used if total is not None and used is not None else None, uuid=c.uuid))
        return out

    def _optional(self, parse, query) -> dict:
        try:
            return parse(self._run(list(query)))
        except Exception:  # noqa: BLE001 - names and UUIDs are nice to have
            return {}

    def processes(self) -> list[ProcessUsage]:
        try:
            return parse_pids(self._run(list(PIDS_QUERY)))
        except Exception:  # noqa: BLE001
            return []

    def close(self) -> None:
        pass
