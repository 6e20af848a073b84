"""How long the chat makes a person wait before it listens, and before it
answers the first message (issue 33: each under a second on two cores).

`oomvet chat` runs in a real pseudo-terminal, as a person starts it. Two
times per run, by the wall clock of this process:

- **start to first prompt**: from the process's start to the prompt
  ("you / 你> ") on the screen: the interpreter, the imports, the greeting;
- **message to first answer**: from the first message written (Enter
  included) to the first line of the read-back ("I read" / "我从你的消息里读到"):
  reading the message, the learned readers included (loaded from the cache
  folder, or fitted there on the very first run), and the sureness of each
  field. The read-back comes before the server is reached, so no server is
  needed: the chat is pointed at a port nothing listens on, and stopped
  once it has answered.

Each message is sent the moment the prompt shows (a person types for a few
seconds; the background load of the learned readers gets none of that here),
so the times are the worst a fast typist sees. The first run of each batch
uses an empty cache folder (the fit a new install pays once); the rest the
warm one.

    .venv/bin/python bench/chat_start.py [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import pty
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\r")
MESSAGES = {
    "zh": "我们的卡 48G，只打算给这个模型留 30G，别的服务要用剩下的。neohorse-1:q8_0 一加载就 OOM",
    "en": "It copes with three people at once; a fourth makes it crawl. neohorse-1:q8_0 on a 24GB card",
}
ANSWERED = re.compile(r"I read|我从你的消息里读到")


def one_run(message: str, cache: str, timeout_s: float = 60.0) -> tuple[float, float]:
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "80", "LINES": "40", "TERM": "xterm", "OOMVET_CACHE_DIR": cache,
           "OOMVET_STATE_DIR": tempfile.mkdtemp(prefix="oomvet-state-")}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "assistant", "chat", "--host", "http://127.0.0.1:9",
                             "--out", tempfile.mkdtemp(prefix="oomvet-out-")],
                            stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env, close_fds=True)
    os.close(slave)
    screen, prompt_at, sent_at, answer_at = "", None, None, None
    try:
        while time.monotonic() - started < timeout_s and answer_at is None:
            ready, _, _ = select.select([master], [], [], 0.01)
            if not ready:
                continue
            chunk = os.read(master, 65536).decode("utf-8", "replace")
            now = time.monotonic()
            screen += _ANSI.sub("", chunk)
            if prompt_at is None and re.search(r"(?:你|you)> $", screen):
                prompt_at = now
                sent_at = time.monotonic()
                os.write(master, (message + "\n").encode())
            elif sent_at is not None and ANSWERED.search(screen.split(message, 1)[-1]):
                answer_at = now
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.close(master)
    if prompt_at is None or answer_at is None:
        raise SystemExit("the chat did not answer in time:\n" + screen[-2000:])
    return prompt_at - started, answer_at - sent_at


def main() -> None:
    ap = argparse.ArgumentParser(description="time from start to the chat's first prompt, and to its first answer")
    ap.add_argument("--runs", type=int, default=5, help="runs per language with a warm cache (default 5)")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    for lang, message in MESSAGES.items():
        cache = tempfile.mkdtemp(prefix="oomvet-cache-")
        cold = one_run(message, cache)
        warm = [one_run(message, cache) for _ in range(args.runs)]
        print(f"\n{lang}: {message}")
        print(f"  empty cache (the one-time fit): start to prompt {cold[0]:.2f} s, message to answer {cold[1]:.2f} s")
        for i, name in enumerate(("start to prompt", "message to answer")):
            values = [w[i] for w in warm]
            print(f"  warm cache, {name:17s}: median {statistics.median(values):.2f} s, "
                  f"max {max(values):.2f} s over {len(values)} runs")


if __name__ == "__main__":
    main()
