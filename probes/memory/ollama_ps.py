"""What Ollama itself says a loaded model takes, from ``/api/ps``.

``size`` and ``size_vram`` are Ollama's estimate made before the load, not a
measurement, so everything here carries the label "Ollama's estimate" and is
shown beside a reading, never in its place: the selector will not use this
source as the measurement. ``size_vram < size`` still tells us something real,
that Ollama put part of the model on the CPU. Shell equivalents::

    ollama ps
    curl http://127.0.0.1:11434/api/ps
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from common.errors import ServerUnreachable
from probes.memory.base import DeviceInfo, ProcessUsage, Reading
from probes.ollama_api import Ollama, placement_of

LABEL = "Ollama's estimate"


@dataclass(frozen=True)
class OllamaEstimate:
    name: str
    size_bytes: int | None          # weights + KV cache + graph, all devices
    size_vram_bytes: int | None     # the part Ollama placed on the GPU(s)
    context_length: int | None      # per-slot num_ctx (absent before Ollama 0.10)
    label: str = LABEL

    @property
    def cpu_bytes(self) -> int | None:
        if self.size_bytes is None or self.size_vram_bytes is None:
            return None
        return max(self.size_bytes - self.size_vram_bytes, 0)

    @property
    def placement(self) -> str | None:
        """"gpu", "partial" (spilled to CPU: a memory shortage too) or "cpu"."""
        if self.size_bytes is None or self.size_vram_bytes is None:
            return None
        return placement_of(self.size_bytes, self.size_vram_bytes)

    def to_dict(self) -> dict:
        return {**asdict(self), "cpu_bytes": self.cpu_bytes, "placement": self.placement}


def _as_dict(model: Any) -> dict:
    if isinstance(model, dict):
        return model
    if hasattr(model, "model_dump"):  # the ollama client's pydantic objects
        return model.model_dump()
    return dict(model)


def _int(value) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def ollama_estimate(ps_models: Iterable[Any]) -> list[OllamaEstimate]:
    """An ``/api/ps`` ``models`` list (dicts, or the ollama client's objects)
    -> one labelled estimate per loaded model."""
    out = []
    for raw in ps_models or []:
        m = _as_dict(raw)
        out.append(OllamaEstimate(
            name=str(m.get("name") or m.get("model") or "?"),
            size_bytes=_int(m.get("size")),
            size_vram_bytes=_int(m.get("size_vram")),
            context_length=_int(m.get("context_length")),
        ))
    return out


def fetch_ps(host: str | None = None, *, api: Ollama | None = None, timeout_s: float = 3.0) -> list[dict]:
    """``/api/ps`` models as plain dicts (``curl HOST/api/ps``), through
    ``api`` or a gateway to ``host`` (None: the default Ollama host) that
    gives the whole reply ``timeout_s``. Any failure is ServerUnreachable:
    a reader beside the measurement has nothing to show then."""
    where = host or "the default Ollama host"
    try:
        return (api or Ollama(host, timeout_s=timeout_s)).ps_rows()
    except Exception as exc:  # noqa: BLE001 - an unreadable answer is as good as none here
        raise ServerUnreachable(f"Ollama at {where} did not answer /api/ps: {exc}",
                                     hint="start it with `ollama serve`, or pass --host") from None


class OllamaPsReader:
    """/api/ps as a reader: for listing beside the measurement, and the only
    source for a server on another machine. ``used`` sums ``size_vram`` (the
    GPU share) or, with ``field="size"``, ``size`` (the model's memory on every
    device). What it returns is what the server reports, never a measurement
    of this machine: the probes mark such figures as not measured."""

    name = "ollama-ps"

    def __init__(self, host: str | None = None, *, api: Ollama | None = None, field: str = "size_vram"):
        if field not in ("size", "size_vram"):
            raise ValueError(f"field must be size or size_vram, not {field!r}")
        self._host = host
        # one gateway for every read (a reader is read many times a second)
        self._api = api or Ollama(host, timeout_s=3.0)
        self._field = field

    def _estimates(self) -> list[OllamaEstimate]:
        return ollama_estimate(fetch_ps(self._host, api=self._api))

    def probe(self) -> tuple[bool, str]:
        try:
            models = self._estimates()
        except ServerUnreachable as exc:
            return False, f"ollama-ps: {exc}"
        return True, f"ollama-ps: {len(models)} model(s) loaded ({LABEL}, not a measurement)"

    def info(self) -> DeviceInfo:
        return DeviceInfo(LABEL, "unknown", None, False, self.name)  # not a device

    def read(self) -> Reading:
        try:
            models = self._estimates()
        except ServerUnreachable:
            return Reading(time.monotonic(), None, None, None)
        sizes = [m.size_bytes if self._field == "size" else m.size_vram_bytes for m in models]
        used = sum(sizes) if None not in sizes else None
        return Reading(time.monotonic(), used, None, None)

    def processes(self) -> list[ProcessUsage]:
        return []

    def close(self) -> None:
        pass
