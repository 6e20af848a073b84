"""A user's real Ollama, started with their own settings, read as it runs.

The rig serves a second ``ollama serve`` with ``OLLAMA_NUM_PARALLEL=4`` and
``OLLAMA_KV_CACHE_TYPE=q8_0`` (as ``scripts/rig.py serve --env`` does); oomvet
finds the process listening on that address and reads the settings from its
environment, with their source, and the ``server`` fact is built from them.
Starting a server loads no model: this costs about a second.
"""
from __future__ import annotations

import dataclasses

import pytest

from assistant.session.world import local_server
from oomrig import Rig
from probes.ollama_api import Ollama
from probes.server import ForeignServer, model_cmdlines
from probes.serverinfo import read_server
from probes.serverlog import FileLog
from probes.serverlog import parse as parse_log

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


def test_where_its_environment_is_another_users_the_model_process_and_the_log_say_what_is_in_effect(rig):
    """The usual install: ``ollama serve`` runs as the ``ollama`` user, whose
    environment a user cannot read (root here can, so the other sources are
    read directly). Its model process's command line and the log's ``server
    config`` line are readable by anyone, and say what is *in effect*."""
    with Rig(version=rig.version, env=USERS, log=lambda m: None) as users:
        api = Ollama(users.host)
        api.load("neohorse-1:q8_0", {"num_ctx": 1024})
        pid = local_server(users.host)
        lines = model_cmdlines(pid)
        digest = parse_log(FileLog(users.server.log_path).read())
        server = ForeignServer.of_readable(lines, digest, why="denied")
        # no model loaded, and the log's start line alone: what the environment asked for
        from_log = ForeignServer.of_readable([], dataclasses.replace(digest, cmdline=None), why="denied")
        api.unload("neohorse-1:q8_0")
        version = api.version()
    assert len(lines) == 1 and "neohorse" not in lines[0]  # the model is a blob path
    settings = server.env()
    assert settings["OLLAMA_NUM_PARALLEL"] == "4" and server.source_of("OLLAMA_NUM_PARALLEL") == "cmdline"
    if digest.engine == "llama-server":
        # passed to llama-server as is, and flash attention unset is auto there
        assert settings["OLLAMA_KV_CACHE_TYPE"] == "q8_0" and "OLLAMA_FLASH_ATTENTION" not in settings
        assert server.source_of("OLLAMA_FLASH_ATTENTION") == "cmdline"  # known: unset (auto)
    else:
        # the legacy runner drops a quantized cache without flash attention (none on a CPU):
        # what is in effect is f16, whatever the environment asks
        assert "OLLAMA_KV_CACHE_TYPE" not in settings and server.knows("OLLAMA_KV_CACHE_TYPE")
    # the log's start line alone: what the environment asked for, defaults filled in
    assert from_log.env()["OLLAMA_NUM_PARALLEL"] == "4" and from_log.env()["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
    assert from_log.source_of("OLLAMA_KV_CACHE_TYPE") == "log"
    # the context a request without num_ctx gets is on no command line: the log's start line says it
    assert server.source_of("OLLAMA_CONTEXT_LENGTH") == "log"
    fact = read_server(lambda: version, env=server.env(), known=server.known, settings_from=server.source,
                       local=True)
    assert fact["num_parallel"] == 4
    if digest.engine == "runner":
        assert fact["default_ctx"] == 4096  # printed with its default filled in
    else:  # unset: the VRAM tier, and this test gives no VRAM total
        assert fact["default_ctx"] is None and "VRAM" in fact["unknown"]["default_ctx"]
