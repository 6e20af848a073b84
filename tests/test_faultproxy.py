"""The fault proxy against a tiny local HTTP server that answers like Ollama does.

The server streams NDJSON with chunked encoding (as Ollama's Go server does for
/api/generate) and answers /api/ps with one JSON document, so each fault is
seen the way an Ollama client would see it.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.faultproxy import FaultProxy

PS = {"models": [{"name": "neohorse:q8", "size": 123456, "size_vram": 0, "context_length": 4096}]}
LINES = [{"response": f"word{i} ", "done": False} for i in range(6)] + [{"response": "", "done": True}]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = json.dumps(PS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        sent = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for obj in LINES:
            line = json.dumps(dict(obj, echo=sent.decode())).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def upstream():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _stream(url: str) -> list[dict]:
    with httpx.Client(timeout=10) as c, c.stream("POST", url + "/api/generate", json={"p": 1}) as r:
        return [json.loads(ln) for ln in r.iter_lines() if ln]


def test_pass_mode_forwards_both_ways_unchanged(upstream):
    with FaultProxy(target=upstream, mode="pass") as p:
        assert p.url.startswith("http://127.0.0.1:")
        assert httpx.get(p.url + "/api/ps").json() == PS
        got = _stream(p.url)
        assert [g["response"] for g in got] == [x["response"] for x in LINES]
        assert got[0]["echo"] == '{"p":1}'
        # keep-alive survives: two requests on one connection
        with httpx.Client() as c:
            assert c.get(p.url + "/api/ps").json() == PS
            assert c.get(p.url + "/api/ps").json() == PS


def test_http500_hits_only_the_chosen_paths(upstream):
    with FaultProxy(target=upstream, mode="http500", paths=("/api/ps",)) as p:
        r = httpx.get(p.url + "/api/ps")
        assert r.status_code == 500 and "injected 500" in r.json()["error"]
        assert len(_stream(p.url)) == len(LINES)
        assert [s.action for s in p.history] == ["http500", "pass"]


def test_skip_lets_the_first_matching_requests_through(upstream):
    with FaultProxy(target=upstream, mode="http500", skip=2) as p:
        codes = [httpx.get(p.url + "/api/ps").status_code for _ in range(4)]
    assert codes == [200, 200, 500, 500]
    with FaultProxy(target=upstream, mode="http500", skip=1, count=2) as p:
        codes = [httpx.get(p.url + "/api/ps").status_code for _ in range(5)]
    assert codes == [200, 500, 500, 200, 200]  # a burst, then the server is fine again


def test_malformed_answers_200_with_json_that_does_not_parse(upstream):
    with FaultProxy(target=upstream, mode="malformed") as p:
        r = httpx.get(p.url + "/api/ps")
        assert r.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(r.content)
        with pytest.raises(json.JSONDecodeError):
            _stream(p.url)


def test_cut_ends_a_stream_in_the_middle_of_a_line(upstream):
    with FaultProxy(target=upstream, mode="cut") as p:
        seen: list[bytes] = []
        with pytest.raises(httpx.RemoteProtocolError):
            with httpx.Client(timeout=10) as c, c.stream("POST", p.url + "/api/generate", json={}) as r:
                for chunk in r.iter_raw():
                    seen.append(chunk)
        data = b"".join(seen)
        first, _, partial = data.partition(b"\n")
        assert json.loads(first)["response"] == "word0 "
        assert partial and b"\n" not in partial  # the second line, cut halfway
        with pytest.raises(json.JSONDecodeError):
            json.loads(partial)
        # a plain (Content-Length) answer is cut halfway through its body
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.get(p.url + "/api/ps")


def test_drip_delivers_everything_slowly(upstream):
    with FaultProxy(target=upstream, mode="drip", paths=("/api/ps",), drip_bytes=16,
                    drip_interval_s=0.02) as p:
        t0 = time.monotonic()
        r = httpx.get(p.url + "/api/ps")
        took = time.monotonic() - t0
    assert r.json() == PS
    size = len(r.content)
    assert took >= (size // 16) * 0.02 * 0.8
    with pytest.raises(httpx.ReadTimeout):
        with FaultProxy(target=upstream, mode="drip", drip_bytes=1, drip_interval_s=0.5) as p:
            httpx.get(p.url + "/api/ps", timeout=0.3)


def test_a_reply_that_drips_past_the_timeout_ends_the_call_in_time(upstream):
    """httpx bounds each read; a reply that keeps dripping bytes faster than
    that would never time out. The Ollama wrapper bounds the whole reply."""
    from common.errors import ServerUnreachable
    from probes.memory.ollama_ps import OllamaPsReader
    from probes.ollama_api import Ollama

    with FaultProxy(target=upstream, mode="drip", drip_bytes=4, drip_interval_s=0.1) as p:
        api = Ollama(p.url, timeout_s=1.0)
        t0 = time.monotonic()
        with pytest.raises(ServerUnreachable, match=r"did not finish a reply within 1 s"):
            api.generate("neohorse:q8", "hello")
        assert time.monotonic() - t0 < 2.0
        with pytest.raises(ServerUnreachable, match=r"within 1 s"):
            api.ps()
        # /api/ps as the memory source of a remote server: a dripping reply is a failed reading
        t0 = time.monotonic()
        assert OllamaPsReader(p.url).read().used_bytes is None
        assert time.monotonic() - t0 < 4.0
    fast = Ollama(f"http://{upstream}", timeout_s=1.0).generate("neohorse:q8", "hello")
    assert fast.ok and fast.text.startswith("word0 ")


def test_mode_can_change_while_running(upstream):
    with FaultProxy(target=upstream) as p:
        assert httpx.get(p.url + "/api/ps").status_code == 200
        p.mode = "http500"
        assert httpx.get(p.url + "/api/ps").status_code == 500
        p.mode = "pass"
        assert httpx.get(p.url + "/api/ps").status_code == 200


def _port_open(port: int) -> bool:
    s = socket.socket()
    s.settimeout(0.5)
    try:
        return s.connect_ex(("127.0.0.1", port)) == 0
    finally:
        s.close()


def test_stops_by_itself_after_its_lifetime_and_on_exit(upstream):
    p = FaultProxy(target=upstream, lifetime_s=0.5).start()
    assert _port_open(p.port)
    deadline = time.monotonic() + 5
    while p.running and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.4)
    assert not p.running and not _port_open(p.port)
    p.stop()
    with FaultProxy(target=upstream) as q:
        port = q.port
        assert _port_open(port)
    assert not _port_open(port)


def test_unreachable_target_closes_the_client_connection():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    with FaultProxy(target=f"127.0.0.1:{dead}", mode="http500", paths=("/nothing",)) as p:
        with pytest.raises(httpx.TransportError):
            httpx.get(p.url + "/api/ps", timeout=5)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        FaultProxy(target="127.0.0.1:1", mode="explode")


def test_settle_waits_for_a_generation_the_caller_gave_up_on(upstream):
    """A load cut by Ctrl-C goes on in the server; the restore waits for it
    (Ollama.settle) so its unload is not overtaken by the load."""
    from common.errors import ServerUnreachable
    from probes.ollama_api import Ollama

    with FaultProxy(target=upstream, mode="drip", paths=("/api/generate",), drip_bytes=8,
                    drip_interval_s=0.05) as p:
        api = Ollama(p.url, timeout_s=0.2)  # the streamed reply takes over a second here
        with pytest.raises(ServerUnreachable):
            api.generate("m", "hello")
        assert api.in_flight() == 1  # still being answered
        assert api.settle(0.0) is False  # no wait: it is still there
        assert api.settle(10.0) is True and not api.in_flight()


def test_a_read_the_caller_gave_up_on_is_not_waited_for(upstream):
    """/api/ps dripping over a slow network changes nothing on the server: the
    restore does not wait for it (it would wait out a reply of minutes)."""
    from common.errors import ServerUnreachable
    from probes.ollama_api import Ollama

    with FaultProxy(target=upstream, mode="drip", paths=("/api/ps",), drip_bytes=8, drip_interval_s=0.05) as p:
        api = Ollama(p.url, timeout_s=0.2)
        with pytest.raises(ServerUnreachable):
            api.ps()
        assert api.in_flight() == 0 and api.settle(0.0) is True


def test_a_server_dripping_its_answer_does_not_count_as_answering(upstream):
    from probes.ollama_api import Ollama

    with FaultProxy(target=upstream, mode="pass") as p:
        assert Ollama(p.url).answers(2.0) is True
    with FaultProxy(target=upstream, mode="drip") as p:
        started = time.monotonic()
        assert Ollama(p.url).answers(0.5) is False
        assert time.monotonic() - started < 2.0  # asked briefly, not for a whole --timeout
    assert Ollama("http://127.0.0.1:9").answers(0.5) is False  # nobody listens there
