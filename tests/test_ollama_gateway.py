"""The gateway to Ollama's HTTP API (probes/ollama_api.py) on a fake server:
the calls the client lacks (``/api/version``, the verbose ``/api/show``), the
ones other rooms used to make on their own (token log-probabilities, ``/api/ps``
as rows, a pull), and each error as one of oomvet's."""
from __future__ import annotations

import json
import time

import httpx
import pytest

from probes import coherence, predict
from common.errors import ModelNotFoundError, ProbeError, ServerUnreachable
from probes.memory.ollama_ps import OllamaPsReader, fetch_ps
from probes.ollama_api import Ollama
from probes.server import free_port

HOST = "http://127.0.0.1:9"
MODEL_INFO = {"general.architecture": "llama", "llama.block_count": 30, "llama.context_length": 8192,
              "llama.embedding_length": 576, "llama.attention.head_count": 9, "llama.attention.head_count_kv": 3,
              "tokenizer.ggml.tokens": ["a", "b", "c"]}
TENSORS = [{"name": "token_embd.weight", "type": "F16", "shape": [576, 3]},
           {"name": "blk.0.attn_q.weight", "type": "F16", "shape": [576, 576]}]


class FakeServer:
    """Ollama's HTTP API from queues: ``enqueue(path, body, status, delay_s)``
    per answer; ``history`` holds ``(method, path, json body)`` of each request."""

    def __init__(self):
        self.answers: dict[str, list] = {}
        self.history: list[tuple[str, str, dict | None]] = []

    def enqueue(self, path: str, body, status: int = 200, delay_s: float = 0.0) -> "FakeServer":
        self.answers.setdefault(path, []).append((status, body, delay_s))
        return self

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.history.append((request.method, request.url.path, json.loads(request.content) if request.content else None))
        status, body, delay_s = self.answers[request.url.path].pop(0)
        time.sleep(delay_s)
        return httpx.Response(status, json=body)

    def api(self, timeout_s: float = 10.0) -> Ollama:
        return Ollama(HOST, timeout_s=timeout_s, transport=httpx.MockTransport(self.handle))


def test_version_is_read_from_api_version():
    server = FakeServer().enqueue("/api/version", {"version": "0.34.4"})
    assert server.api().version() == "0.34.4"
    assert server.history == [("GET", "/api/version", None)]


def test_an_error_status_on_api_version_is_one_line_of_ours():
    server = FakeServer().enqueue("/api/version", {"error": "bad gateway\nupstream down"}, status=502)
    with pytest.raises(ProbeError, match=r"/api/version: bad gateway upstream down \(status 502\)") as err:
        server.api().version()
    assert not isinstance(err.value, ServerUnreachable)


def test_nobody_listening_is_unreachable_exit_3():
    with pytest.raises(ServerUnreachable, match="no Ollama server answers") as err:
        Ollama(f"http://127.0.0.1:{free_port()}", timeout_s=5).version()
    assert err.value.exit_code == 3


def test_a_host_without_scheme_is_read_as_http():
    assert Ollama("127.0.0.1:11434").host == "http://127.0.0.1:11434"


def test_the_verbose_show_carries_the_tensor_list_the_client_drops():
    server = FakeServer().enqueue("/api/show", {"model_info": MODEL_INFO, "tensors": TENSORS,
                                                "details": {"quantization_level": "F16", "family": "llama"}})
    shown = server.api().show("neohorse-1:f16", verbose=True)
    assert server.history == [("POST", "/api/show", {"model": "neohorse-1:f16", "verbose": True})]
    assert (shown.tensors, shown.quantization, shown.family) == (TENSORS, "F16", "llama")
    assert shown.context_length == 8192


def test_a_missing_model_in_the_verbose_show_is_model_not_found():
    server = FakeServer().enqueue("/api/show", {"error": "model 'x' not found"}, status=404)
    with pytest.raises(ModelNotFoundError, match="is not on the server at http://127.0.0.1:9"):
        server.api().show("x", verbose=True)


def test_read_shape_takes_weights_from_tensors_and_vocab_from_the_tokenizer():
    server = FakeServer().enqueue("/api/show", {"model_info": MODEL_INFO, "tensors": TENSORS,
                                                "details": {"quantization_level": "F16"}})
    shape = predict.read_shape(server.api(), "neohorse-1:f16")
    assert (shape.weights_source, shape.weights_bytes, shape.level) == ("tensors", (576 * 3 + 576 * 576) * 2, "F16")
    assert shape.arch.vocab_size == 3


def test_read_shape_without_tensors_falls_back_to_the_file_size():
    server = (FakeServer().enqueue("/api/show", {"model_info": MODEL_INFO, "details": {}})
              .enqueue("/api/tags", {"models": [{"model": "neohorse-1:latest", "name": "neohorse-1:latest",
                                                 "size": 270_000_000, "digest": "ab"}]}))
    shape = predict.read_shape(server.api(), "neohorse-1")
    assert (shape.weights_source, shape.weights_bytes) == ("file", 270_000_000)


def test_logprobs_ask_for_them_and_come_back_as_plain_steps():
    steps = [{"token": "4", "logprob": -0.1, "top_logprobs": [{"token": "4", "logprob": -0.1},
                                                              {"token": "5", "logprob": -2.5}]}]
    server = FakeServer().enqueue("/api/generate", {"model": "m", "response": "4", "done": True, "logprobs": steps})
    got = coherence.logprob_steps(server.api(), "m", "2+2?", {"temperature": 0}, top=2)
    assert got == [{"token": "4", "logprob": -0.1, "top": {"4": -0.1, "5": -2.5}}]
    method, path, body = server.history[0]
    assert (method, path) == ("POST", "/api/generate")
    assert (body["logprobs"], body["top_logprobs"], body["stream"], body["options"]) == (True, 2, False,
                                                                                         {"temperature": 0})


def test_a_server_without_logprobs_gives_no_signal():
    server = (FakeServer().enqueue("/api/generate", {"model": "m", "response": "4", "done": True})
              .enqueue("/api/generate", {"error": "unknown field"}, status=400))
    assert server.api().logprobs("m", "2+2?") == []
    assert coherence.logprob_steps(server.api(), "m", "2+2?", {}) is None
    with pytest.raises(ProbeError, match=r"logprobs of m: unknown field \(status 400\)"):
        FakeServer().enqueue("/api/generate", {"error": "unknown field"}, status=400).api().logprobs("m", "2+2?")


def test_ps_rows_keep_every_field_and_the_reader_sums_them():
    rows = [{"name": "a:1", "model": "a:1", "size": 300, "size_vram": 200, "context_length": 4096},
            {"name": "b:1", "model": "b:1", "size": 50, "size_vram": 50}]
    server = FakeServer().enqueue("/api/ps", {"models": rows}).enqueue("/api/ps", {"models": rows})
    api = server.api()
    got = fetch_ps(api=api)
    assert [(r["name"], r["size_vram"], r["context_length"]) for r in got] == [("a:1", 200, 4096), ("b:1", 50, None)]
    assert OllamaPsReader(api=api).read().used_bytes == 250


def test_a_failed_ps_is_unreachable_for_the_reader():
    server = FakeServer().enqueue("/api/ps", {"error": "boom"}, status=500)
    with pytest.raises(ServerUnreachable, match=r"did not answer /api/ps: ollama ps at .*boom \(status 500\)"):
        fetch_ps(HOST, api=server.api())


def test_pull_asks_the_server_and_a_refusal_is_one_line():
    server = (FakeServer().enqueue("/api/pull", {"status": "success"}, delay_s=0.3)
              .enqueue("/api/pull", {"error": "pull model manifest: file does not exist"}, status=500))
    api = server.api(timeout_s=0.05)  # a download takes as long as it takes: no whole-reply deadline cuts it
    api.pull("m:1")
    assert server.history[0][:2] == ("POST", "/api/pull") and server.history[0][2]["model"] == "m:1"
    with pytest.raises(ProbeError, match=r"ollama pull m:2: pull model manifest: file does not exist \(status 500\)"):
        api.pull("m:2")
