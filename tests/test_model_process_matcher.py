"""Which processes hold a model for Ollama, in both eras: the legacy
``ollama runner`` and the current engine's ``llama-server --model``, never
the short-lived ``llama-server`` instances Ollama runs for GPU discovery."""
from __future__ import annotations

import os
import subprocess
import sys

from probes.memory.host import HostReader, is_ollama_runner

MiB = 1 << 20

# what Ollama v0.34.4 starts (llm/llama_server.go, discover/llama_server.go)
MODEL_PROCESS = ["/usr/lib/ollama/llama-server", "--model", "/m/blobs/sha256-ab", "--port", "40001",
                 "--host", "127.0.0.1", "--no-webui", "--offline", "-c", "4096", "-np", "1",
                 "--flash-attn", "auto"]
DISCOVERY = ["/usr/lib/ollama/llama-server", "--port", "50123", "--host", "127.0.0.1", "--no-webui",
             "--offline", "--verbose"]
LIST_DEVICES = ["/usr/lib/ollama/llama-server", "--list-devices", "--offline", "--verbose"]


def test_current_engine_model_process_counts():
    assert is_ollama_runner(MODEL_PROCESS)
    assert is_ollama_runner(["C:\\Ollama\\lib\\ollama\\llama-server.exe", "--model", "C:\\m\\blob"])
    assert is_ollama_runner(["llama-server", "-m", "/m/blob"])
    assert is_ollama_runner(["llama-server", "--model=/m/blob"])


def test_discovery_instances_without_a_model_do_not_count():
    assert not is_ollama_runner(DISCOVERY)
    assert not is_ollama_runner(LIST_DEVICES)
    assert not is_ollama_runner(["llama-server"])


def test_legacy_runner_still_counts_and_other_programs_do_not():
    assert is_ollama_runner(["/usr/local/bin/ollama", "runner", "--model", "/x", "--ctx-size", "2048"])
    assert not is_ollama_runner(["/usr/local/bin/ollama", "serve"])
    assert not is_ollama_runner(["/usr/bin/llama-quantize", "--model", "x"])
    assert not is_ollama_runner(["/usr/bin/python3", "llama-server", "--model", "x"])


HOLD = r"""
import sys
block = b"\x01" * (48 << 20)
print("ready", flush=True)
sys.stdin.readline()
"""


def test_reader_counts_the_model_llama_server_and_skips_discovery(tmp_path):
    # a python named "llama-server": real processes with the two command-line shapes
    exe = tmp_path / "lib" / "ollama" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.symlink_to(os.path.realpath(sys.executable))
    model = subprocess.Popen([str(exe), "-c", HOLD, "--model", "/m/blob", "-c", "2048"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    discovery = subprocess.Popen([str(exe), "-c", HOLD, "--port", "50123", "--no-webui", "--offline"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for child in (model, discovery):
            assert child.stdout.readline().strip() == "ready"
        reader = HostReader(server_pid=os.getpid())
        procs = reader.processes()
        assert [p.pid for p in procs] == [model.pid]
        assert procs[0].name == "llama-server"
        assert reader.read().used_bytes >= 48 * MiB
    finally:
        for child in (model, discovery):
            child.kill()
            child.wait()
