"""Building a ProbeEnv on the rig, as the CLI's ``--rig`` does."""
from __future__ import annotations

from probes.base import ProbeEnv
from probes.memory.select import select_reader
from probes.ollama_api import Ollama

MiB = 1 << 20
KV_PER_TOKEN = 30 * 2 * 64 * 3 * 2  # SmolLM2-135M f16: blocks x (Dk+Dv) x Hkv x 2 bytes = 22.5 KiB


def rig_env(rig, limit_bytes: int | None = None, **kw) -> ProbeEnv:
    selection = select_reader(server_pid=lambda: rig.server_pid)  # follows restarts
    assert selection.reader.name == "host"
    return ProbeEnv(api=Ollama(rig.host), reader=selection.reader, limit_bytes=limit_bytes,
                    device=selection.reader.info(), control=rig.server, **kw)


def read(probe: str, facts: list[dict], limit: int | None = None) -> list[str | None]:
    """The reading rule the rules give each fact of one probe run on the rig's
    CPU (``rules.engine.read_measurements``): the probes post no verdict."""
    from rules.engine import read_measurements

    return [r["rule"] if r else None for r in read_measurements(probe, facts, limit=limit or NO_LIMIT)]


#: a limit no rig measurement comes near
NO_LIMIT = 1 << 50


def ps_names(api: Ollama) -> list[tuple[str, int | None]]:
    return sorted((m.name, m.context_length) for m in api.ps())
