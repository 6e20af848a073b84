"""``oomvet devices``: the report, its text in both languages, and the command
line (real sources on this machine; a fake NVML for the GPU view)."""
from __future__ import annotations

import json
import socket

import pytest

from assistant.cli import main
from assistant.commands.devices import build_report, render
from common.catalog import set_lang
from probes.budget import parse_budget
from probes.memory.select import select_reader
from tests.fake_nvml import GiB, FakeNvml
from tests.test_memory_ollama_ps import PS
from tests.test_memory_smi_parsers import _runner


@pytest.fixture(autouse=True)
def _default_language():
    yield
    set_lang(None)  # --lang sets the process-wide language; leave it as we found it


@pytest.fixture
def dead_host():
    """An address where no Ollama answers (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _gpu_report(**kw):
    nvml = FakeNvml(gpus=("NVIDIA GeForce RTX 4090",)).enqueue_memory(used=2 * GiB, total=24 * GiB)
    nvml.enqueue_processes([(4242, 1 * GiB)])
    sel = select_reader(nvml_lib=nvml, smi_runner=_runner({}))
    return build_report(sel, ollama_host="http://127.0.0.1:11434", **kw)


def test_gpu_report_has_sources_device_reading_limit_and_estimate():
    report = _gpu_report(budget=parse_budget("6GiB"), ps_models=PS[:1])
    assert report["selected"] == "nvml" and report["why_code"] == "first-usable"
    assert report["device"]["name"] == "NVIDIA GeForce RTX 4090"
    assert report["reading"]["used_bytes"] == 2 * GiB
    assert report["processes"][0]["pid"] == 4242
    assert report["limit"]["bytes"] == 6 * GiB and report["limit"]["source"] == "budget"
    (model,) = report["ollama"]["models"]
    assert model["label"] == "Ollama's estimate" and model["placement"] == "gpu"
    json.dumps(report)  # all plain data


def test_english_view_says_which_source_and_why_others_were_not_used():
    text = render(_gpu_report(ps_models=PS[:2]), "en")
    assert "Using nvml: the first usable source in the order nvml > nvidia-smi > rocm-smi > host." in text
    assert "rocm-smi: not found on PATH" in text
    assert "Device: NVIDIA GeForce RTX 4090 (nvidia), total 24.00 GiB" in text
    assert "Now: used 2.00 GiB, free 22.00 GiB of 24.00 GiB" in text
    assert "Limit: no --budget: the limit is what NVIDIA GeForce RTX 4090 can give, 22.00 GiB" in text
    assert "Ollama's estimate from /api/ps" in text and "(not a measurement)" in text
    assert "big:q4: size 10.00 GiB, on GPU 7.00 GiB (partly on CPU), context 8192" in text


def test_chinese_view_translates_the_frame():
    text = render(_gpu_report(ps_models=None), "zh")
    assert "使用 nvml" in text and "设备：NVIDIA GeForce RTX 4090" in text
    assert "上限：未指定 --budget" in text
    assert "服务没有响应" in text


def test_host_view_on_a_machine_without_gpu_names_the_runner_memory():
    sel = select_reader(nvml_lib=FakeNvml(missing=True), smi_runner=_runner({}))
    text = render(build_report(sel, ps_models=[], ollama_host="x"), "en")
    assert "NVML: library not found" in text
    assert "Ollama runners hold" in text or "unified" in text
    assert "Limit: no GPU and no --budget: the limit is the host's available memory" in text \
        or "Limit: unified memory" in text
    assert "no model loaded" in text


def test_cli_json_is_one_object_on_stdout(capsys, dead_host):
    rc = main(["devices", "--json", "--host", dead_host])
    out, _ = capsys.readouterr()
    assert rc == 0
    data = json.loads(out)
    assert out.count("\n") == 1
    assert [s["name"] for s in data["sources"]] == ["nvml", "nvidia-smi", "rocm-smi", "host"]
    chosen = next(s for s in data["sources"] if s["selected"])
    assert chosen["usable"] and chosen["name"] == data["selected"]
    assert data["ollama"]["reachable"] is False


def test_cli_forced_host_source_with_budget(capsys, dead_host):
    rc = main(["devices", "--memory-source", "host", "--budget", "600MiB", "--json", "--host", dead_host])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["selected"] == "host" and data["why_code"] == "forced"
    assert data["limit"]["bytes"] == 600 << 20


def test_cli_text_in_chinese(capsys, dead_host):
    rc = main(["devices", "--lang", "zh", "--host", dead_host])
    out = capsys.readouterr().out
    assert rc == 0 and "内存读数来源" in out and "上限：" in out


@pytest.mark.parametrize("source, words", [
    ("ollama-ps", "estimate"), ("gpu", "unknown memory source"),
])
def test_cli_bad_memory_source_is_one_line_exit_2(capsys, monkeypatch, source, words):
    monkeypatch.delenv("OOMVET_RAISE", raising=False)
    rc = main(["devices", "--memory-source", source])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith("oomvet: ") and words in err.splitlines()[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("scenario, engine, sizes, head", [
    ("scenarios/weights.yaml", "runner", "estimate", "Ollama's estimate from /api/ps"),
    ("scenarios/kv_cache_current.yaml", "llama-server", "measured", "What the server measured, from /api/ps"),
])
def test_cli_on_a_world_says_which_server_and_what_its_sizes_are(capsys, scenario, engine, sizes, head):
    """``devices`` opens the same world as ``diagnose``: the simulator's fake
    NVML is the source, and the server fact says whether /api/ps measures."""
    rc = main(["devices", "--simulate", scenario, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["selected"] == "nvml"
    assert data["server"]["engine"] == engine and data["server"]["sizes"] == sizes
    assert data["ollama"]["reachable"] and data["ollama"]["host"].startswith("http://127.0.0.1:")
    rc = main(["devices", "--simulate", scenario])
    text = capsys.readouterr().out
    assert rc == 0 and head in text and f"engine {engine}" in text


def test_a_measured_label_follows_the_server_fact():
    report = _gpu_report(ps_models=PS[:1], server={"sizes": "measured", "version": "0.34.4",
                                                   "engine": "llama-server"})
    assert report["ollama"]["models"][0]["label"] == "the server's own measurement"
    assert "Server: Ollama 0.34.4, engine llama-server; /api/ps sizes are measurements" in render(report, "en")
    assert "服务器：Ollama 0.34.4，引擎 llama-server；/api/ps 的大小是实测值" in render(report, "zh")
