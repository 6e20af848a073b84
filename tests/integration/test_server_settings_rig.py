"""A user's real Ollama, started with their own settings, read as it runs.

The rig serves a second ``ollama serve`` with ``OLLAMA_NUM_PARALLEL=4`` and
``OLLAMA_KV_CACHE_TYPE=q8_0`` (as ``scripts/rig.py serve --env`` does); oomvet
finds the process listening on that address and reads the settings from its
environment, with their source, and the ``server`` fact is built from them.
Starting a server loads no model: this costs about a second.
"""
from __future__ import annotations

import pytest

from assistant.session.world import local_server
from oomrig import Rig
from probes.ollama_api import Ollama
from probes.server import ForeignServer
from probes.serverinfo import read_server

pytestmark = pytest.mark.integration

USERS = {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_KV_CACHE_TYPE": "q8_0"}


def test_a_users_server_settings_are_read_from_its_process_with_their_source(rig):
    with Rig(version=rig.version, env=USERS, log=lambda m: None) as users:
        pid = local_server(users.host)
        assert pid == users.server_pid  # the ollama serve on that port, not the test's rig
        server = ForeignServer.of_process(pid)
        assert server.source == "environ" and not server.can_restart()
        settings = server.env()
        assert {k: settings.get(k) for k in USERS} == USERS
        assert "OLLAMA_FLASH_ATTENTION" not in settings  # unset stays unset: nothing filled in
        fact = read_server(Ollama(users.host).version, env=settings, settings_from=server.source, local=True)
    assert fact["num_parallel"] == 4 and fact["kv_cache_type"] == "q8_0" and fact["settings_from"] == "environ"
    # flash attention unset: auto on the current engine, off on the legacy runner, never assumed "0"
    assert fact["flash_attention"] == ("auto" if fact["engine"] == "llama-server" else "off")


def test_the_tests_own_rig_behind_no_ollama_process_is_unknown_not_defaulted(rig):
    from tests.faultproxy import FaultProxy

    with FaultProxy(target=rig.host.split("//")[1], mode="pass") as proxy:
        pid = local_server(proxy.url)
    server = ForeignServer.of_process(pid)
    assert server.env() is None and server.why
    fact = read_server(Ollama(rig.host).version, env=server.env(), settings_from=server.source)
    assert fact["num_parallel"] is None and fact["kv_cache_type"] is None and fact["settings_from"] is None
    assert "OLLAMA_NUM_PARALLEL" in fact["unknown"]["num_parallel"]
