"""The user's server as it is: its settings are read, never assumed.

A setting oomvet did not read is unknown: a retest on such a server is not
called verified, and the files write the settings the config needs that are
not already in effect, never flash attention off (unset is auto on v0.30+,
and off costs memory and forbids a quantized cache).
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from assistant.config import build_config
from assistant.files.outputs import render_files
from probes import base
from probes.base import measured_server_env, server_settings, settings_to_change
from probes.server import ForeignServer
from tests.test_config_roundtrip import sample_result


def _active(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


# ---------------------------------------------------------------- what a measurement runs with

def test_an_f16_cache_says_nothing_of_flash_attention_and_a_quantized_one_turns_it_on():
    assert measured_server_env(1, "f16") == {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KV_CACHE_TYPE": "f16"}
    assert measured_server_env(4, "q8_0")["OLLAMA_FLASH_ATTENTION"] == "1"


def test_settings_not_read_are_all_to_be_set_and_read_ones_only_where_they_differ():
    wanted = measured_server_env(4, "f16")
    assert settings_to_change(None, wanted) == wanted
    # unset is Ollama's default (1 slot, f16): only the slots differ
    assert settings_to_change({}, wanted) == {"OLLAMA_NUM_PARALLEL": "4"}
    assert settings_to_change({"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_KV_CACHE_TYPE": "q8_0"}, wanted) == \
        {"OLLAMA_KV_CACHE_TYPE": "f16"}


class _Env:
    """Just what server_settings touches of a ProbeEnv."""

    def __init__(self, control):
        self.control, self.entries = control, []
        self.api = type("Api", (), {"host": "http://127.0.0.1:11434"})()

    def changed(self, event, **data):
        self.entries.append(event)


def test_a_server_whose_settings_were_not_read_never_counts_as_running_the_wanted_ones():
    env = _Env(ForeignServer())
    with server_settings(env, measured_server_env(1, "f16")) as applied:
        assert applied is False  # before: unknown was read as Ollama's defaults, so "applied"
    assert env.entries == []


def test_a_read_server_already_running_the_settings_counts_as_running_them():
    env = _Env(ForeignServer({"OLLAMA_HOST": "127.0.0.1:11434"}, source="environ"))
    with server_settings(env, measured_server_env(1, "f16")) as applied:
        assert applied is True
    with server_settings(env, measured_server_env(4, "f16")) as applied:
        assert applied is False  # not ours to restart: measured as it is


# ---------------------------------------------------------------- reading a real process

@pytest.fixture
def fake_ollama(tmp_path):
    """A process named ``ollama`` with a user's settings in its environment
    (a copy of ``sleep``: what is read is the kernel's record of the process,
    which does not care what the program does)."""
    exe = tmp_path / "ollama"
    shutil.copy(shutil.which("sleep"), exe)
    env = dict(os.environ, OLLAMA_NUM_PARALLEL="8", OLLAMA_KV_CACHE_TYPE="q8_0", LLAMA_ARG_FIT_TARGET="512")
    env.pop("OLLAMA_FLASH_ATTENTION", None)
    proc = subprocess.Popen([str(exe), "30"], env=env)
    yield proc
    proc.kill()
    proc.wait()


def test_the_settings_are_read_from_the_server_process_environment(fake_ollama):
    server = ForeignServer.of_process(fake_ollama.pid)
    got = server.env()
    assert server.source == "environ"
    assert got["OLLAMA_NUM_PARALLEL"] == "8" and got["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
    assert got["LLAMA_ARG_FIT_TARGET"] == "512" and "OLLAMA_FLASH_ATTENTION" not in got
    assert all(k.startswith(("OLLAMA_", "LLAMA_ARG_")) for k in got)  # nothing else of the user's


def test_a_process_that_is_not_ollama_or_none_at_all_leaves_the_settings_unknown():
    mine = ForeignServer.of_process(os.getpid())  # python: a proxy in front of a server, say
    assert mine.env() is None and "not ollama" in mine.why
    nobody = ForeignServer.of_process(None)
    assert nobody.env() is None and nobody.why


# ---------------------------------------------------------------- the files

def test_files_write_only_what_differs_from_the_server_as_read():
    # the session read the server: 1 slot and an f16 cache are already in effect
    text = render_files(build_config(sample_result(server_env={})))["ollama.env"]
    assert _active(text) == {} and "# nothing to change: the server already runs with" in text


def test_files_for_a_server_not_read_name_the_settings_and_never_turn_flash_attention_off():
    for kv in ("f16", "q8_0"):
        result = sample_result(server_env=settings_to_change(None, measured_server_env(1, kv)))
        result["config"]["kv_cache"] = kv
        files = render_files(build_config(result))
        active = _active(files["ollama.env"])
        assert active["OLLAMA_NUM_PARALLEL"] == "1" and active["OLLAMA_KV_CACHE_TYPE"] == kv
        assert active.get("OLLAMA_FLASH_ATTENTION") == ("1" if kv != "f16" else None)
        assert "OLLAMA_FLASH_ATTENTION=0" not in files["oomvet-ollama.conf"]


# ---------------------------------------------------------------- a retest on settings not read

def test_a_retest_on_a_server_whose_settings_were_not_read_is_not_a_measurement_and_says_which():
    import oomsim as sim
    from probes import stability
    from probes.base import ProbeEnv
    from probes.ollama_api import Ollama
    from tests.test_sim_http import make

    with sim.start(make()) as handle:
        env = ProbeEnv(api=Ollama(handle.host), reader=None,
                       control=ForeignServer(why="the environment of process 4242 is another user's"))
        config = {"model": "neohorse-1:q4_K_M", "max_context_len": 4096, "max_batch_size": 512,
                  "max_concurrency": 1, "kv_cache": "f16"}
        result = stability.run(env, config)
        assert handle.state.runners == {}  # nothing was loaded: there is nothing it could confirm
    (fact,) = result.facts
    assert fact["measured"] is False and fact["peak"] is None
    assert "OLLAMA_NUM_PARALLEL=1 OLLAMA_KV_CACHE_TYPE=f16 could not be confirmed" in fact["unconfirmed"]
    assert "another user's" in fact["unconfirmed"]


def test_the_final_step_names_the_settings_it_could_not_confirm():
    from rules import record, steps
    from rules.state import initial_state

    st = initial_state("s1")
    record.note_unmeasured(st, {"kind": "stability", "measured": False, "unmeasured": "not verified: x",
                                "unconfirmed": "OLLAMA_NUM_PARALLEL=1 could not be confirmed in effect (why)"})
    done = steps.done(st, fits=True, advice="")
    assert done["verified"] is False
    assert done["unverified"] == ("the server's settings were not confirmed: "
                                  "OLLAMA_NUM_PARALLEL=1 could not be confirmed in effect (why)")


def test_flash_attention_auto_on_llama_server_is_what_a_quantized_cache_needs():
    wanted = measured_server_env(4, "q8_0")
    current = {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_KV_CACHE_TYPE": "q8_0"}  # FA unset
    assert settings_to_change(current, wanted, fa_auto=True) == {}  # v0.30+: unset is auto
    assert settings_to_change(current, wanted) == {"OLLAMA_FLASH_ATTENTION": "1"}  # legacy: unset is off
    assert settings_to_change(dict(current, OLLAMA_FLASH_ATTENTION="0"), wanted, fa_auto=True) == \
        {"OLLAMA_FLASH_ATTENTION": "1"}  # forced off is off on every version
