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
from oomsim.requests import MESSAGE_TOKENS, TEMPLATE_TOKENS
from oomsim.settings import SimError, parse_keep_alive
from oomsim.state import SimState

_FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
              "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
              "Q5_K_M": 17, "Q6_K": 18, "IQ2_XXS": 19, "IQ2_XS": 20, "Q2_K_S": 21, "IQ3_XS": 22,
              "IQ3_XXS": 23, "IQ1_S": 24, "IQ4_NL": 25, "IQ3_S": 26, "IQ3_M": 27, "IQ2_S": 28,
              "IQ2_M": 29, "IQ4_XS": 30, "IQ1_M": 31, "BF16": 32, "TQ1_0": 36, "TQ2_0": 37, "MXFP4": 38}
_MODIFIED_AT = "2025-08-06T10:00:00.000000000Z"
_STREAM_SLEEPS = 10


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def digest(tag: str) -> str:
    import hashlib

    return hashlib.sha256(tag.encode()).hexdigest()


def details(model: ModelSpec) -> dict:
    return {"parent_model": "", "format": "gguf", "family": model.family, "families": [model.family],
            "parameter_size": model.parameter_size, "quantization_level": model.quantization}


def model_info(model: ModelSpec, verbose: bool = False) -> dict:
    """``/api/show`` model_info: the GGUF keys a memory model reads."""
    a = model.arch
    p = a.arch
    params = int(model.weights_bytes * 8 / model.bits)
    info: dict[str, Any] = {
        "general.architecture": p,
        "general.basename": model.tag.split(":", 1)[0],
        "general.file_type": _FILE_TYPE.get(model.quantization, 15),
        "general.parameter_count": params,
        "general.quantization_version": 2,
        f"{p}.block_count": a.block_count,
        f"{p}.context_length": a.context_length,
        f"{p}.embedding_length": a.embedding_length,
        f"{p}.feed_forward_length": a.embedding_length * 7 // 2,
        f"{p}.attention.head_count": a.head_count,
        f"{p}.attention.head_count_kv": a.head_count_kv,
        f"{p}.attention.layer_norm_rms_epsilon": 1e-05,
        f"{p}.rope.freq_base": 500000,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    for key in ("key_length", "value_length", "sliding_window"):
        value = getattr(a, key)
        if value:
            info[f"{p}.attention.{key}"] = value
    if a.vocab_size:
        info[f"{p}.vocab_size"] = a.vocab_size
        # arrays over 1024 items come back null unless verbose, as in Ollama
        info["tokenizer.ggml.tokens"] = [f"<t{i}>" for i in range(a.vocab_size)] if verbose else None
        info["tokenizer.ggml.token_type"] = [1] * a.vocab_size if verbose else None
    return info


def tensors(model: ModelSpec) -> list[dict]:
    """A plausible tensor list (names, types, shapes) for ``/api/show``."""
    a = model.arch
    E, V = a.embedding_length, a.vocab_size or 32000
    kv = a.head_count_kv * a.head_dim_k
    ff = E * 7 // 2
    t = model.quantization
    out = [{"name": "token_embd.weight", "type": t, "shape": [E, V]}]
    for i in range(a.block_count):
        for name, shape in (("attn_norm.weight", [E]), ("attn_q.weight", [E, E]), ("attn_k.weight", [E, kv]),
                            ("attn_v.weight", [E, kv]), ("attn_output.weight", [E, E]), ("ffn_norm.weight", [E]),
                            ("ffn_gate.weight", [E, ff]), ("ffn_up.weight", [E, ff]), ("ffn_down.weight", [ff, E])):
            out.append({"name": f"blk.{i}.{name}", "type": "F32" if name.endswith("norm.weight") else t,
                        "shape": shape})
    out += [{"name": "output_norm.weight", "type": "F32", "shape": [E]},
            {"name": "output.weight", "type": t, "shape": [E, V]}]
    return out


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
        routes = {"/api/show": self._show, "/api/generate": self._generate, "/api/chat": self._chat}
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
        return {"name": m.tag, "model": m.tag, "modified_at": _MODIFIED_AT, "size": m.weights_bytes,
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
            "capabilities": ["completion"],
            "modified_at": _MODIFIED_AT,
        })

    # -- generation ------------------------------------------------------------------
    def _generate(self, body: dict) -> None:
        self._complete(body, chat=False)

    def _chat(self, body: dict) -> None:
        self._complete(body, chat=True)

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
            state.unload(model.tag)
            self._json(200, self._final(name, chat, "unload", None))
            return
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
