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
from common.errors import ProbeError, ServerUnreachable
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


class HiccupServer(LateLoadServer):
    """A server behind a network that fails the first ``fails`` reads of
    /api/ps as a dropped or dripping reply would (ServerUnreachable), then
    answers again."""

    def __init__(self, loaded: dict, fails: int):
        super().__init__(loaded)
        self.fails = fails

    def ps(self) -> list[Loaded]:
        if self.fails:
            self.fails -= 1
            raise ServerUnreachable("the Ollama server at http://fake did not finish a reply within 8 s")
        return super().ps()

    def settle(self, limit_s):
        return True

    def in_flight(self):
        return 0


def _restoring_env(api):
    import threading

    class Env:
        cancel = threading.Event()
        entries: list = []

        def changed(self, event, **data):
            self.entries.append((event, data))

    env = Env()
    env.api = api
    return env


def test_a_network_hiccup_during_the_restore_is_tried_again_and_the_server_put_back(monkeypatch):
    monkeypatch.setattr(base, "RESTORE_RETRY_PAUSE_S", 0.0)
    server = HiccupServer({"neohorse-1:q4_1": 1024}, fails=0)
    env = _restoring_env(server)
    with base.restoring(env):
        server.loaded = {"neohorse-1:q8_0": 4096}  # what the probe loaded
        server.fails = 2  # the first two tries of the restore meet the hiccup
    assert server.loaded == {"neohorse-1:q4_1": 1024}
    assert env.entries[-1] == ("restored", {"key": env.entries[0][1]["key"], "settled": True, "tries": 3})


def test_a_restore_that_fails_every_try_is_reported_with_how_often_it_was_tried(monkeypatch):
    monkeypatch.setattr(base, "RESTORE_RETRY_PAUSE_S", 0.0)
    server = HiccupServer({"neohorse-1:q4_1": 1024}, fails=0)
    env = _restoring_env(server)
    with pytest.raises(ServerUnreachable), base.restoring(env):
        server.loaded = {"neohorse-1:q8_0": 4096}
        server.fails = base.RESTORE_TRIES
    event, data = env.entries[-1]
    assert event == "restore_failed" and data["tries"] == base.RESTORE_TRIES
    assert server.loaded == {"neohorse-1:q8_0": 4096}  # nothing pretended: it was not put back


class HungServer(HiccupServer):
    """A server that stopped answering (SIGSTOP): every call waits out the
    timeout; ``answers()`` is the short question asked after one did."""

    def __init__(self, loaded: dict):
        super().__init__(loaded, fails=0)
        self.hung = False
        self.asked: list[float] = []

    def ps(self) -> list[Loaded]:
        if self.hung:
            self.calls.append("ps")
            raise ServerUnreachable("the Ollama server at http://fake stopped answering")
        return super().ps()

    def answers(self, within_s: float) -> bool:
        self.asked.append(within_s)
        return not self.hung


@pytest.mark.parametrize("hung", [True, False], ids=["hung", "answers-again"])
def test_after_a_timeout_only_a_server_that_answers_again_is_put_back(monkeypatch, hung):
    monkeypatch.setattr(base, "RESTORE_RETRY_PAUSE_S", 0.0)
    server = HungServer({"neohorse-1:q4_1": 1024})
    env = _restoring_env(server)
    expected = "did not answer again within 3 s" if hung else "within 20 s"
    with pytest.raises(ServerUnreachable, match=expected), base.restoring(env):
        server.loaded = {"neohorse-1:q8_0": 4096}
        server.hung = hung
        raise ServerUnreachable("the Ollama server at http://fake did not finish a reply within 20 s")
    assert server.asked == [base.HUNG_CHECK_S]
    if hung:  # no restore call waited on it: the failure is recorded for the restore command
        event, data = env.entries[-1]
        assert server.calls == [] and event == "restore_failed" and "did not answer again" in data["reason"]
    else:
        assert server.loaded == {"neohorse-1:q4_1": 1024}
