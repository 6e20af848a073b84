"""The server log parser on the rig's live log: what one real load wrote."""
from __future__ import annotations

import pytest

from probes.ollama_api import Ollama
from probes.serverlog import FileLog, parse

pytestmark = pytest.mark.integration
MiB = 1 << 20
KV_PER_TOKEN = 30 * 2 * 64 * 3 * 2  # SmolLM2-135M f16: blocks x (Dk+Dv) x Hkv x 2 bytes


def _log_path(rig):
    return getattr(rig, "log_path", None) or rig.server.log_path


def test_one_load_logs_its_command_line_and_kv_buffer(rig):
    api = Ollama(rig.host)
    model = next((t for t in sorted(rig.levels) if t.endswith(":f16")), "neohorse-1:f16")
    api.unload_all()
    log = FileLog(_log_path(rig))
    mark = log.offset()
    gen = api.load(model, {"num_ctx": 2048}, keep_alive="30s")
    assert gen.ok, gen.error
    try:
        d = parse(log.lines_since(mark))
        assert d.cmdline is not None, "no model process start line in the log"
        assert d.cmdline["num_ctx"] == 2048 and d.cmdline["num_parallel"] == 1
        assert d.buffer_total(kind="KV") == 2048 * KV_PER_TOKEN
        assert d.buffer_total(kind="model") > 100 * MiB
        assert d.oom_lines == []
        if d.engine == "llama-server":
            assert d.fit is not None and d.fit["projected"] > 0
    finally:
        api.unload(model)
