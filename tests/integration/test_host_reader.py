"""The host reader against the rig's real Ollama: the runner process is found
under the server, its memory rises when a model loads and falls when it
unloads, and the sampler catches the load."""
from __future__ import annotations

import time

import ollama
import psutil
import pytest

from probes.memory.host import HostReader
from probes.memory.ollama_ps import LABEL, ollama_estimate
from probes.sampler import Sampler
from probes.units import fmt_size

pytestmark = pytest.mark.integration

MODEL = "neohorse-1:q8_0"
MiB = 1 << 20


def _wait(predicate, timeout_s: float = 30.0, every_s: float = 0.2):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return predicate()


def _unload_all(client: ollama.Client, reader: HostReader) -> None:
    for m in client.ps().models:
        client.generate(model=m.model, prompt="", keep_alive=0)
    assert _wait(lambda: not client.ps().models), "models still loaded after keep_alive=0"

    def runners_gone():
        reader.refresh()
        return not reader.processes()
    assert _wait(runners_gone), "the runner process did not exit after unload"


def test_runner_memory_is_found_and_rises_on_load(rig):
    client = ollama.Client(host=rig.host)
    reader = HostReader(server_pid=rig.server_pid)
    _unload_all(client, reader)
    idle = reader.read().used_bytes
    assert idle == 0  # no runner, nothing counted

    with Sampler(reader, hz=20) as sampler:
        sampler.mark("load")
        response = client.generate(model=MODEL, prompt="", keep_alive="5m")
        sampler.mark("loaded")
        reader.refresh()
        time.sleep(0.5)
    assert response.done_reason == "load"
    summary = sampler.summary

    procs = reader.processes()
    assert len(procs) == 1, procs
    runner = procs[0]
    assert runner.name == {"runner": "ollama runner", "llama-server": "llama-server"}[rig.engine]
    assert rig.server_pid in [p.pid for p in psutil.Process(runner.pid).parents()]
    loaded = reader.read().used_bytes
    assert loaded - idle >= 100 * MiB, f"runner holds only {fmt_size(loaded)} after load"
    assert summary.peak_bytes >= loaded - 16 * MiB
    assert summary.readings >= 10 and summary.rise_bytes >= 100 * MiB

    # Ollama's own figure is shown beside the measurement, labelled as an estimate
    (est,) = ollama_estimate(client.ps().models)
    assert est.label == LABEL and est.size_bytes > 0 and est.size_vram_bytes == 0
    print(f"\nrunner RSS after load {fmt_size(loaded)}, sampler peak {fmt_size(summary.peak_bytes)} "
          f"at {summary.hz_achieved} Hz; {LABEL}: {fmt_size(est.size_bytes)} "
          f"(context {est.context_length})")

    client.generate(model=MODEL, prompt="", keep_alive=0)
    _unload_all(client, reader)
    assert reader.read().used_bytes < loaded - 100 * MiB
