"""The memory ledger: who holds the device's memory, from every source that
says, side by side, never one silently picked.

Read once with the model loaded (the baseline, after its load):

- the device as the memory source reads it: total, free, in use;
- processes that are not Ollama's, where the source names them (NVML,
  rocm-smi); on a host-memory source, what the rest of the system uses
  (total - available - Ollama's runners), as one figure;
- every model ``ollama ps`` lists, this one marked: its size there, and what
  Ollama's own processes hold as the memory source sees them;
- this model split as the server's log gives it: weights, KV cache, compute
  (and output) buffers;
- with several cards (or a MIG instance), each device read apart: which
  card holds what;
- unaccounted: in use, less the other processes, less what ``ollama ps``
  says the models hold. Users see ``ollama ps`` and nvidia-smi gigabytes
  apart; the ledger shows both figures and the gap instead of choosing.

A figure a source does not give is None (shown as "not given"), never a guess.
"""
from __future__ import annotations

from typing import Any

from probes.base import ProbeEnv
from probes.memory.base import OLLAMA_PROCESS, devices_of

#: the log's buffer kinds, as the ledger names them
_KINDS = {"model": "weights", "KV": "kv_cache", "compute": "compute", "output": "output", "RS": "kv_cache"}


def read(env: ProbeEnv, model: str, buffers: list[dict] | None = None) -> dict:
    """The ``ledger`` fact for ``model`` loaded now; ``buffers`` are the log's
    buffer lines of its load (``probes.serverlog.LogDigest.buffers``)."""
    fact: dict[str, Any] = {"kind": "ledger", "model": model, "source": getattr(env.reader, "name", None)}
    reading = _safe(lambda: env.reader.read())
    procs = _safe(lambda: env.reader.processes()) or []
    host = fact["source"] == "host"
    total = getattr(reading, "total_bytes", None)
    free = getattr(reading, "free_bytes", None)
    used = getattr(reading, "used_bytes", None)
    ours = [p for p in procs if host or OLLAMA_PROCESS.search(p.name or "")]
    ollama_seen = sum(p.used_bytes or 0 for p in ours) if ours else None
    if host:
        # the host source's "used" is Ollama's runners; the rest of the system is what is left
        in_use = total - free if total is not None and free is not None else None
        others = [] if in_use is None or used is None else [
            {"pid": None, "name": "other programs", "bytes": max(in_use - used, 0)}]
    else:
        in_use = used
        # a process whose name cannot be read is listed, but counted as neither
        others = [{"pid": p.pid, "name": p.name, "bytes": p.used_bytes, "named": _named(p.name)} for p in procs
                  if not OLLAMA_PROCESS.search(p.name or "")]
    rows = _safe(lambda: env.api.ps()) or []
    on_device = not host  # a device source: what ollama ps says is on the device
    wanted = model.lower()
    models = [{"name": r.name, "bytes": r.size_vram_bytes if on_device else r.size_bytes,
               "this": r.name.lower() == wanted or r.name.lower() == f"{wanted}:latest"} for r in rows]
    split: dict[str, int] = {}
    for b in buffers or []:
        if host or str(b.get("device", "")).upper() != "CPU":
            kind = _KINDS.get(b.get("kind"), b.get("kind"))
            split[kind] = split.get(kind, 0) + int(b.get("bytes") or 0)
    others_total = (sum(o["bytes"] or 0 for o in others if o.get("named", True)) if procs or host and others
                    else None)
    ps_total = sum(m["bytes"] or 0 for m in models) if rows else None
    unaccounted = None
    if in_use is not None and others_total is not None and ps_total is not None:
        unaccounted = in_use - others_total - ps_total
    fact.update(total=total, free=free, in_use=in_use, others=others, others_total=others_total,
                models=models, ollama_seen=ollama_seen, buffers=split or None,
                unaccounted=unaccounted)
    # several cards (or a MIG instance): a row per device, read apart, says which card holds what
    cards = [d for d in (_safe(lambda: devices_of(env.reader)) or []) if not host]
    if len(cards) > 1 or any(d.mig_parent is not None for d in cards):
        fact["devices"] = [{"label": d.label, "name": d.name, "total": d.total_bytes, "used": d.used_bytes,
                            "free": d.free_bytes} for d in cards]
    return fact


def _named(name: str | None) -> bool:
    return bool(name) and name != "?"


def _safe(read_it):
    try:
        return read_it()
    except Exception:  # noqa: BLE001 - a source that fails gives no figure; the ledger says so
        return None
