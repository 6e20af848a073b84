"""The rig itself, on each engine: a real Ollama (v0.34.4 or v0.11.4) serving
three real NeoHorse-1 stand-ins."""
from __future__ import annotations

import pytest

from probes import baseline
from probes.ollama_api import Ollama
from oomrig import CURRENT_VERSION, TAGS
from tests.integration.helpers import KV_PER_TOKEN, MiB, rig_env

pytestmark = pytest.mark.integration


def test_rig_serves_the_pinned_version_on_a_private_port(rig):
    api = Ollama(rig.host)
    assert api.version() == rig.version
    assert not rig.host.endswith(":11434")


def test_devices_on_the_rig_names_the_server_and_the_source(rig, capsys):
    """``oomvet devices --rig``: the engine the rig runs, and /api/ps's kind."""
    import json

    from assistant.cli import main

    assert main(["devices", "--rig", "--rig-version", rig.version, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["server"]["version"] == rig.version and data["server"]["local"] is True
    engine = "llama-server" if rig.version == CURRENT_VERSION else "runner"
    assert data["server"]["engine"] == engine
    assert data["ollama"]["sizes"] == ("measured" if engine == "llama-server" else "estimate")
    assert data["selected"] == "host" and data["ollama"]["reachable"]


@pytest.mark.parametrize("tag,level", sorted(TAGS.items()))
def test_each_tag_reports_its_level_and_answers_sensibly(rig, tag, level):
    api = Ollama(rig.host)
    assert api.show(tag).quantization == level
    gen = api.generate(tag, "What is the capital of France? Answer in one sentence.",
                       {"temperature": 0, "seed": 1, "num_predict": 40, "num_ctx": 1024})
    api.unload(tag)
    assert gen.ok, gen.error
    assert "Paris" in gen.text
    assert gen.done_reason in ("stop", "length")


def test_latest_is_the_f16_tag(rig):
    assert Ollama(rig.host).show("neohorse-1:latest").quantization == "F16"


def test_load_raises_runner_memory_and_unload_returns_to_idle(rig):
    env = rig_env(rig)
    result = baseline.run(env, "neohorse-1:q8_0", num_ctx=2048, settle_s=1.0)
    fact = result.facts[0]
    assert fact["answered"], fact
    assert fact["used_after"] > 100 * MiB  # the model process holds the weights and the KV cache
    # restoring() unloaded it: the model process is gone, so usage is back to the idle reading
    assert env.used() <= fact["used_idle"] + 8 * MiB
    assert env.api.ps() == []


def test_kv_cache_growth_from_2048_to_8192_matches_the_formula(rig):
    env = rig_env(rig)
    after = {}
    for ctx in (2048, 8192):
        after[ctx] = baseline.run(env, "neohorse-1:q8_0", num_ctx=ctx, settle_s=0.5).facts[0]["used_after"]
    expected = KV_PER_TOKEN * (8192 - 2048)  # 135 MiB
    grew = after[8192] - after[2048]
    assert abs(grew - expected) <= 0.25 * expected, (grew / MiB, expected / MiB)


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGINT ignored"])
def test_rig_serve_stops_the_server_it_started(rig, stop):
    """``scripts/rig.py serve`` ends on Ctrl-C or SIGTERM, and takes its Ollama with it
    (a SIGTERM once ended the script and left the server running); "SIGINT ignored" is
    a serve started in the background by a shell without job control."""
    import re
    import signal
    import subprocess
    import sys
    import urllib.request
    from pathlib import Path

    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if stop == "SIGINT ignored" else None
    proc = subprocess.Popen([sys.executable, "scripts/rig.py", "serve", "--rig-version", rig.version],
                            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=ignore)
    try:
        host = re.search(r" at (http://[\d.:]+);", proc.stdout.readline()).group(1)
        with urllib.request.urlopen(f"{host}/api/version", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM if stop == "SIGTERM" else signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    with pytest.raises(OSError):  # nothing listens there any more
        urllib.request.urlopen(f"{host}/api/version", timeout=5)
