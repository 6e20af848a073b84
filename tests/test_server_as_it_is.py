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
import time
from pathlib import Path

import psutil
import pytest

from assistant.config import build_config
from assistant.files.outputs import render_files
from probes import base
from probes.base import measured_server_env, server_settings, settings_to_change
from probes.server import ForeignServer, cmdline_settings, model_cmdlines
from probes.serverlog import config_settings
from probes.serverlog import parse as parse_log
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
    env = dict(os.environ, OLLAMA_NUM_PARALLEL="8", OLLAMA_KV_CACHE_TYPE="q8_0", LLAMA_ARG_FIT_TARGET="512",
               CUDA_VISIBLE_DEVICES="1")
    env.pop("OLLAMA_FLASH_ATTENTION", None)
    env.pop("ROCR_VISIBLE_DEVICES", None)
    env.pop("HIP_VISIBLE_DEVICES", None)
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


def test_the_gpus_the_server_may_use_are_its_own_visible_devices_not_oomvets(fake_ollama):
    from probes.memory.nvml import NvmlReader
    from probes.server import visible_env
    from tests.fake_nvml import GiB, FakeNvml

    server = ForeignServer.of_process(fake_ollama.pid)
    assert visible_env(server) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert visible_env(ForeignServer.of_process(None)) is None   # not read: oomvet's own environment applies
    nvml = FakeNvml(gpus=("NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"))
    nvml.enqueue_memory(used=10 * GiB, total=80 * GiB, gpu=0).enqueue_memory(used=2 * GiB, total=24 * GiB, gpu=1)
    assert NvmlReader(lib=nvml, env=visible_env(server)).read().total_bytes == 24 * GiB


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


# ---------------------------------------------------------------- an environment that is another user's

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("engine", ["legacy", "current"])
def test_the_start_line_of_a_real_log_gives_what_the_environment_asked_for(engine):
    # both written by the rig's servers started with OLLAMA_NUM_PARALLEL=4 OLLAMA_KV_CACHE_TYPE=q8_0
    digest = parse_log((DATA / f"server_start_{engine}.txt").read_text().splitlines())
    got = config_settings(digest.server_config, digest.engine)
    assert got["OLLAMA_NUM_PARALLEL"] == "4" and got["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
    if engine == "legacy":
        assert got["OLLAMA_FLASH_ATTENTION"] is None  # "false": off, unset or 0 alike
        assert got["OLLAMA_CONTEXT_LENGTH"] == "4096"  # printed with its default filled in
    else:
        # "false" is unset (auto) or 0 (off) on llama-server: not known from this line
        assert "OLLAMA_FLASH_ATTENTION" not in got
        assert got["OLLAMA_CONTEXT_LENGTH"] is None and got["LLAMA_ARG_FIT_TARGET"] is None


@pytest.mark.parametrize("engine", ["legacy", "current"])
def test_the_model_process_line_says_what_is_in_effect(engine):
    digest = parse_log((DATA / f"server_start_{engine}.txt").read_text().splitlines())
    got = cmdline_settings(digest.cmdline)
    assert got["OLLAMA_NUM_PARALLEL"] == "4"
    if engine == "legacy":  # no flash attention on a CPU, so the runner keeps an f16 cache
        assert got == {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_KV_CACHE_TYPE": None, "OLLAMA_FLASH_ATTENTION": None}
        assert digest.cmdline["num_ctx"] == 1024  # --ctx-size is num_ctx x slots
    else:
        assert got == {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": None}


def test_flash_attention_off_on_llama_server_says_nothing_of_the_variable():
    # off is OLLAMA_FLASH_ATTENTION=0 or a device without flash attention
    off = cmdline_settings({"engine": "llama-server", "num_parallel": 1, "flash_attn": "off"})
    on = cmdline_settings({"engine": "llama-server", "num_parallel": 1, "flash_attn": "on"})
    assert "OLLAMA_FLASH_ATTENTION" not in off and on["OLLAMA_FLASH_ATTENTION"] == "1"
    assert cmdline_settings({"engine": None}) == {}


def test_a_model_start_before_the_server_restarted_is_another_runs():
    current = (DATA / "server_start_current.txt").read_text().splitlines()
    start, config = current[1], current[0]
    digest = parse_log([config, start, config])  # started, loaded a model, started again
    assert digest.cmdline is None and digest.server_config["OLLAMA_NUM_PARALLEL"] == "4"


def test_a_running_model_process_wins_over_the_log_and_each_setting_keeps_its_source():
    digest = parse_log((DATA / "server_start_legacy.txt").read_text().splitlines())
    live = ["/usr/lib/ollama/llama-server --model /b/sha256-1 -c 8192 -np 2 --flash-attn on "
            "--cache-type-k q4_0 --cache-type-v q4_0"]
    server = ForeignServer.of_readable(live, digest, why="denied")
    assert server.env()["OLLAMA_NUM_PARALLEL"] == "2" and server.source_of("OLLAMA_NUM_PARALLEL") == "cmdline"
    assert server.env()["OLLAMA_KV_CACHE_TYPE"] == "q4_0" and server.env()["OLLAMA_FLASH_ATTENTION"] == "1"
    assert server.source_of("OLLAMA_CONTEXT_LENGTH") == "log"
    assert server.source_of("OLLAMA_SCHED_SPREAD") == "unknown" and not server.knows("OLLAMA_SCHED_SPREAD")
    nothing = ForeignServer.of_readable([], None, why="denied")
    assert nothing.env() is None and nothing.why == "denied"


def test_a_wanted_setting_no_source_showed_is_not_in_effect_for_the_verdict():
    # the command line showed flash attention off on llama-server: 0 or no support, not known which
    server = ForeignServer.of_readable(["/x/llama-server --model /b -c 4096 -np 1 --flash-attn off"], None)
    wanted = measured_server_env(1, "q8_0")
    assert settings_to_change(server.env(), wanted, known=server.known) == \
        {"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "1"}
    env = _Env(server)
    with server_settings(env, wanted) as applied:
        assert applied is False
    with server_settings(env, measured_server_env(1, "f16")) as applied:
        assert applied is True  # one slot and an f16 cache were read in effect


@pytest.fixture
def ollama_with_a_model_process(tmp_path):
    """A process named ``ollama`` with a child named ``llama-server`` holding
    a model, as v0.30+ runs them (copies of this Python: the kernel's record
    of a process's name and arguments is what is read)."""
    import sys

    server_exe, model_exe = tmp_path / "ollama", tmp_path / "llama-server"
    shutil.copy(sys.executable, server_exe)
    shutil.copy(sys.executable, model_exe)
    child = (f"import subprocess, sys; p = subprocess.Popen([{str(model_exe)!r}, '-c', "
             f"'import time; time.sleep(30)', '--model', '/m/blobs/sha256-1', '-c', '16384', '-np', '4', "
             f"'--cache-type-k', 'q8_0', '--cache-type-v', 'q8_0', '--flash-attn', 'auto']); p.wait()")
    proc = subprocess.Popen([str(server_exe), "-c", child])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not model_cmdlines(proc.pid):
        time.sleep(0.05)
    yield proc
    for p in psutil.Process(proc.pid).children(recursive=True):
        p.kill()
    proc.kill()
    proc.wait()


def test_where_the_environment_is_denied_the_model_process_is_read(ollama_with_a_model_process, monkeypatch):
    pid = ollama_with_a_model_process.pid

    def denied(self):  # this test runs as root, whom no environment is denied
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "environ", denied)
    server = ForeignServer.of_process(pid)
    assert server.env() == {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_KV_CACHE_TYPE": "q8_0"}
    assert server.source == "cmdline" and "another user's" in server.why
    assert server.source_of("OLLAMA_FLASH_ATTENTION") == "cmdline"  # auto: unset, as read
    assert server.source_of("OLLAMA_CONTEXT_LENGTH") == "unknown"


def test_the_settings_line_names_each_source_in_the_users_language():
    from assistant.session.world import _settings_line
    from common import catalog

    server = ForeignServer.of_readable(["/x/llama-server --model /b -c 4096 -np 4 --flash-attn auto"], None)
    en = _settings_line(server)
    assert "OLLAMA_NUM_PARALLEL=4 (from its model process's command line)" in en
    assert "OLLAMA_CONTEXT_LENGTH not known" in en
    read = ForeignServer({"OLLAMA_NUM_PARALLEL": "2"}, source="environ")
    assert "OLLAMA_KV_CACHE_TYPE unset (from its environment; this version's default applies)" in \
        _settings_line(read)
    catalog.set_lang("zh")
    zh = _settings_line(server)
    assert "OLLAMA_NUM_PARALLEL=4（来自其模型进程的命令行）" in zh and "OLLAMA_CONTEXT_LENGTH 未知" in zh


def test_a_quantized_cache_already_in_effect_is_not_written_again():
    """The user's server runs OLLAMA_KV_CACHE_TYPE=q8_0 with flash attention
    unset: auto on llama-server, which a quantized cache works with. A config
    with a q8_0 cache changes neither (before: both were written, and
    OLLAMA_FLASH_ATTENTION=1 forced on what auto already decides)."""
    from assistant.session.loop import _server_env

    config = {"max_concurrency": 4, "kv_cache": "q8_0"}
    users = {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_KV_CACHE_TYPE": "q8_0"}
    assert _server_env(config, users, fa_auto=True) == {}
    # the legacy runner: unset is off, and a quantized cache needs it on
    assert _server_env(config, users, fa_auto=False) == {"OLLAMA_FLASH_ATTENTION": "1"}
    for server_env, written in (({}, {}), ({"OLLAMA_FLASH_ATTENTION": "1"}, {"OLLAMA_FLASH_ATTENTION": "1"}),
                                (None, {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KV_CACHE_TYPE": "q8_0",
                                        "OLLAMA_FLASH_ATTENTION": "1"})):
        result = sample_result(server_env=server_env)
        result["config"]["kv_cache"] = "q8_0"
        assert _active(render_files(build_config(result))["ollama.env"]) == written, server_env


def test_on_the_legacy_runner_a_quantized_cache_without_flash_attention_is_f16_in_effect():
    """v0.11.4 drops OLLAMA_KV_CACHE_TYPE=q8_0 without flash attention (none on
    a CPU): the server fact says f16 with what was asked, and a config on an
    f16 cache changes nothing on that server (before: the config said q8_0,
    the files wrote flash attention on, and the retest could not be verified)."""
    from assistant.session.loop import _server_env
    from probes.base import in_effect
    from probes.serverinfo import server_fact

    users = {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_KV_CACHE_TYPE": "q8_0"}
    legacy = server_fact("0.11.4", env=users, vram_total=0, local=True)
    assert legacy["kv_cache_type"] == "f16" and legacy["kv_cache_asked"] == "q8_0"
    current = server_fact("0.34.4", env=users, vram_total=0, local=True)
    assert current["kv_cache_type"] == "q8_0" and current["kv_cache_asked"] is None
    config = {"max_concurrency": 4, "kv_cache": "f16"}
    assert _server_env(config, in_effect(users, "runner")) == {}
    assert _server_env(config, in_effect(users, "llama-server")) == {"OLLAMA_KV_CACHE_TYPE": "f16"}
    on = dict(users, OLLAMA_FLASH_ATTENTION="1")
    assert in_effect(on, "runner") == on  # with flash attention on, the cache is what was asked


def test_a_boolean_variable_is_read_as_ollamas_envconfig_reads_it():
    """Go's ParseBool: "off" and "no" are not false spellings, so Ollama reads
    them as true (flash attention on); only unset, empty and 0/f/false are off."""
    from common.envbool import env_on
    from probes.serverinfo import server_fact

    assert [env_on(v) for v in ("1", "true", "T", "on", "off", "no", " 'false' ")] == [True] * 6 + [False]
    assert [env_on(v) for v in (None, "", "0", "f", "FALSE", "False")] == [False] * 6
    fact = server_fact("0.11.4", env={"OLLAMA_FLASH_ATTENTION": "off"}, vram_total=0, local=True)
    assert fact["flash_attention"] == "on"  # what v0.11.4 does with "off"
