"""Ctrl-C in the middle of a measurement: the server is left as it was, no
partial file is written, and the user sees one line, not a traceback."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.ollama_api import Ollama

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_diagnosis_restores_the_server_and_writes_nothing(rig, tmp_path, sig):
    api = Ollama(rig.host)
    api.load("neohorse-1:q4_1", {"num_ctx": 1024})  # a model the user had loaded before
    before = sorted((m.name, m.context_length) for m in api.ps())
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "assistant", "diagnose", "--host", rig.host, "--model", "neohorse-1:q8_0", "--auto",
         "--out", str(out), "--settle", "30"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(m.name == "neohorse-1:q8_0" for m in api.ps()):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == "oomvet: interrupted / 已中断"
    assert sorted((m.name, m.context_length) for m in api.ps()) == before
    assert not out.exists()
    api.unload("neohorse-1:q4_1")
