"""``Ollama.unload`` waits for ``/api/ps`` to drop the model (the real unload
is asynchronous), and says so in one error when it never does."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from common.errors import ProbeError
from probes.ollama_api import Ollama


class _Client:
    """An Ollama client whose unload lands after ``lag`` more looks at /api/ps (None: never)."""

    def __init__(self, lag: int | None):
        self.lag, self.looks, self.calls = lag, 0, []

    def generate(self, **kwargs):
        self.calls.append(kwargs)

    def ps(self):
        self.looks += 1
        still = self.lag is None or self.looks <= self.lag
        row = SimpleNamespace(model="m:latest", size=1, size_vram=1, context_length=2048, details=None, digest=None)
        return SimpleNamespace(models=[row] if still else [])


def test_unload_returns_once_the_model_leaves_api_ps():
    client = _Client(lag=3)
    Ollama("http://127.0.0.1:9", client=client).unload("m", wait_s=5)
    assert client.calls == [{"model": "m", "keep_alive": 0}]
    assert client.looks == 4


def test_unload_that_never_lands_is_one_error_after_the_wait():
    client = _Client(lag=None)
    started = time.monotonic()
    with pytest.raises(ProbeError, match=r"m was still loaded 0s after asking Ollama to unload it"):
        Ollama("http://127.0.0.1:9", client=client).unload("m", wait_s=0.3)
    assert 0.25 < time.monotonic() - started < 3
    assert client.looks >= 3
