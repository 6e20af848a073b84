"""A server not on this machine, for real: the rig behind a loopback proxy.

oomvet then finds no Ollama process behind the URL (the proxy listens, not
the server), so it must not read this machine's memory: it takes what the
server reports in /api/ps, says so, and never calls the result verified."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from assistant.session.world import local_server
from tests.faultproxy import FaultProxy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _target(rig) -> str:
    parts = urlsplit(rig.host)
    return f"{parts.hostname}:{parts.port}"


def test_the_rig_itself_is_a_local_server(rig):
    assert local_server(rig.host) == rig.server_pid


def test_behind_a_proxy_no_local_reading_is_used_and_nothing_is_verified(rig, tmp_path):
    # 2048 is enough to show what a blind source does; the server's default 4096 only cost time
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump({"want_ctx": 2048, "lang": "en"}))
    with FaultProxy(target=_target(rig), mode="pass", lifetime_s=600) as proxy:
        assert local_server(proxy.url) is None
        proc = subprocess.run(
            [sys.executable, "-m", "assistant", "diagnose", "--host", proxy.url, "--model", "neohorse-1",
             "--budget", "2GiB", "--auto", "--settle", "1", "--json", "--out", str(tmp_path / "out"),
             "--answers", str(answers), "--lang", "en"],
            capture_output=True, text=True, cwd=ROOT, timeout=900)
        relayed = len(proxy.history)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert report["verified"] is False
    assert "not measurements" in report["unverified"] and "/api/ps" in report["unverified"]
    assert "no Ollama process of this machine serves" in proc.stderr
    assert relayed > 0  # every answer, /api/ps's figures too, came through the proxy from the server itself
    doc = yaml.safe_load((tmp_path / "out" / "oomvet.yaml").read_text())
    assert doc["verified"] is False and "reports in /api/ps" in doc["unverified"]
    assert doc["evidence"]["device"]["source"] == "ollama-ps"
