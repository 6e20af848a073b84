"""A loopback proxy that puts a misbehaving network between oomvet and a real Ollama.

Tests and ``bench/fault_matrix.py`` point oomvet at ``proxy.url`` instead of
the rig's server. In ``pass`` mode every byte goes through untouched: the
server then looks like one that is not on this machine (no ollama process
listens on the proxy's port). The other modes break what a real server or
network breaks: ``http500`` answers chosen paths with a 500, ``malformed``
returns the real answer as JSON that does not parse, ``cut`` closes the
connection in the middle of a line of the response, ``drip`` hands the real
response over a few bytes at a time. A fault can wait for the ``skip``-th
matching request, last for ``count`` requests (a burst), and the mode can be changed while the proxy runs
(``proxy.mode = "cut"``), so a probe can be hit halfway. The proxy stops
by itself after ``lifetime_s`` so that a forgotten one cannot outlive a run.

    with FaultProxy(target="127.0.0.1:11434", mode="http500", paths=("/api/ps",)) as p:
        Ollama(p.url).ps()   # -> the 500, as the server would send one
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

MODES = ("pass", "http500", "malformed", "cut", "drip")

_HEAD_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Seen:
    """One request the proxy handled: what was asked and what it did to it."""

    method: str
    path: str
    action: str  # "pass" or the mode that was applied
    at: float = 0.0  # seconds after the proxy started


class FaultProxy:
    """``with FaultProxy(target="127.0.0.1:PORT", mode="pass") as p: p.url``."""

    def __init__(self, target: str, mode: str = "pass", *, paths: tuple[str, ...] | None = None,
                 skip: int = 0, count: int | None = None, lifetime_s: float = 300.0, drip_bytes: int = 8,
                 drip_interval_s: float = 0.05, io_timeout_s: float = 120.0):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        host, _, port = target.rpartition(":")
        self.target = (host or "127.0.0.1", int(port))
        self.mode = mode
        self.paths = tuple(paths) if paths else None  # None: every path
        self.skip = skip
        self.count = count  # None: every matching request after the skipped ones; else a burst of this many
        self.lifetime_s = lifetime_s
        self.drip_bytes = max(1, drip_bytes)
        self.drip_interval_s = drip_interval_s
        self.io_timeout_s = io_timeout_s
        self.history: list[Seen] = []
        self._matched = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self.port = 0

    # -- lifecycle ---------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._sock is not None and not self._stop.is_set()

    def start(self) -> "FaultProxy":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.settimeout(0.2)  # the accept loop looks at the stop flag this often
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._started = time.monotonic()
        self._deadline = self._started + self.lifetime_s
        self._spawn(self._accept_loop)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _close(c)
        for t in list(self._threads):
            if t is not threading.current_thread():
                t.join(timeout=2)
        if self._sock is not None:
            _close(self._sock)

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _age(self) -> float:
        return round(time.monotonic() - self._started, 1)

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True, name="faultproxy")
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            if time.monotonic() > self._deadline:
                self._stop.set()
                break
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            conn.settimeout(self.io_timeout_s)
            with self._lock:
                self._conns.add(conn)
            self._spawn(self._serve, conn)
        _close(self._sock)
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _close(c)

    # -- one client connection --------------------------------------------

    def _serve(self, client: socket.socket) -> None:
        try:
            if self.mode == "pass":
                self._relay_raw(client)
            else:
                # one request per connection: the answer says Connection: close
                self._serve_http(client)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(client)
            _close(client)

    def _upstream(self) -> socket.socket:
        up = socket.create_connection(self.target, timeout=self.io_timeout_s)
        with self._lock:
            self._conns.add(up)
        return up

    def _relay_raw(self, client: socket.socket) -> None:
        up = self._upstream()

        def pump(src, dst):
            try:
                while not self._stop.is_set():
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        back = threading.Thread(target=pump, args=(up, client), daemon=True)
        back.start()
        with self._lock:
            self.history.append(Seen("-", "-", "pass", self._age()))
        pump(client, up)
        back.join(timeout=self.io_timeout_s)
        with self._lock:
            self._conns.discard(up)
        _close(up)

    def _serve_http(self, client: socket.socket) -> None:
        head, rest = _read_head(client)
        if head is None:
            return
        lines = head.split(b"\r\n")
        method, path, _ = (lines[0].decode("latin-1").split(" ", 2) + ["", ""])[:3]
        headers = [ln for ln in lines[1:] if ln]
        length = _header_int(headers, b"content-length") or 0
        body = rest
        while len(body) < length:
            data = client.recv(65536)
            if not data:
                break
            body += data
        mode = self._decide(path)
        with self._lock:
            self.history.append(Seen(method, path.split("?")[0], mode, self._age()))
        if mode == "http500":
            payload = b'{"error":"faultproxy: injected 500 Internal Server Error"}'
            client.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(payload) + payload)
            return
        up = self._upstream()
        try:
            kept = [h for h in headers if not h.lower().startswith((b"connection:", b"keep-alive:"))]
            up.sendall(lines[0] + b"\r\n" + b"\r\n".join(kept + [b"Connection: close"]) + b"\r\n\r\n" + body)
            if mode == "pass":
                _copy(up, client)
            elif mode == "malformed":
                self._send_malformed(up, client)
            elif mode == "cut":
                self._send_cut(up, client)
            elif mode == "drip":
                self._send_drip(up, client)
        finally:
            with self._lock:
                self._conns.discard(up)
            _close(up)

    def _decide(self, path: str) -> str:
        """The fault for this request, or "pass" (other paths, or not yet ``skip`` requests in)."""
        mode = self.mode
        if mode == "pass":
            return "pass"
        if self.paths is not None and not path.split("?")[0].startswith(self.paths):
            return "pass"
        with self._lock:
            self._matched += 1
            n = self._matched
        if n <= self.skip or (self.count is not None and n > self.skip + self.count):
            return "pass"
        return mode

    # -- the faults --------------------------------------------------------

    def _send_malformed(self, up: socket.socket, client: socket.socket) -> None:
        head, body = _read_response(up)
        if head is None:
            return
        # the real answer with its tail replaced: ",}" never parses after any JSON prefix
        broken = body[: max(1, len(body) * 2 // 3)].rstrip(b"\n") + b",}\n"
        status = head.split(b"\r\n", 1)[0]
        ctype = _header(head.split(b"\r\n")[1:], b"content-type") or b"application/json"
        client.sendall(status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: %d\r\n"
                       b"Connection: close\r\n\r\n" % len(broken) + broken)

    def _send_cut(self, up: socket.socket, client: socket.socket) -> None:
        head, rest = _read_head(up)
        if head is None:
            return
        client.sendall(head + b"\r\n\r\n")
        chunked = (_header(head.split(b"\r\n")[1:], b"transfer-encoding") or b"").lower() == b"chunked"
        length = _header_int(head.split(b"\r\n")[1:], b"content-length")
        raw = rest
        # a streamed answer is cut halfway through its second line (or its first
        # if it has one line); a plain one halfway through its body
        while True:
            text = _dechunk_partial(raw) if chunked else raw
            if length is not None and not chunked:
                if len(raw) >= max(1, length // 2):
                    break
            elif text.count(b"\n") >= 2 or (b"\n" in text and not text.endswith(b"\n")):
                break  # the second line has begun: it is the one cut
            data = up.recv(65536)
            if not data:
                break
            raw += data
        if chunked:
            text = _dechunk_partial(raw)
            first = text.find(b"\n")
            keep = text[: first + 1] if first >= 0 else b""
            line2 = (text[first + 1:] if first >= 0 else text).split(b"\n")[0]
            partial = keep + line2[: max(1, len(line2) // 2)] if line2 else text[: max(1, len(text) // 2)]
            # one chunk that promises more than it delivers: the client sees the stream end mid-line
            client.sendall(b"%x\r\n" % (len(partial) + 64) + partial)
        else:
            client.sendall(raw[: max(1, (length or len(raw)) // 2)])
        try:
            client.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send_drip(self, up: socket.socket, client: socket.socket) -> None:
        while not self._stop.is_set():
            data = up.recv(65536)
            if not data:
                break
            for i in range(0, len(data), self.drip_bytes):
                if self._stop.is_set():
                    return
                client.sendall(data[i:i + self.drip_bytes])
                time.sleep(self.drip_interval_s)


def _close(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _copy(src: socket.socket, dst: socket.socket) -> None:
    while True:
        data = src.recv(65536)
        if not data:
            return
        dst.sendall(data)


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    """The bytes before the blank line that ends an HTTP head, and what came after it."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > _HEAD_LIMIT:
            return None, b""
        data = sock.recv(65536)
        if not data:
            return None, b""
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _read_response(sock: socket.socket) -> tuple[bytes | None, bytes]:
    """A whole response (the upstream closes after it): head and de-chunked body."""
    head, rest = _read_head(sock)
    if head is None:
        return None, b""
    raw = rest
    while True:
        data = sock.recv(65536)
        if not data:
            break
        raw += data
    chunked = (_header(head.split(b"\r\n")[1:], b"transfer-encoding") or b"").lower() == b"chunked"
    return head, _dechunk_partial(raw) if chunked else raw


def _dechunk_partial(raw: bytes) -> bytes:
    """The payload of a chunked body, as far as it has arrived."""
    out, i = b"", 0
    while True:
        j = raw.find(b"\r\n", i)
        if j < 0:
            return out
        try:
            size = int(raw[i:j].split(b";")[0], 16)
        except ValueError:
            return out
        if size == 0:
            return out
        out += raw[j + 2: j + 2 + size]
        if j + 2 + size > len(raw):
            return out
        i = j + 2 + size + 2


def _header(headers: list[bytes], name: bytes) -> bytes | None:
    for h in headers:
        k, _, v = h.partition(b":")
        if k.strip().lower() == name:
            return v.strip()
    return None


def _header_int(headers: list[bytes], name: bytes) -> int | None:
    v = _header(headers, name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None
