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


def ps_names(api: Ollama) -> list[tuple[str, int | None]]:
    return sorted((m.name, m.context_length) for m in api.ps())
