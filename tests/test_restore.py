"""restore(): the server as it was, even when a load the probe had started
lands after the first pass (Ctrl-C in the middle of a load).

Ollama answers an unload (``keep_alive: 0``, no prompt) with ``expireRunner``,
which only sees runners already loaded: a model still loading is not
unloaded, and shows up in ``/api/ps`` once its load is done. The fake below
does that on a clock the test moves; it is not oomvet's code.
"""
from __future__ import annotations

import pytest

from probes import base
from probes.base import restore
from common.errors import ProbeError
from probes.ollama_api import Generation, Loaded


class LateLoadServer:
    """A server holding ``loaded`` (name -> num_ctx), with loads under way
    (name -> (num_ctx, reads of /api/ps until it lands))."""

    def __init__(self, loaded: dict, loading: dict | None = None):
        self.host = "http://fake"
        self.loaded = dict(loaded)
        self.loading = dict(loading or {})
        self.calls: list[str] = []

    def _tick(self) -> None:
        for name, (ctx, left) in list(self.loading.items()):
            if left <= 1:
                del self.loading[name]
                self.loaded[name] = ctx
            else:
                self.loading[name] = (ctx, left - 1)

    def ps(self) -> list[Loaded]:
        self._tick()
        return [Loaded(name=n, size_bytes=1, size_vram_bytes=0, context_length=c, quantization=None) for n, c in self.loaded.items()]

    def unload(self, name: str, wait_s: float = 30.0) -> None:
        self.calls.append(f"unload {name}")
        self.loaded.pop(name, None)  # a model still loading is not touched

    def load(self, name: str, options=None) -> Generation:
        self.calls.append(f"load {name} {options}")
        self.loaded[name] = (options or {}).get("num_ctx")
        return Generation(ok=True)


def users_model() -> list[Loaded]:
    return [Loaded(name="neohorse-1:q4_1", size_bytes=1, size_vram_bytes=0, context_length=1024, quantization=None)]


def test_a_quiet_restore_unloads_the_probe_model_and_reloads_the_users_at_its_context():
    server = LateLoadServer({"neohorse-1:q8_0": 4096})
    restore(server, users_model())
    assert server.loaded == {"neohorse-1:q4_1": 1024}
    assert server.calls == ["unload neohorse-1:q8_0", "load neohorse-1:q4_1 {'num_ctx': 1024}"]


def test_without_watching_a_load_that_lands_late_stays_loaded():
    # what the restore did before it watched: the user is left with the probe's model
    server = LateLoadServer({"neohorse-1:q4_1": 1024}, loading={"neohorse-1:q8_0": (8192, 6)})
    restore(server, users_model(), watch_s=0.0)  # three looks at /api/ps: before it lands
    server.ps(), server.ps(), server.ps()
    assert "neohorse-1:q8_0" in server.loaded


def test_watching_after_a_cut_probe_unloads_a_load_that_landed_late():
    server = LateLoadServer({"neohorse-1:q4_1": 1024}, loading={"neohorse-1:q8_0": (8192, 3)})
    restore(server, users_model(), watch_s=1.0)
    assert server.loaded == {"neohorse-1:q4_1": 1024}
    assert server.calls == ["unload neohorse-1:q8_0"]


def test_a_server_that_keeps_loading_is_reported_not_called_restored():
    server = LateLoadServer({"neohorse-1:q4_1": 1024}, loading={"neohorse-1:q8_0": (8192, 2)})
    original = server.unload

    def unload_and_restart(name, wait_s=30.0):  # someone else's client keeps asking for it
        original(name, wait_s)
        server.loading[name] = (8192, 2)

    server.unload = unload_and_restart
    with pytest.raises(ProbeError, match="kept changing.*neohorse-1:q8_0.*was neohorse-1:q4_1"):
        restore(server, users_model(), watch_s=1.0, passes=3)


def test_a_reload_the_server_refuses_is_a_failed_restore():
    server = LateLoadServer({"neohorse-1:q8_0": 4096})
    server.load = lambda name, options=None: Generation(ok=False, error="model requires more system memory")
    with pytest.raises(ProbeError, match="nothing loaded.*was neohorse-1:q4_1"):
        restore(server, users_model())


def test_restoring_watches_only_when_the_probe_was_cut_with_a_request_on_the_server(monkeypatch):
    seen = []
    monkeypatch.setattr(base, "restore", lambda api, before, watch_s=0.0: seen.append(watch_s))

    class Api(LateLoadServer):
        busy = 0

        def settle(self, limit_s):
            return True

        def in_flight(self):
            return self.busy

    class Env:
        api = Api({})
        cancel = __import__("threading").Event()

        def changed(self, *a, **k):
            pass

    with base.restoring(Env()):
        pass  # a probe that ended by itself: nothing of it can still be loading
    with pytest.raises(KeyboardInterrupt), base.restoring(Env()):
        raise KeyboardInterrupt  # cut between requests: nothing of it is on the server
    Env.api.busy = 1
    with pytest.raises(KeyboardInterrupt), base.restoring(Env()):
        raise KeyboardInterrupt  # cut with a request on the server: watch for its load
    assert seen == [0.0, 0.0, base.RESTORE_WATCH_S]
