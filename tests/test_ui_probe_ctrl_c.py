"""The chat's Ctrl-C during a probe: the probe (and its restore of the
server) has ended before the chat goes on."""
from __future__ import annotations

import io
import os
import signal
import threading
import time

import pytest
from rich.console import Console

from assistant.session.ui import ChatUI
from probes.base import Cancelled


class Env:
    limit_bytes = None
    progress = None

    def __init__(self):
        self.cancel = threading.Event()


def test_ctrl_c_waits_for_the_probe_to_put_the_server_back():
    env = Env()
    restored = threading.Event()

    def probe():
        env.cancel.wait(10)  # the probe sees the cancel at its next check...
        time.sleep(1.0)      # ...and puts the server back, which takes a while
        restored.set()
        raise Cancelled("stopped")

    ui = ChatUI(Console(file=io.StringIO(), width=100), stream=io.StringIO(""), lang="en")
    threading.Timer(0.4, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    with pytest.raises(Cancelled):
        ui.run_probe("context", probe, env)
    assert restored.is_set()  # not still running behind the chat's back
