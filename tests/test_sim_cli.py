"""``oomvet simulate``: serves until Ctrl-C and prints its URL; a bad scenario
is one line and exit 2."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from assistant.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_malformed_scenario_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "scenarios" / "weights.yaml").read_text().replace("weights: 14.9GiB", "weights: 14.9 gigs"))
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"oomvet: {bad}: models.neohorse-1:f16.weights: not a size: '14.9 gigs' (e.g. 8GiB, 600MiB, 4.58GiB)"]


def test_missing_scenario_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"oomvet: {tmp_path / 'none.yaml'}: no such scenario file"]


def test_simulate_serves_until_interrupted():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLLAMA_")}
    proc = subprocess.Popen([sys.executable, "-m", "assistant", "simulate", str(ROOT / "scenarios" / "kv_cache.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**env, "OOMVET_LANG": "en"})
    try:
        first = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", first).group(0)
        with urllib.request.urlopen(f"{url}/api/version", timeout=10) as resp:
            assert json.loads(resp.read()) == {"version": "0.11.4"}
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "RTX 4060" in first + out and "Simulator stopped." in out

