"""The current engine for real: the rig's Ollama v0.34.4 holds each model in
an upstream ``llama-server`` child, started with the context and slots the
request asked for; ``/api/ps`` is llama-server's measured size, a few MiB
from the process's RSS; the host reader counts that process; a context above
the trained one is clamped; ``LLAMA_ARG_*`` settings reach llama-server."""
from __future__ import annotations

import time

import psutil
import pytest

from probes.memory.host import HostReader, is_ollama_runner
from probes.ollama_api import Ollama
from oomrig import CURRENT_VERSION
from probes.units import fmt_size
from tests.integration.helpers import MiB

# these facts hold for the current engine only
pytestmark = [pytest.mark.integration, pytest.mark.parametrize("rig", ["current"], indirect=True)]

MODEL = "neohorse-1:q8_0"
TRAINED_CTX = 8192  # SmolLM2-135M's llama.context_length


def _model_processes(rig) -> list[psutil.Process]:
    out = []
    for child in psutil.Process(rig.server_pid).children(recursive=True):
        try:
            if is_ollama_runner(child.cmdline()):
                out.append(child)
        except psutil.Error:
            pass
    return out


def _flag(cmdline: list[str], name: str) -> str | None:
    return cmdline[cmdline.index(name) + 1] if name in cmdline else None


def _loaded(rig, api: Ollama, options: dict) -> tuple[psutil.Process, list[str]]:
    api.unload_all()
    gen = api.load(MODEL, options)
    assert gen.ok, gen.error
    (proc,) = _model_processes(rig)
    return proc, proc.cmdline()


def _wait_gone(rig, timeout_s: float = 15.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not _model_processes(rig):
            return True
        time.sleep(0.2)
    return False


def test_rig_serves_v0_34_4_with_its_llama_server(rig):
    api = Ollama(rig.host)
    assert api.version() == CURRENT_VERSION
    assert rig.engine == "llama-server"
    assert rig.paths.llama_server.is_file()
    assert not rig.host.endswith(":11434")


def test_model_runs_in_a_llama_server_child_started_with_the_requested_context(rig):
    api = Ollama(rig.host)
    proc, cmd = _loaded(rig, api, {"num_ctx": 2048})
    try:
        assert rig.server_pid in [p.pid for p in proc.parents()]
        assert cmd[0] == str(rig.paths.llama_server)
        assert _flag(cmd, "--model").startswith(str(rig.paths.models_dir / "blobs"))
        assert (_flag(cmd, "-c"), _flag(cmd, "-np")) == ("2048", "1")
        (row,) = api.ps()
        assert row.context_length == 2048
    finally:
        api.unload_all()
    assert _wait_gone(rig), "llama-server still running after unload"


def test_parallel_slots_multiply_the_context_llama_server_gets(rig):
    api = Ollama(rig.host)
    rig.server.restart({"OLLAMA_NUM_PARALLEL": "2"})
    try:
        _, cmd = _loaded(rig, api, {"num_ctx": 2048})
        assert (_flag(cmd, "-c"), _flag(cmd, "-np")) == ("4096", "2")
        (row,) = api.ps()
        assert row.context_length == 2048  # per slot
    finally:
        api.unload_all()
        rig.server.restart({"OLLAMA_NUM_PARALLEL": "1"})


def test_api_ps_size_is_measured_and_close_to_the_llama_server_rss(rig):
    api = Ollama(rig.host)
    proc, _ = _loaded(rig, api, {"num_ctx": 2048})
    try:
        time.sleep(0.5)
        rss = proc.memory_info().rss
        (row,) = api.ps()
        print(f"\n/api/ps size {fmt_size(row.size_bytes)}, llama-server RSS {fmt_size(rss)}, "
              f"difference {(rss - row.size_bytes) / MiB:+.1f} MiB")
        assert row.size_vram_bytes == 0  # CPU only
        # size is llama-server's own buffer total (weights + KV + compute); RSS adds the program itself
        assert abs(rss - row.size_bytes) <= 40 * MiB, (rss / MiB, row.size_bytes / MiB)
    finally:
        api.unload_all()


def test_host_reader_counts_the_llama_server_process(rig):
    api = Ollama(rig.host)
    api.unload_all()
    assert _wait_gone(rig)
    reader = HostReader(server_pid=rig.server_pid)
    assert reader.read().used_bytes == 0  # only discovery ran: nothing holds a model
    proc, _ = _loaded(rig, api, {"num_ctx": 2048})
    try:
        reader.refresh()
        (seen,) = reader.processes()
        assert (seen.pid, seen.name) == (proc.pid, "llama-server")
        assert seen.used_bytes == pytest.approx(proc.memory_info().rss, rel=0.05)
        assert reader.read().used_bytes >= 150 * MiB  # Q8_0 weights alone are 136 MiB
    finally:
        api.unload_all()
    assert _wait_gone(rig)
    reader.refresh()
    assert reader.processes() == [] and reader.read().used_bytes == 0


def test_num_ctx_above_the_trained_context_is_clamped_silently(rig):
    api = Ollama(rig.host)
    log_start = rig.server.log_path.stat().st_size
    _, cmd = _loaded(rig, api, {"num_ctx": 100_000})
    try:
        assert _flag(cmd, "-c") == str(TRAINED_CTX)
        (row,) = api.ps()
        assert row.context_length == TRAINED_CTX
        gen = api.generate(MODEL, "Say hello.", {"num_ctx": 100_000, "num_predict": 4, "temperature": 0})
        assert gen.ok, gen.error  # no error reaches the client
    finally:
        api.unload_all()
    with open(rig.server.log_path, "rb") as f:
        f.seek(log_start)
        log = f.read().decode(errors="replace")
    assert "requested context size too large for model" in log


def test_kv_offload_switch_reaches_llama_server_through_its_environment(rig):
    # llama.cpp common/arg.cpp: --no-kv-offload is the boolean LLAMA_ARG_KV_OFFLOAD
    api = Ollama(rig.host)
    rig.server.restart({"LLAMA_ARG_KV_OFFLOAD": "0"})
    try:
        proc, cmd = _loaded(rig, api, {"num_ctx": 2048})
        environ = proc.environ()
        # Ollama does not turn it into a flag: llama-server reads it from its environment
        assert environ.get("LLAMA_ARG_KV_OFFLOAD") == "0"
        assert not {"--no-kv-offload", "-nkvo", "--kv-offload", "-kvo"} & set(cmd)
        gen = api.generate(MODEL, "Say hello.", {"num_ctx": 2048, "num_predict": 4, "temperature": 0})
        assert gen.ok, gen.error
        api.unload_all()
        # and llama-server parses it: a value that is not a boolean stops the load
        rig.server.restart({"LLAMA_ARG_KV_OFFLOAD": "maybe"})
        log_start = rig.server.log_path.stat().st_size
        bad = api.load(MODEL, {"num_ctx": 2048})
        assert not bad.ok and not bad.oom, bad
        assert "llama-server process has terminated" in bad.error
        with open(rig.server.log_path, "rb") as f:
            f.seek(log_start)
            assert b'error while handling environment variable "LLAMA_ARG_KV_OFFLOAD"' in f.read()
    finally:
        api.unload_all()
        rig.server.restart({"LLAMA_ARG_KV_OFFLOAD": None})


def test_a_second_prompt_fills_llama_servers_prompt_cache_and_the_tier_keeps_the_fills_peak(rig):
    """llama-server keeps the previous prompt's KV in a host-RAM prompt cache
    (``--cache-ram``, 8192 MiB by default) once a different prompt arrives. The
    context probe's first tier sends two prompts (the release check); its peak
    is the fill's, so the tiers stay comparable and grow with num_ctx, and the
    second prompt's rise is kept beside it as ``second_request_peak``."""
    from probes import context
    from tests.integration.helpers import KV_PER_TOKEN, rig_env

    result = context.run(rig_env(rig), "neohorse-1:q8_0", tiers=[2048, 2304])
    short, medium = sorted(result.facts, key=lambda f: f["num_ctx"])
    assert short["measured"] and medium["measured"], result.notes
    assert medium["peak"] >= short["peak"], (fmt_size(short["peak"]), fmt_size(medium["peak"]))
    rise = short["second_request_peak"] - short["peak"]
    cached = KV_PER_TOKEN * short["prompt_tokens"]  # the first prompt's KV, copied into the cache
    assert 0.5 * cached <= rise <= 1.5 * cached, (fmt_size(rise), fmt_size(cached))
    assert medium["second_request_peak"] is None  # one prompt only past the first tier
