"""The host reader measured for real: child processes that touch memory, and
a stand-in "ollama runner" found by its command line under its parent."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from probes.memory.host import HostReader, is_ollama_runner

MiB = 1 << 20

# prints "base", waits, touches N MiB (bytes * N writes every page), prints "ready", waits
TOUCHER = r"""
import sys
print("base", flush=True)
sys.stdin.readline()
block = b"\x01" * (int(sys.argv[1]) << 20)
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def toucher():
    children = []

    def spawn(mib: int, *, exe: str = sys.executable, extra: tuple = ()):
        child = subprocess.Popen([exe, "-c", TOUCHER, str(mib), *extra], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        children.append(child)
        assert child.stdout.readline().strip() == "base"
        return child

    yield spawn
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def _step(child) -> None:
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "ready"


def test_child_touching_200_mib_is_seen_within_ten_percent(toucher):
    child = toucher(200)
    reader = HostReader(pids=[child.pid])
    before = reader.read().used_bytes
    _step(child)
    after = reader.read().used_bytes
    rise = after - before
    assert abs(rise - 200 * MiB) <= 20 * MiB, f"saw {rise / MiB:.1f} MiB rise"
    (proc,) = reader.processes_for([child.pid])
    assert proc.pid == child.pid and proc.used_bytes == pytest.approx(after, rel=0.05)


def test_reading_carries_system_total_and_available():
    r = HostReader(pids=[]).read()
    assert r.used_bytes == 0
    assert r.total_bytes > 0 and 0 < r.free_bytes <= r.total_bytes


def test_vanished_process_is_dropped_without_raising(toucher):
    child = toucher(16)
    reader = HostReader(pids=[child.pid])
    assert reader.read().used_bytes > 0
    child.kill()
    child.wait()
    assert reader.read().used_bytes == 0
    assert reader.processes() == []
    assert reader.processes_for([child.pid]) == []


def test_runner_is_found_by_command_line_under_the_server(tmp_path, toucher):
    # a python named "ollama" started as "ollama runner": the runner's real command-line shape
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "__main__.py").write_text(TOUCHER.replace("sys.argv[1]", "'64'"))
    (tmp_path / "ollama").symlink_to(os.path.realpath(sys.executable))
    runner = subprocess.Popen([str(tmp_path / "ollama"), "runner"], cwd=tmp_path,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert runner.stdout.readline().strip() == "base"
        bystander = toucher(8)  # a plain python child: not a runner
        reader = HostReader(server_pid=os.getpid())
        pids = [p.pid for p in reader.processes()]
        assert pids == [runner.pid]
        assert bystander.pid not in pids
        base = reader.read().used_bytes
        _step(runner)
        reader.refresh()
        assert reader.read().used_bytes - base >= 56 * MiB
        assert reader.processes()[0].name == "ollama runner"
        # restricted to another server's descendants, the same runner does not count
        assert HostReader(server_pid=bystander.pid).processes() == []
    finally:
        runner.kill()
        runner.wait()


def test_pid_list_is_rescanned_at_most_every_refresh_interval(toucher):
    now = [100.0]
    reader = HostReader(server_pid=os.getpid(), match=lambda cmd: "oomvet-marker" in cmd,
                        refresh_s=0.5, clock=lambda: now[0])
    assert reader.processes() == []
    child = toucher(1, extra=("oomvet-marker",))
    now[0] += 0.2
    assert reader.processes() == []         # cached: not rescanned yet
    now[0] += 0.4
    assert [p.pid for p in reader.processes()] == [child.pid]


def test_runner_command_line_shapes():
    assert is_ollama_runner(["/usr/local/bin/ollama", "runner", "--model", "/x"])
    assert is_ollama_runner(["C:\\Program Files\\Ollama\\ollama.exe", "runner"])
    assert is_ollama_runner(["ollama", "runner", "--ollama-engine"])
    assert not is_ollama_runner(["/usr/local/bin/ollama", "serve"])
    assert not is_ollama_runner(["/usr/bin/python3", "ollama", "runner"])
    assert not is_ollama_runner(["ollama"])
    assert not is_ollama_runner([])

