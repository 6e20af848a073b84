"""``wait_until_up`` waits for a server that is not answering yet, and stops
at once at a port where something other than Ollama answers."""
from __future__ import annotations

import http.server
import threading
import time

import pytest

from common.errors import ServerUnreachable
from probes.server import free_port, wait_until_up


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b"<html>not ollama</html>"

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def _serve(handler) -> tuple[http.server.HTTPServer, str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_something_else_on_the_port_ends_the_wait_at_once():
    server, host = _serve(_Handler)
    try:
        started = time.monotonic()
        with pytest.raises(ServerUnreachable, match="did not answer as Ollama does"):
            wait_until_up(host, timeout_s=30)
        assert time.monotonic() - started < 5
    finally:
        server.shutdown()


def test_the_version_is_read_once_the_server_answers():
    class Ollama(_Handler):
        body = b'{"version": "0.34.4"}'

    server, host = _serve(Ollama)
    try:
        assert wait_until_up(host, timeout_s=10) == "0.34.4"
    finally:
        server.shutdown()


def test_nobody_listening_is_one_error_after_the_timeout():
    host = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ServerUnreachable, match=r"did not answer within 1s"):
        wait_until_up(host, timeout_s=1)
    assert 0.9 < time.monotonic() - started < 5
