"""The simulated server's HTTP face: the part of Ollama's API oomvet uses,
answered the way Ollama v0.11.4 answers it.

``GET /api/version``, ``GET /api/tags``, ``POST /api/show``, ``GET /api/ps``,
``POST /api/generate`` and ``POST /api/chat`` on a loopback port, with
streaming NDJSON (chunked, the default unless ``"stream": false``), Ollama's
status codes and error texts, and the load / unload conventions (no prompt =>
``done_reason: "load"``, plus ``keep_alive: 0`` => ``"unload"``). Errors found
before the answer starts come back as a status code with ``{"error": ...}``;
a runner that dies during a streamed answer sends HTTP 200 and then an
``{"error": ...}`` line, as Ollama does. Memory, placement and text come from
:class:`oomsim.state.SimState`; this module only speaks HTTP.
"""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Mapping

from common.errors import ProbeError
from oomsim.scenario import ModelSpec, Scenario
from oomsim.views import MODIFIED_AT, capabilities, details, digest, embedding, model_info, tensors

_STREAM_SLEEPS = 10


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
from oomsim.requests import MESSAGE_TOKENS, TEMPLATE_TOKENS
from oomsim.settings import SimError, parse_keep_alive
from oomsim.state import SimState

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ollama-sim"
    sim: "SimServer"  # set on the subclass made per server

    # -- plumbing --------------------------------------------------------------
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # requests are logged by log_request, the way gin prints them

    def log_request(self, code="-", size="-") -> None:
        stamp = datetime.now().strftime("%Y/%m/%d - %H:%M:%S")
        self.sim.state.log.append(f'[GIN] {stamp} | {code} | {self.client_address[0]} | {self.command} "{self.path}"')

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode(),
                   "application/json; charset=utf-8")

    def _error(self, status: int, text: str) -> None:
        self._json(status, {"error": text})

    def _body(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            self._error(400, "missing request body")
            return None
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._error(400, f"invalid character in request body: {exc}")
            return None
        if not isinstance(data, dict):
            self._error(400, "json: cannot unmarshal into Go value of type api.Request")
            return None
        return data

    # -- routes ------------------------------------------------------------------
    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path == "/":
            self._send(200, b"Ollama is running", "text/plain; charset=utf-8")
        elif path == "/api/version":
            self._json(200, {"version": self.sim.state.scenario.server.version})
        elif path == "/api/tags":
            self._json(200, {"models": [self._tag(m) for m in self.sim.state.scenario.models.values()]})
        elif path == "/api/ps":
            self._json(200, {"models": [self._ps(r) for r in self.sim.state.loaded()]})
        else:
            self._send(404, b"404 page not found", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        routes = {"/api/show": self._show, "/api/generate": self._generate, "/api/chat": self._chat,
                  "/api/embed": self._embed, "/api/embeddings": self._embeddings}
        route = routes.get(path)
        if route is None:
            self._send(404, b"404 page not found", "text/plain")
            return
        body = self._body()
        if body is None:
            return
        try:
            route(body)
        except SimError as exc:
            self._error(exc.status, exc.text)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_DELETE(self) -> None:  # noqa: N802
        self._send(404, b"404 page not found", "text/plain")

    # -- views ---------------------------------------------------------------------
    def _tag(self, m: ModelSpec) -> dict:
        return {"name": m.tag, "model": m.tag, "modified_at": MODIFIED_AT, "size": m.weights_bytes,
                "digest": digest(m.tag), "details": details(m)}

    def _ps(self, r) -> dict:
        if r.measured:
            # the current engine reports the buffers llama-server allocated
            size, vram = r.resident_cpu_bytes + r.resident_gpu_bytes, r.resident_gpu_bytes
            return {"name": r.model.tag, "model": r.model.tag, "size": size, "digest": digest(r.model.tag),
                    "details": details(r.model), "expires_at": self.sim.state.expires_at_iso(r),
                    "size_vram": vram, "context_length": r.num_ctx}
        return {"name": r.model.tag, "model": r.model.tag, "size": r.placement.size_bytes,
                "digest": digest(r.model.tag), "details": details(r.model),
                "expires_at": self.sim.state.expires_at_iso(r), "size_vram": r.placement.size_vram_bytes,
                "context_length": r.num_ctx}

    def _show(self, body: dict) -> None:
        name = body.get("model") or body.get("name") or ""
        model = self.sim.state.find(name)
        params = "stop                           \"<|eot_id|>\""
        self._json(200, {
            "license": "simulated model, no weights",
            "modelfile": f"# Modelfile generated by the oomvet simulator\nFROM {model.tag}\n",
            "parameters": params,
            "template": "{{ .Prompt }}",
            "details": details(model),
            "model_info": model_info(model, bool(body.get("verbose"))),
            "tensors": tensors(model),
            "capabilities": capabilities(model),
            "modified_at": MODIFIED_AT,
        })

    # -- generation ------------------------------------------------------------------
    def _generate(self, body: dict) -> None:
        self._complete(body, chat=False)

    def _chat(self, body: dict) -> None:
        self._complete(body, chat=True)

    def _embed(self, body: dict) -> None:
        """``/api/embed``: ``input`` a text or a list of texts; none only loads."""
        state = self.sim.state
        name = str(body.get("model") or "")
        model = state.find(name)
        raw = body.get("input")
        texts = [] if raw in (None, "") else [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise SimError(400, "invalid input type")
        options = body.get("options") or {}
        if not model.embedding:
            raise SimError(400, f"registry.ollama.ai/library/{model.tag} does not support embedding")
        runner, load_ns = state.schedule(model.tag, options, body.get("keep_alive"), hold=True)
        try:
            if not texts:
                self._json(200, {"model": name, "embeddings": []})
                return
            count = state.embed_tokens(runner, texts, body.get("truncate") is not False)
            self._json(200, {"model": name, "embeddings": [embedding(model, t) for t in texts],
                             "total_duration": load_ns + 1_000_000 * len(texts), "load_duration": load_ns,
                             "prompt_eval_count": count})
        finally:
            state.release(runner)

    def _embeddings(self, body: dict) -> None:
        """The older ``/api/embeddings``: one ``prompt``, one ``embedding``."""
        state = self.sim.state
        model = state.find(str(body.get("model") or ""))
        if not model.embedding:
            raise SimError(400, f"registry.ollama.ai/library/{model.tag} does not support embedding")
        runner, _ = state.schedule(model.tag, body.get("options") or {}, body.get("keep_alive"), hold=True)
        try:
            prompt = str(body.get("prompt") or "")
            self._json(200, {"embedding": embedding(model, prompt) if prompt else []})
        finally:
            state.release(runner)

    def _complete(self, body: dict, chat: bool) -> None:
        state = self.sim.state
        name = str(body.get("model") or "")
        model = state.find(name)
        keep_alive = body.get("keep_alive")
        options = body.get("options") or {}
        if not isinstance(options, Mapping):
            raise SimError(400, "json: cannot unmarshal options")
        if chat:
            messages = body.get("messages") or []
            if not isinstance(messages, list):
                raise SimError(400, "json: cannot unmarshal messages")
            contents = [str((m or {}).get("content") or "") for m in messages if isinstance(m, Mapping)]
            prompt = "\n".join(contents)
            users = [str(m.get("content") or "") for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
            answer_to = users[-1] if users else prompt
            extra = MESSAGE_TOKENS * len(contents) + 3
            empty = not messages
        else:
            prompt = str(body.get("prompt") or "")
            answer_to, extra = prompt, TEMPLATE_TOKENS
            empty = prompt == ""
        if empty and keep_alive is not None and parse_keep_alive(keep_alive, 300.0) == 0:
            # the unload comes before the capability check, as in routes.go: an embedder is unloaded this way too
            state.unload(model.tag)
            self._json(200, self._final(name, chat, "unload", None))
            return
        if model.embedding:
            raise SimError(400, f"registry.ollama.ai/library/{model.tag} does not support completion")
        runner, load_ns = state.schedule(model.tag, options, keep_alive, hold=True)
        try:
            if empty:
                self._json(200, self._final(name, chat, "load", None))
                return
            stream = body.get("stream") is not False
            try:
                ticket = state.begin(runner, prompt, options, extra_tokens=extra, answer_to=answer_to)
            except SimError as exc:
                if stream and exc.status == 500:
                    self._start_stream()
                    self._chunk({"error": exc.text})
                    self._end_stream()
                    return
                raise
            ticket.load_ns = load_ns
            try:
                self._answer(name, chat, ticket, stream, keep_alive)
            finally:
                state.finish(ticket, keep_alive)
        finally:
            state.release(runner)

    def _answer(self, name: str, chat: bool, ticket, stream: bool, keep_alive) -> None:
        hold = self.sim.state.scenario.timing.request_s
        pieces = ticket.pieces
        if stream:
            self._start_stream()
        if hold:
            time.sleep(hold / 2)  # prompt processing: the scratch memory is held meanwhile
        every = max(len(pieces) // _STREAM_SLEEPS, 1)
        for i, piece in enumerate(pieces):
            if not ticket.runner.alive:
                break
            if stream:
                self._chunk(self._part(name, chat, piece))
            if hold and i % every == every - 1:
                time.sleep(hold / 2 / _STREAM_SLEEPS)
        if not ticket.runner.alive:
            # the runner died under this request (another request crashed it, or a restart)
            text = self.sim.state.died_error(ticket.runner)
            if stream:
                self._chunk({"error": text})
                self._end_stream()
            else:
                self._error(500, text)
            return
        final = self._final(name, chat, ticket.done_reason, ticket)
        if stream:
            self._chunk(final)
            self._end_stream()
        else:
            text = "".join(pieces)
            if chat:
                final["message"]["content"] = text
            else:
                final["response"] = text
            self._json(200, final)

    def _part(self, name: str, chat: bool, piece: str) -> dict:
        if chat:
            return {"model": name, "created_at": now_iso(), "message": {"role": "assistant", "content": piece},
                    "done": False}
        return {"model": name, "created_at": now_iso(), "response": piece, "done": False}

    def _final(self, name: str, chat: bool, done_reason: str, ticket) -> dict:
        out: dict[str, Any] = {"model": name, "created_at": now_iso()}
        if chat:
            out["message"] = {"role": "assistant", "content": ""}
        else:
            out["response"] = ""
        out["done_reason"] = done_reason
        out["done"] = True
        if ticket is not None:
            if not chat:
                out["context"] = list(range(1, ticket.prompt_tokens + len(ticket.pieces) + 1))
            total = ticket.load_ns + ticket.prompt_eval_ns + ticket.eval_ns
            out.update(total_duration=total, load_duration=ticket.load_ns,
                       prompt_eval_count=ticket.prompt_tokens, prompt_eval_duration=ticket.prompt_eval_ns,
                       eval_count=len(ticket.pieces), eval_duration=ticket.eval_ns)
        return out

    # chunked NDJSON, as gin streams it
    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, obj: Any) -> None:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False


class SimControl:
    """:class:`probes.server.ServerControl` for the simulator: it may always
    restart, and a restart applies ``OLLAMA_*`` variables on top of the
    current ones (an empty value restores Ollama's default)."""

    source = "oomvet"  # the simulator's settings are the ones it was started with

    def __init__(self, server: "SimServer"):
        self._server = server

    def can_restart(self) -> bool:
        return True

    def restart(self, env: Mapping[str, str]) -> None:
        self._server.restart(env)

    def env(self) -> dict[str, str]:
        return self._server.state.env()


class SimServer:
    """The HTTP server on ``127.0.0.1:port`` (0 = any free port)."""

    def __init__(self, scenario: Scenario, port: int = 0, state: SimState | None = None):
        self.scenario = scenario
        self.state = state or SimState(scenario)
        self.port = port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "SimServer":
        if self._httpd is not None:
            return self
        handler = type("SimHandler", (_Handler,), {"sim": self})
        try:
            self._httpd = _HTTPServer(("127.0.0.1", self.port), handler)
        except OSError as exc:
            raise ProbeError(f"the simulator cannot listen on 127.0.0.1:{self.port}: {exc.strerror or exc}",
                             hint="pick another --port, or leave it out for any free port") from None
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"oomvet-sim:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def restart(self, env: Mapping[str, str] | None = None) -> None:
        """Like restarting ``ollama serve`` with new variables: every model is
        unloaded; the port stays the same."""
        self.state.restart(env or {})

    def control(self) -> SimControl:
        return SimControl(self)

    def serve_forever(self) -> None:
        """Block until Ctrl-C (for ``oomvet simulate``)."""
        self.start()
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(timeout=0.5)
        finally:
            self.stop()
