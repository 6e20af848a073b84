"""Issue 30: a conversation, not a form. Scripted chats against the GPU
simulator: natural replies are taken as meant, a question in the middle is
answered and the pending question asked again, a stopped probe offers to run
again, skip or stop, and a chat is a journalled session that ``oomvet
resume`` goes on with."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from assistant.cli import main
from assistant.journal.read import Entry, _live
from tests.chat_driver import run_chat

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
# "slow" and "partly on the GPU" say what, not when: the chat asks when (one extra reply, "", keeps its reading)
WEIGHTS = "neohorse-1:f16 is painfully slow, ollama ps shows it only partly on the GPU. 8k context is plenty."
CONSENT = "Next I will run the baseline probe"


def _flat(screen: str) -> str:
    return re.sub(r"\s*\n\s*", " ", screen)


def _sessions(capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["sessions", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["sessions"]


def test_en_natural_replies_and_questions_mid_chat(tmp_path):
    rc, screen = run_chat(
        ["--simulate", str(SCENARIOS / "weights.yaml"), "--out", str(tmp_path), "--settle", "0.2"],
        [WEIGHTS, "", "sure, go ahead", "what does KV cache mean?", "wait, why do you need a baseline?",
         "yes please", "ok, go for it", "alright, do it", "yep, run it", "fine", "sure"])
    flat = _flat(screen)
    assert rc == 0, screen
    assert "could not read that" not in flat  # every reply was taken as meant
    assert "KV cache: the memory where the model keeps" in flat
    assert "The baseline tells the two causes apart" in flat
    assert "Start from conservative settings" in flat  # and the rule's own sentence for the waiting step
    # each question was answered, then the pending consent asked again: asked three times
    assert flat.count(CONSENT) == 3
    doc = yaml.safe_load((tmp_path / "oomvet.yaml").read_text())
    assert doc["verified"] is True and doc["quant_type"] != "F16"


def test_zh_natural_replies_and_questions_mid_chat(tmp_path):
    rc, screen = run_chat(
        ["--simulate", str(SCENARIOS / "kv_cache.yaml"), "--out", str(tmp_path), "--settle", "0.2"],
        ["4060 8G 显存，用 neohorse-1:q4_K_M，上下文开到 32k 就 OOM，短的没问题",
         "好的，可以", "好的呀", "等一下，为什么要先缩上下文？", "num_ctx 是什么意思", "行，跑吧",
         "不用，短一点也行", "可以的", "好", "好", "好", "好"])
    flat = _flat(screen)
    assert rc == 0, screen
    assert "无法把这个回答理解为" not in flat
    assert "先调上下文再考虑量化" in flat  # the method's reason for the context step
    assert "num_ctx：上下文长度" in flat
    doc = yaml.safe_load((tmp_path / "oomvet.yaml").read_text())
    assert doc["verified"] is True and doc["diagnosis"]["cause"] == "kv_cache"


def test_a_correction_mid_chat_is_taken_as_the_newest_answer(tmp_path):
    rc, screen = run_chat(
        ["--simulate", str(SCENARIOS / "kv_cache.yaml"), "--out", str(tmp_path), "--settle", "0.2"],
        ["neohorse-1:q4_K_M crashes with long prompts, I need 16k", "actually I need 4k of context, sorry",
         "", "", "", "", "", "", "", ""])
    flat = _flat(screen)
    assert "Noted, from now on: context 4096" in flat
    doc = yaml.safe_load((tmp_path / "oomvet.yaml").read_text())
    assert doc["max_context_len"] >= 4096 and doc["verified"] is True


class _StopOnce:
    """A probe stopped with Ctrl-C the first time it runs (the chat's probe
    panel turns Ctrl-C into Cancelled once the server is put back:
    tests/test_ui_probe_ctrl_c.py), as measured after that."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, *args, **kwargs):
        from probes.base import Cancelled

        self.calls += 1
        if self.calls == 1:
            raise Cancelled("probe stopped by the user")
        return self.real(*args, **kwargs)


def test_a_stopped_probe_can_be_run_again_and_is_then_evidence(tmp_path, monkeypatch):
    from probes import quant

    stop = _StopOnce(quant.run)
    monkeypatch.setattr(quant, "run", stop)
    rc, screen = run_chat(["--simulate", str(SCENARIOS / "weights.yaml"), "--out", str(tmp_path), "--settle", "0.2"],
                          [WEIGHTS, "", "", "", "", "run it again", "", "", "", ""])
    assert stop.calls == 2 and rc == 0, screen
    assert "The quant probe was stopped; nothing it measured is used." in _flat(screen)
    assert yaml.safe_load((tmp_path / "oomvet.yaml").read_text())["verified"] is True


def test_a_stopped_probe_can_be_skipped_as_if_declined(tmp_path, monkeypatch):
    from probes import quant

    stop = _StopOnce(quant.run)
    monkeypatch.setattr(quant, "run", stop)
    rc, screen = run_chat(["--simulate", str(SCENARIOS / "weights.yaml"), "--out", str(tmp_path), "--settle", "0.2"],
                          [WEIGHTS, "", "", "", "", "跳过", "", "", "", ""])
    assert stop.calls == 1, screen
    doc = yaml.safe_load((tmp_path / "oomvet.yaml").read_text())
    quant_steps = [s for s in doc["steps"] if s.get("probe") == "quant"]
    assert quant_steps and quant_steps[0]["summary"] == "skipped by the user"
    flat = _flat(screen)
    assert "No lower-bit quantization" not in flat  # a skip is no verdict on the levels
    assert "the lower-bit quantization was declined" in flat
    assert doc["diagnosis"]["advice_key"] == "quant_declined"


def test_a_chat_stopped_mid_probe_is_a_session_that_resume_finishes(tmp_path, monkeypatch, capsys):
    from probes import quant

    stop = _StopOnce(quant.run)
    monkeypatch.setattr(quant, "run", stop)
    out = tmp_path / "out"
    rc, screen = run_chat(["--simulate", str(SCENARIOS / "weights.yaml"), "--out", str(out), "--settle", "0.2"],
                          [WEIGHTS, "", "", "", "", "stop here"])
    assert rc == 130, screen
    rows = _sessions(capsys)
    assert len(rows) == 1 and rows[0]["state"] == "stopped" and rows[0]["verified"] is False
    sid = rows[0]["id"]
    assert f"oomvet resume {sid}" in _flat(screen)
    # a new process, as a user would run it the next day; the replies come on stdin
    done = subprocess.run([sys.executable, "-m", "assistant", "resume", sid], input="\n" * 6, text=True,
                          capture_output=True, cwd=ROOT, env=dict(os.environ, COLUMNS="100"), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run the quant probe" in _flat(done.stdout)  # the stopped probe runs again
    assert "Next I will run the reproduce probe" not in _flat(done.stdout)  # what was measured is kept
    rows = _sessions(capsys)
    assert rows[0]["id"] == sid and rows[0]["state"] == "finished" and rows[0]["verified"] is True
    doc = yaml.safe_load((out / "oomvet.yaml").read_text())
    assert doc["verified"] is True and doc["quant_type"] != "F16"
    assert [s["probe"] for s in doc["steps"] if s.get("probe")].count("reproduce") == 1


def _e(seq: int, kind: str, **body) -> Entry:
    return Entry(seq, kind, body)


def test_a_resume_drops_what_a_users_stop_left_and_keeps_what_came_after():
    entries = [_e(1, "start"), _e(2, "fact", batch=1, i=0, of=1, fact={}), _e(3, "probe_started", probe="quant"),
               _e(4, "user_stopped", probe="quant"), _e(5, "step"), _e(6, "fact", batch=2, i=0, of=1, fact={}),
               _e(7, "finished"), _e(8, "resumed"), _e(9, "probe_started", probe="quant"),
               _e(10, "fact", batch=3, i=0, of=1, fact={}), _e(11, "probe_started", probe="stability"),
               _e(12, "user_stopped", probe="stability"), _e(13, "finished")]
    assert [e.seq for e in _live(entries)] == [1, 2, 8, 9, 10]
