"""Verified means measured, end to end on the GPU simulator: a memory source
that fails, a server that goes away mid-session, and the files written then.

The simulator stands in for the GPU and Ollama; the memory source is the
simulated NVML, wrapped where a test needs it to fail the way a lost GPU or
a driver mismatch does (every call raises)."""
from __future__ import annotations

from pathlib import Path

import yaml

from assistant.files.deliver import deliver
from assistant.intake import parse as parse_intake
from assistant.session.loop import Session
from assistant.session.ui import AutoUI
from assistant.session.world import WorldOptions, open_world
from probes.ollama_api import Ollama

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _world(scenario: str) -> WorldOptions:
    return WorldOptions(simulate=str(SCENARIOS / scenario), timeout_s=120.0)


class LostGpu:
    """A memory reader whose device went away: every reading raises, as NVML
    does with NVML_ERROR_GPU_IS_LOST; the device description still answers."""

    def __init__(self, reader):
        self._reader = reader
        self.name = reader.name
        self.calls = 0

    def info(self):
        return self._reader.info()

    def probe(self):
        return self._reader.probe()

    def read(self):
        self.calls += 1
        raise RuntimeError("NVML: GPU is lost")

    def processes(self):
        raise RuntimeError("NVML: GPU is lost")

    def close(self):
        self._reader.close()


class ServerGoesAway(AutoUI):
    """Answers from the file; after ``after`` probes, the server stops answering
    (its URL then points at a port nothing listens on)."""

    def __init__(self, answers, world, after: int):
        super().__init__(answers, quiet=True)
        self.world, self.after, self.ran = world, after, 0

    def run_probe(self, label, work, env):
        if self.ran == self.after:
            self.world.env.api.__init__("http://127.0.0.1:9", timeout_s=5)
        self.ran += 1
        return work()


def _session(world, answers, ui=None) -> Session:
    return Session(world=world, ui=ui or AutoUI(answers, quiet=True), intake=parse_intake(answers["symptom"]),
                   model=answers["model"], lang="en", settle_s=0.2, answers=answers)


def _answers(name: str) -> dict:
    return yaml.safe_load((SCENARIOS / f"{name}.answers.yaml").read_text())


def test_a_memory_source_that_fails_every_reading_verifies_nothing(tmp_path):
    answers = _answers("kv_cache")
    with open_world(_world("kv_cache.yaml"), log=lambda m: None) as world:
        lost = LostGpu(world.env.reader)
        world.env.reader = lost
        outcome = _session(world, answers).run()
    result = outcome.result
    assert lost.calls > 0
    assert outcome.exit_code == 1
    assert result["verified"] is False and result["fits"] is False and result["config"] is None
    assert "memory readings failed" in result["unverified"] or "idle reading failed" in result["unverified"]
    loads = [f for f in result["facts"] if f["kind"] == "load"]
    assert loads and all(f["measured"] is False and f["used_after"] is None for f in loads)
    doc, _ = deliver(tmp_path, result)
    written = yaml.safe_load((tmp_path / "oomvet.yaml").read_text())
    assert written["verified"] is False and written["unverified"] == result["unverified"]


def test_a_server_that_goes_away_mid_session_writes_what_was_measured(tmp_path):
    answers = _answers("kv_cache")
    with open_world(_world("kv_cache.yaml"), log=lambda m: None) as world:
        host = world.env.api.host
        outcome = _session(world, answers, ServerGoesAway(answers, world, after=2)).run()
        Ollama(host).version()  # the simulator itself still runs: only our URL went dead
    result = outcome.result
    assert outcome.exit_code == 3
    assert result["verified"] is False
    assert "the session stopped: no Ollama server answers" in result["unverified"]
    assert result["diagnosis"]["advice_key"] == "broken_off"
    kinds = [f["kind"] for f in result["facts"]]
    assert kinds.count("reproduction") == 1 and kinds.count("load") == 1  # what the two probes read is kept
    deliver(tmp_path, result)
    report = (tmp_path / "report.md").read_text()
    assert "baseline" in report


def test_a_measured_session_on_the_same_scenario_is_verified():
    answers = _answers("kv_cache")
    with open_world(_world("kv_cache.yaml"), log=lambda m: None) as world:
        outcome = _session(world, answers).run()
    assert outcome.exit_code == 0, outcome.result["unverified"]
    assert outcome.result["verified"] is True and outcome.result["unverified"] is None
    assert all(f.get("measured") is not False for f in outcome.result["facts"])


def test_a_url_no_ollama_of_this_machine_serves_is_not_local():
    import socket

    from assistant.session.world import local_server

    with socket.socket() as sock:  # a proxy, a tunnel: something listens, but not Ollama
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert local_server(f"http://127.0.0.1:{sock.getsockname()[1]}") is None
    assert local_server("http://gpu-box.example:11434") is None


def test_a_server_elsewhere_is_read_from_its_own_api_ps_and_marked_blind():
    from assistant.session.world import remote_selection

    with open_world(_world("kv_cache.yaml"), log=lambda m: None) as world:
        selection = remote_selection(world.host)
        assert selection.reader.name == "ollama-ps" and selection.why_code == "remote"
        assert selection.reader.read().used_bytes == 0  # nothing loaded: the server reports nothing held
