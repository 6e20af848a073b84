"""The simulator over HTTP, through the official ollama client and oomvet's own
wrapper and memory readers: it must answer as Ollama v0.11.4 does."""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import ollama
import pytest

import oomsim as sim
from probes.memory.select import select_reader
from probes.ollama_api import Ollama
from oomsim.scenario import scenario_from_dict
from oomsim.messages import LOAD_OOM, RUNTIME_OOM

GiB, MiB = 1 << 30, 1 << 20
LLAMA8B = {"arch": "llama", "block_count": 32, "head_count": 32, "head_count_kv": 8, "embedding_length": 4096,
           "context_length": 32768, "vocab_size": 128256}


def make(vendor="nvidia", name="NVIDIA GeForce RTX 4060", faults=None, server=None, request_s=0.0):
    return scenario_from_dict({
        "device": {"name": name, "vendor": vendor, "total": "8GiB", "used_by_others": "600MiB"},
        "server": server or {"context_length": 4096},
        "models": {"neohorse-1:f16": dict(LLAMA8B, weights="14.9GiB", quantization="F16"),
                   "neohorse-1:q4_K_M": dict(LLAMA8B, weights="4.58GiB", quantization="Q4_K_M")},
        "faults": faults or {},
        "timing": {"load_s": 0, "request_s": request_s},
    }, "test.yaml")


@pytest.fixture
def handle():
    with sim.start(make()) as h:
        yield h


def raw(host: str, method: str, path: str, body: dict | None = None) -> tuple[int, str, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(host + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def test_version_tags_and_show_through_the_client(handle):
    api = Ollama(handle.host)
    assert api.version() == "0.11.4"
    assert sorted(api.tags()) == ["neohorse-1:f16", "neohorse-1:q4_K_M"]
    shown = api.show("neohorse-1:q4_K_M")
    assert shown.quantization == "Q4_K_M" and shown.context_length == 32768
    assert shown.model_info["llama.attention.head_count_kv"] == 8
    assert shown.model_info["tokenizer.ggml.tokens"] is None  # long arrays are null unless verbose
    assert api.siblings("neohorse-1:q4_K_M") == ["neohorse-1:f16"]


def test_show_verbose_and_raw_tensors(handle):
    status, _, body = raw(handle.host, "POST", "/api/show", {"model": "neohorse-1:q4_K_M", "verbose": True})
    data = json.loads(body)
    assert status == 200 and len(data["model_info"]["tokenizer.ggml.tokens"]) == 128256
    names = {t["name"] for t in data["tensors"]}
    assert {"token_embd.weight", "blk.31.attn_k.weight", "output.weight"} <= names


def test_load_and_unload_conventions(handle):
    client = ollama.Client(host=handle.host)
    assert client.generate(model="neohorse-1:q4_K_M", options={"num_ctx": 8192}).done_reason == "load"
    ps = client.ps().models
    assert [(m.model, m.context_length) for m in ps] == [("neohorse-1:q4_K_M", 8192)]
    assert ps[0].size == ps[0].size_vram  # 100% GPU
    assert client.generate(model="neohorse-1:q4_K_M", keep_alive=0).done_reason == "unload"
    assert client.ps().models == []
    assert client.chat(model="neohorse-1:q4_K_M", messages=[]).done_reason == "load"
    assert client.chat(model="neohorse-1:q4_K_M", messages=[], keep_alive=0).done_reason == "unload"


def test_partial_offload_shows_in_ps(handle):
    api = Ollama(handle.host)
    assert api.load("neohorse-1:f16", {"num_ctx": 2048}).ok
    loaded = api.loaded("neohorse-1:f16")
    assert loaded.placement == "partial" and loaded.size_vram_bytes < loaded.size_bytes


def test_streamed_and_whole_answers_agree(handle):
    client = ollama.Client(host=handle.host)
    opts = {"num_ctx": 4096, "seed": 3, "num_predict": 40}
    parts = list(client.generate(model="neohorse-1:q4_K_M", prompt="Keep 42 and `ls -l`.", options=opts,
                                 stream=True))
    whole = client.generate(model="neohorse-1:q4_K_M", prompt="Keep 42 and `ls -l`.", options=opts, stream=False)
    assert "".join(p.response for p in parts) == whole.response
    assert parts[-1].done and parts[-1].done_reason == whole.done_reason == "length"
    assert parts[-1].eval_count == whole.eval_count == 40
    assert whole.prompt_eval_count > 0 and whole.eval_duration > 0


def test_chat_streams_message_parts(handle):
    client = ollama.Client(host=handle.host)
    parts = list(client.chat(model="neohorse-1:q4_K_M", messages=[{"role": "user", "content": "Say 7."}],
                             stream=True, options={"seed": 1}))
    text = "".join(p.message.content for p in parts)
    assert "7" in text and parts[-1].done_reason == "stop"


def test_the_wrapper_reads_truncation_from_prompt_eval_count(handle):
    api = Ollama(handle.host)
    gen = api.generate("neohorse-1:q4_K_M", "word " * 3000, {"num_ctx": 1024, "num_predict": 4})
    assert gen.ok and gen.prompt_eval_count == 1024


def test_missing_model_is_404_on_every_endpoint(handle):
    for path, body in (("/api/show", {"model": "nope"}), ("/api/generate", {"model": "nope", "prompt": "x"}),
                       ("/api/chat", {"model": "nope", "messages": []})):
        status, ctype, text = raw(handle.host, "POST", path, body)
        assert status == 404 and json.loads(text) == {"error": "model 'nope' not found"}
        assert ctype.startswith("application/json")


def test_bad_requests_get_ollamas_400_and_404(handle):
    assert raw(handle.host, "POST", "/api/generate")[0] == 400
    status, _, text = raw(handle.host, "POST", "/api/generate")
    assert json.loads(text) == {"error": "missing request body"}
    assert raw(handle.host, "GET", "/api/nothing")[:1] == (404,)
    assert raw(handle.host, "GET", "/")[2] == "Ollama is running"


def test_forced_num_gpu_is_a_500_with_the_cuda_text(handle):
    api = Ollama(handle.host)
    gen = api.load("neohorse-1:f16", {"num_ctx": 2048, "num_gpu": 99})
    assert not gen.ok and gen.status == 500 and gen.error == LOAD_OOM and gen.oom


def test_a_crash_mid_request_is_200_then_an_error_line():
    with sim.start(make(faults={"peak_extra": "3GiB"})) as h:
        api = Ollama(h.host)
        assert api.load("neohorse-1:q4_K_M", {"num_ctx": 4096}).ok
        gen = api.generate("neohorse-1:q4_K_M", "hello", {"num_ctx": 4096})
        assert not gen.ok and gen.error == RUNTIME_OOM and gen.status == -1 and gen.oom
        status, ctype, text = raw(h.host, "POST", "/api/generate",
                                  {"model": "neohorse-1:q4_K_M", "prompt": "hello", "options": {"num_ctx": 4096}})
        assert status == 200 and ctype == "application/x-ndjson"
        assert json.loads(text.strip().splitlines()[-1]) == {"error": RUNTIME_OOM}
        status, _, text = raw(h.host, "POST", "/api/generate",
                              {"model": "neohorse-1:q4_K_M", "prompt": "hi", "stream": False, "options": {"num_ctx": 4096}})
        assert status == 500 and json.loads(text) == {"error": RUNTIME_OOM}


def test_nvidia_readers_see_the_simulated_device(handle):
    selection = select_reader(nvml_lib=handle.nvml, smi_runner=handle.smi_runner)
    try:
        assert selection.reader.name == "nvml"
        info = selection.reader.info()
        assert (info.name, info.vendor, info.total_bytes) == ("NVIDIA GeForce RTX 4060", "nvidia", 8 * GiB)
        idle = selection.reader.read().used_bytes
        Ollama(handle.host).load("neohorse-1:q4_K_M", {"num_ctx": 8192})
        loaded = selection.reader.read().used_bytes
        runner = handle.state.loaded()[0]
        assert loaded - idle == runner.resident_gpu_bytes
        pids = [p.pid for p in selection.reader.processes()]
        assert runner.pid in pids
        statuses = {s.name: s for s in selection.statuses}
        assert statuses["nvidia-smi"].usable and not statuses["rocm-smi"].usable
    finally:
        selection.reader.close()


def test_nvidia_smi_answers_the_queries_oomvet_sends(handle):
    out = handle.smi_runner(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv"])
    assert out.splitlines() == ["memory.used [MiB], memory.total [MiB]", "600 MiB, 8192 MiB"]
    with pytest.raises(FileNotFoundError):
        handle.smi_runner(["rocm-smi", "--showmeminfo", "vram", "--json"])


def test_amd_device_reads_through_rocm_smi_and_nvml_is_absent():
    with sim.start(make(vendor="amd", name="AMD Radeon RX 7600")) as h:
        selection = select_reader(nvml_lib=h.nvml, smi_runner=h.smi_runner)
        try:
            assert selection.reader.name == "rocm-smi"
            info = selection.reader.info()
            assert (info.name, info.vendor, info.total_bytes) == ("AMD Radeon RX 7600", "amd", 8 * GiB)
            Ollama(h.host).load("neohorse-1:q4_K_M", {"num_ctx": 4096})
            assert selection.reader.read().used_bytes == h.state.used_bytes()
            assert [p.pid for p in selection.reader.processes()] == [h.state.loaded()[0].pid]
            statuses = {s.name: s for s in selection.statuses}
            assert statuses["nvml"].reason == "NVML: library not found"
        finally:
            selection.reader.close()


def test_apple_device_reads_unified_memory_through_the_nvml_shape():
    with sim.start(make(vendor="apple", name="Apple M2 Pro")) as h:
        assert h.smi_runner is None and h.unified
        selection = select_reader(nvml_lib=h.nvml, smi_runner=h.smi_runner)
        try:
            assert selection.reader.info().name == "Apple M2 Pro"
            idle = selection.reader.read().used_bytes
            assert Ollama(h.host).load("neohorse-1:q4_K_M", {"num_ctx": 4096}).ok
            runner = h.state.loaded()[0]
            # on unified memory the runner's CPU part is in the same pool
            assert selection.reader.read().used_bytes - idle == runner.resident_gpu_bytes + runner.resident_cpu_bytes
        finally:
            selection.reader.close()


def test_restart_through_control_changes_server_knobs(handle):
    api = Ollama(handle.host)
    api.load("neohorse-1:q4_K_M", {"num_ctx": 2048})
    one = api.loaded("neohorse-1:q4_K_M").size_bytes
    assert handle.control.can_restart()
    handle.control.restart({"OLLAMA_NUM_PARALLEL": "2"})
    assert api.ps() == [] and handle.control.env()["OLLAMA_NUM_PARALLEL"] == "2"
    api.load("neohorse-1:q4_K_M", {"num_ctx": 2048})
    loaded = api.loaded("neohorse-1:q4_K_M")
    assert loaded.context_length == 2048 and loaded.size_bytes > one


def test_parallel_requests_share_the_slots():
    scn = make(server={"num_parallel": 2}, request_s=0.2)
    with sim.start(scn) as h:
        api = Ollama(h.host)
        api.load("neohorse-1:q4_K_M", {"num_ctx": 2048})
        peak = []
        results = []

        def one():
            results.append(api.generate("neohorse-1:q4_K_M", "hello", {"num_ctx": 2048, "num_predict": 3}))

        threads = [threading.Thread(target=one) for _ in range(2)]
        for th in threads:
            th.start()
        while any(th.is_alive() for th in threads):
            peak.append(sum(len(r.transient) for r in h.state.loaded()))
        for th in threads:
            th.join()
        assert all(r.ok for r in results) and max(peak) == 2


def test_a_busy_port_is_one_clear_error(handle):
    from common.errors import ProbeError

    with pytest.raises(ProbeError, match=r"cannot listen on 127\.0\.0\.1:\d+"):
        sim.start(make(), port=handle.server.port)


def test_keep_alive_zero_with_a_prompt_answers_then_unloads(handle):
    api = Ollama(handle.host)
    gen = api.generate("neohorse-1:q4_K_M", "hello", {"num_ctx": 2048}, keep_alive=0)
    assert gen.ok and gen.done_reason == "stop"
    assert api.ps() == []
