"""The fault matrix on the real rig (bench/fault_matrix.py prints the table).

Each case breaks the rig's Ollama, or the network in front of it, or the disk,
while a diagnosis is in a given probe, and checks what a user is promised:
one line and a README exit code, no traceback, the journal readable, no
partial file, the server as it was. The last test SIGKILLs a session halfway
through the context step and resumes it: the config must be the one an
uninterrupted run finds.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.fault_matrix import ANSWERS, CASES, MODEL, _started, run_case

# In the default run (CI's) on the current engine: 10-20 minutes on 2 cores
# (19 cases: 18 faults and the SIGKILL resume); bench/fault_matrix.py prints the table.
pytestmark = [pytest.mark.integration, pytest.mark.faults]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fault_is_survived_with_one_line_and_nothing_lost(rig, tmp_path, case):
    row = run_case(rig, case, tmp_path)
    shown = json.dumps(row, indent=1, default=str)  # whole: pytest cuts a dict's repr short
    assert row["injected"], shown
    assert not row["traceback"] and row["exit"] in (0, 1, 2, 3, 130), shown
    assert row["journal_ok"] and not row["partial"], shown
    assert row["server_as_before"] or row["restore_cmd_printed"], shown
    assert row["settled"] is not False, shown  # the restore waited for what the server was still doing


def _diagnose(rig, tmp_path, state: Path, out: Path) -> subprocess.Popen:
    answers = tmp_path / "answers.yaml"
    answers.write_text(json.dumps(ANSWERS))
    return subprocess.Popen(
        [sys.executable, "-m", "assistant", "diagnose", "--host", rig.host, "--model", MODEL, "--auto",
         "--answers", str(answers), "--settle", "1", "--out", str(out), "--json"],
        cwd=ROOT, env=dict(os.environ, OOMVET_STATE_DIR=str(state)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def test_sigkill_halfway_through_the_context_step_then_resume_gives_the_same_config(rig, tmp_path):
    whole = _diagnose(rig, tmp_path, tmp_path / "s1", tmp_path / "o1")
    stdout, stderr = whole.communicate(timeout=1800)
    assert whole.returncode in (0, 1), stderr[-2000:]
    expected = json.loads(stdout)["config"]

    state = tmp_path / "s2"
    cut = _diagnose(rig, tmp_path, state, tmp_path / "o2")
    deadline = time.monotonic() + 1800
    while not _started(state / "journal.sqlite3", "context"):
        assert cut.poll() is None and time.monotonic() < deadline, cut.communicate()
        time.sleep(0.2)
    time.sleep(3)  # halfway through its tiers on the 135M model
    cut.send_signal(signal.SIGKILL)
    cut.communicate(timeout=60)
    listed = json.loads(subprocess.run([sys.executable, "-m", "assistant", "sessions", "--json"], cwd=ROOT,
                                       env=dict(os.environ, OOMVET_STATE_DIR=str(state)),
                                       capture_output=True, text=True).stdout)["sessions"]
    assert listed[0]["state"] == "cut"
    resumed = subprocess.run([sys.executable, "-m", "assistant", "resume", listed[0]["id"]], cwd=ROOT,
                             env=dict(os.environ, OOMVET_STATE_DIR=str(state)), capture_output=True, text=True,
                             timeout=1800)
    assert resumed.returncode == whole.returncode, resumed.stderr[-2000:]
    assert "the context probe was cut in the middle" in resumed.stderr
    assert json.loads(resumed.stdout)["config"] == expected
