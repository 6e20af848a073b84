"""The chat as a person meets it: `oomvet chat` in a real pseudo-terminal
against the rig's real Ollama, in Chinese and in English. The first message
carries the model, the budget and the context in free words; the session
must reach a verified config without asking anything that message already
answered."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from assistant.session import ui as _ui  # noqa: F401  (registers the question texts)
from common.catalog import t
from probes import context
from tests.integration.helpers import MiB, rig_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\r")
_PROMPT = re.compile(r"(?:你|you)> $")


def _talk(argv: list[str], first: str, timeout_s: float = 420.0) -> tuple[int, str, list[str]]:
    """Run the chat in a pty: answer the first prompt with ``first`` and every
    later prompt with Enter (the default). Returns (exit code, screen, prompts seen)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "80", "LINES": "40", "TERM": "xterm", "OOMVET_LANG": ""}
    env.pop("OLLAMA_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "assistant", "chat", *argv], stdin=slave, stdout=slave,
                            stderr=slave, cwd=ROOT, env=env, close_fds=True)
    os.close(slave)
    screen, said_first, answered, prompts = "", False, 0, []
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
                tail = screen.rsplit("\n", 1)[-1]
                if _PROMPT.search(tail) and screen.count("> ") > answered:
                    prompts.append(screen.rsplit("\n", 3)[-3:])
                    os.write(master, ((first if not said_first else "") + "\n").encode())
                    said_first, answered = True, screen.count("> ")
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            pytest.fail("the chat did not finish in time:\n" + screen[-3000:])
    finally:
        os.close(master)
    return proc.wait(timeout=30), screen, prompts


@pytest.fixture(scope="module")
def short_peak(rig):
    return context.run(rig_env(rig), "neohorse-1:q8_0", tiers=[2048]).facts[0]["peak"]


def _questions_answered_by_the_message(lang: str) -> list[str]:
    return [t(f"ui.q.{q}", lang) for q in ("model", "want_ctx", "budget", "keep_context")]


@pytest.mark.parametrize("lang,first", [
    ("zh", "neohorse-1:q8_0 只有 {mib}M 显存可用，上下文开到 8k 长文档就爆显存，上下文可以减少"),
    ("en", "neohorse-1:q8_0 runs out of memory with 8k context on long documents. I only have {mib} MiB "
           "of VRAM free; a smaller context is fine."),
])
def test_a_pty_chat_reaches_a_verified_config_without_asking_what_the_message_said(rig, short_peak, tmp_path,
                                                                                   lang, first):
    mib = (int(short_peak / 0.95) + 12 * MiB) // MiB  # 2048 fits; 8192 does not (as in test_chat_rig)
    rc, screen, _prompts = _talk(["--host", rig.host, "--auto", "--out", str(tmp_path), "--settle", "1"],
                                 first.format(mib=mib))
    for question in _questions_answered_by_the_message(lang):
        assert question not in screen, f"asked again: {question}\n{screen[-4000:]}"
    doc = yaml.safe_load((tmp_path / "oomvet.yaml").read_text())
    assert doc["model"] == "neohorse-1:q8_0" and doc["verified"] is True, screen[-4000:]
    assert doc["diagnosis"]["cause"] == "kv_cache", screen[-4000:]
    assert ("诊断：" if lang == "zh" else "Diagnosis:") in screen
    assert rc == 0, screen[-4000:]
