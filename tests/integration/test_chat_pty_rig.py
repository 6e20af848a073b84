"""The chat as a person meets it: `oomvet chat` in a real pseudo-terminal
against the rig's real Ollama, in Chinese and in English. The first message
carries the model, the budget and the context in free words; the session
must reach a verified config without asking anything that message already
answered (issue 33): it says what it read, and asks only the fields it is
unsure of, each once: here the card's size said beside the part left for
the model, and "a smaller context is fine". The replies are a person's
(issue 30): natural yes-es, a "what is" and a "why" question, a Ctrl-C in
the middle of the context probe and "stop here"; `oomvet sessions` lists
the stopped chat and `oomvet resume` finishes it, in a new process, to a
verified config."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from assistant.session import readback as _readback, ui as _ui  # noqa: F401  (register the question texts)
from common.catalog import t
from probes import context
from tests.integration.helpers import MiB, rig_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\r")
_PROMPT = re.compile(r"(?:你|you)> $")  # the first prompt, "you / 你> ", ends as the Chinese one does
#: the reply that stands for Ctrl-C: sent as SIGINT once the named probe's panel is up
CTRL_C = "^C"


def _talk(argv: list[str], replies: list[str], env_extra: dict | None = None, interrupt: str | None = None,
          timeout_s: float = 420.0) -> tuple[int, str]:
    """Run ``oomvet ARGV`` in a pty: answer each prompt with the next reply,
    Enter once they run out. ``interrupt``: a line of the probe panel
    (its title) at which the chat gets one SIGINT, as Ctrl-C sends it.
    Returns (exit code, screen)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "80", "LINES": "40", "TERM": "xterm", "OOMVET_LANG": "", **(env_extra or {})}
    env.pop("OLLAMA_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "assistant", *argv], stdin=slave, stdout=slave,
                            stderr=slave, cwd=ROOT, env=env, close_fds=True)
    os.close(slave)
    screen, answered, queue = "", 0, list(replies)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536).decode("utf-8", "replace")
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                screen += _ANSI.sub("", chunk)
                if interrupt and interrupt in screen:
                    os.kill(proc.pid, signal.SIGINT)  # Ctrl-C, mid-probe
                    interrupt = None
                tail = screen.rsplit("\n", 1)[-1]
                if _PROMPT.search(tail) and screen.count("> ") > answered:
                    os.write(master, ((queue.pop(0) if queue else "") + "\n").encode())
                    answered = screen.count("> ")
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            pytest.fail("the chat did not finish in time:\n" + screen[-3000:])
    finally:
        os.close(master)
    return proc.wait(timeout=30), screen


@pytest.fixture(scope="module")
def short_peak(rig):
    return context.run(rig_env(rig), "neohorse-1:q8_0", tiers=[2048]).facts[0]["peak"]


_READBACK_QUESTIONS = ("phase", "model", "budget", "want_ctx", "want_parallel", "keep_context")


def _asked(field: str, lang: str) -> str:
    """The start of the read-back's question about ``field``, up to its choices."""
    text = t(f"readback.q.{field}", lang, choices="", values="{values}", first="", second="")
    return text.split("[1]")[0] + "[1]" if "[1]" in text else text.split("{values}")[0]


def _questions_answered_by_the_message(lang: str) -> list[str]:
    return [t(f"ui.q.{q}", lang) for q in ("model", "want_ctx", "budget", "keep_context")]


#: per language: the first message (the budget filled in), then the replies to
#: the consent prompts in order: a "what is" and a "why" before the first yes,
#: natural yes-es, and "stop here" after the Ctrl-C in the context probe
CHATS = {
    "zh": ("neohorse-1:q8_0 显卡 24G，只给它留 {mib}M 显存，上下文开到 8k 长文档就爆显存，上下文可以减少",
           ["", "", "KV 缓存是什么意思？", "为什么要先跑我的设置？", "好的，可以", "行，跑吧", "可以的", "先停吧"],
           "KV 缓存：", "先原样运行你自己的设置", "探测 上下文 运行中"),
    "en": ("neohorse-1:q8_0 runs out of memory with 8k context on long documents. My card has 24 GB but I can "
           "only give this model {mib} MiB; a smaller context is fine.",
           ["", "", "what does KV cache mean?", "hm, why run my setup first?", "sure, go ahead", "yes please", "ok",
            "stop here"],
           "KV cache: the memory", "Your own setup runs first", "probe context running"),
}
#: the two replies before the consents: Enter keeps the reading of each unsure field (the part left for the
#: model; the context may shrink), asked in this order
UNSURE = ("budget", "keep_context")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_pty_chat_in_natural_words_stopped_mid_probe_is_resumed_to_a_verified_config(rig, short_peak, tmp_path,
                                                                                         lang):
    first, replies, glossary, why, panel = CHATS[lang]
    mib = (int(short_peak / 0.95) + 12 * MiB) // MiB  # 2048 fits; 8192 does not (as in test_chat_rig)
    state = {"OOMVET_STATE_DIR": str(tmp_path / "state")}
    out = tmp_path / "out"
    rc, screen = _talk(["chat", "--host", rig.host, "--out", str(out), "--settle", "1"],
                       [first.format(mib=mib), *replies], state, interrupt=panel)
    for question in _questions_answered_by_the_message(lang):
        assert question not in screen, f"asked again: {question}\n{screen[-4000:]}"
    # what was read is said back, each unsure field asked once, and nothing else about the message
    assert t("readback.heading", lang) in screen
    asked = [q for q in _READBACK_QUESTIONS if _asked(q, lang) in screen]
    assert asked == list(UNSURE), asked
    for q in UNSURE:
        assert screen.count(_asked(q, lang)) == 1, q
    assert t("ui.bad_answer", lang, what=t("answers.what.yesno", lang)) not in screen  # every reply read as meant
    flat = re.sub(r"\s", "", screen)  # the terminal wraps at 80 columns
    assert re.sub(r"\s", "", glossary) in flat and re.sub(r"\s", "", why) in flat, screen[-4000:]
    assert re.sub(r"\s", "", t("ui.after_stop", lang, probe=t("probe.name.context", lang)))[:20] in flat, screen[-4000:]
    assert rc == 130, screen[-4000:]
    assert re.sub(r"\s", "", t("ui.stopped_user", lang, probe=t("probe.name.context", lang))) in flat, screen[-4000:]
    listed = subprocess.run([sys.executable, "-m", "assistant", "sessions", "--json"], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, **state}, check=True)
    rows = json.loads(listed.stdout)["sessions"]
    assert [r["state"] for r in rows] == ["stopped"], rows
    rc, screen = _talk(["resume", rows[0]["id"]], [], state)
    doc = yaml.safe_load((out / "oomvet.yaml").read_text())
    assert doc["model"] == "neohorse-1:q8_0" and doc["verified"] is True, screen[-4000:]
    assert doc["evidence"]["limit"] <= mib * MiB  # the part left for the model, not the card's 24 GB
    assert doc["diagnosis"]["cause"] == "kv_cache", screen[-4000:]
    assert ("诊断：" if lang == "zh" else "Diagnosis:") in screen
    assert rc == 0, screen[-4000:]
    # the setup and the baseline were measured once, before the stop: the resume kept them
    probes = [s.get("probe") for s in doc["steps"]]
    assert probes.count("reproduce") == 1 and probes.count("baseline") == 1, probes
