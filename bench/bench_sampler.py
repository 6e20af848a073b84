"""Benchmark of the memory sampler on the host source (not a test).

Measures, in one run:
  1. the sampler's CPU overhead (process CPU time / wall time, in % of one
     core) at 20 Hz and 100 Hz, with the host reader finding an "ollama
     runner" child by its command line, as it does against a real server;
  2. the shortest spike it catches: the same child allocates and touches
     100 MiB, holds it 100 ms and frees it, 20 times with random pauses
     ("plateau"); then the harder shape, freed 100 ms after the allocation
     began, touching included ("lifetime"). A spike is caught when a reading
     inside it is more than 50 MiB above the baseline. Each runs at 20 Hz
     (the goal: 19 of 20), 100 Hz, and 1 Hz (what ``nvidia-smi -l 1`` sees).

The child is this Python started under the name ``ollama`` with the argument
``runner`` (a symlink and a package directory), so the reader's discovery,
caching and RSS reading are the production code paths.

    .venv/bin/python bench/bench_sampler.py [--seconds 10] [--tries 20] [--source nvml]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.memory.host import HostReader  # noqa: E402
from probes.sampler import Sampler  # noqa: E402

MiB = 1 << 20

RUNNER = r"""
import mmap, random, sys, time


def allocate(nbytes):
    # MAP_POPULATE faults every page in one call: a sharp edge, like a GPU buffer allocation
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    m = mmap.mmap(-1, nbytes, flags=flags)
    if not getattr(mmap, "MAP_POPULATE", 0):
        m.write(b"\x01" * nbytes)
    return m

block = b"\x02" * (32 << 20)          # a resident baseline, like weights
mode = sys.argv[1]
print("ready", flush=True)
if mode == "idle":
    sys.stdin.readline()
    sys.exit()
tries, size_mib, hold_s = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rng, plateau = random.Random(int(sys.argv[5])), sys.argv[6] == "plateau"
sys.stdin.readline()                  # go
for i in range(tries):
    time.sleep(rng.uniform(0.3, 0.5))  # random phase against the sampler's ticks
    start = time.monotonic()
    spike = allocate(size_mib << 20)
    touched = time.monotonic()
    # plateau: all of it held hold_s after touching; lifetime: freed hold_s after allocation began
    time.sleep(hold_s if plateau else max(0.0, hold_s - (touched - start)))
    spike.close()                      # unmapped at once: RSS drops now
    freed = time.monotonic()
    print(f"{start} {touched} {freed}", flush=True)
print("done", flush=True)
sys.stdin.readline()
"""


class FakeRunner:
    """A child whose command line is ``<dir>/ollama runner ...``."""

    def __init__(self, root: Path, *args: str):
        (root / "runner").mkdir(exist_ok=True)
        (root / "runner" / "__main__.py").write_text(RUNNER)
        exe = root / "ollama"
        if not exe.exists():
            exe.symlink_to(os.path.realpath(sys.executable))
        self.proc = subprocess.Popen([str(exe), "runner", *args], cwd=root, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def send(self, line: str = "") -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def cpu_share(seconds: float, hz: float | None, reader_factory) -> tuple[float, float | None]:
    """% of one core this process used over ``seconds`` (sampler on or off)."""
    reader = reader_factory()
    sampler = Sampler(reader, hz=hz) if hz else None
    if sampler:
        sampler.start()
    wall0, cpu0 = time.monotonic(), time.process_time()
    time.sleep(seconds)
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    achieved = sampler.stop().hz_achieved if sampler else None
    return 100.0 * cpu / wall, achieved


def spikes(root: Path, hz: float, tries: int, seed: int, shape: str, hold_s: float = 0.1) -> dict:
    runner = FakeRunner(root, "spike", str(tries), "100", str(hold_s), str(seed), shape)
    try:
        reader = HostReader(server_pid=os.getpid())
        with Sampler(reader, hz=hz) as sampler:
            time.sleep(0.3)
            runner.send("go")
            windows = []
            for line in iter(runner.proc.stdout.readline, ""):
                if line.strip() == "done":
                    break
                windows.append(tuple(float(x) for x in line.split()))
            time.sleep(0.2)
        s = sampler.summary
    finally:
        runner.close()
    t0 = s.started_monotonic
    points = [(t0 + t, used) for t, used in s.timeline]
    baseline = statistics.median(used for _, used in points)
    caught = 0
    for start, _touched, freed in windows:
        if any(start <= t <= freed and used >= baseline + 50 * MiB for t, used in points):
            caught += 1
    return {
        "hz": hz, "hz_achieved": s.hz_achieved, "tries": len(windows), "caught": caught,
        "touch_ms": statistics.median((b - a) * 1000 for a, b, _ in windows),
        "life_ms": statistics.median((c - a) * 1000 for a, _, c in windows),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each CPU measurement")
    ap.add_argument("--tries", type=int, default=20, help="spikes per rate")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--source", default="host",
                    help="memory source for the overhead part (nvml, nvidia-smi, rocm-smi on a GPU "
                         "machine); the spike part needs the host source and runs only with it")
    args = ap.parse_args()
    if args.source != "host":
        from common.errors import ProbeError
        from probes.memory.select import select_reader
        try:
            select_reader(args.source).reader.close()
        except ProbeError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        print(f"CPU overhead of the {args.source} source over {args.seconds:g} s each (% of one core):")
        for label, hz in (("no sampler", None), ("20 Hz", 20.0), ("100 Hz", 100.0)):
            share, achieved = cpu_share(args.seconds, hz, lambda: select_reader(args.source).reader)
            got = f", {achieved} readings/s" if achieved else ""
            print(f"  {label:34s} {share:5.2f} %{got}")
        return 0

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        idle_runner = FakeRunner(root, "idle")
        try:
            under_us = lambda: HostReader(server_pid=os.getpid())  # noqa: E731
            anywhere = lambda: HostReader()  # noqa: E731 - scans every process on the machine
            rows = [("no sampler", None, under_us), ("20 Hz", 20.0, under_us), ("100 Hz", 100.0, under_us),
                    ("20 Hz, no server pid (scan all)", 20.0, anywhere)]
            print(f"\nCPU overhead over {args.seconds:g} s each (% of one core):")
            for label, hz, factory in rows:
                share, achieved = cpu_share(args.seconds, hz, factory)
                got = f", {achieved} readings/s" if achieved else ""
                print(f"  {label:34s} {share:5.2f} %{got}")
        finally:
            idle_runner.close()

        print(f"\nSpikes of 100 MiB, {args.tries} tries each; caught = a reading more than 50 MiB "
              "above the baseline inside the spike")
        shapes = {"plateau": "100 MiB mapped and populated, then held 100 ms",
                  "lifetime": "freed 100 ms after allocation began (touching included)"}
        for shape, what in shapes.items():
            print(f"  {shape}: {what}")
            for hz in (20.0, 100.0, 1.0):
                r = spikes(root, hz, args.tries, args.seed, shape)
                print(f"    {hz:5g} Hz ({r['hz_achieved']} readings/s): caught {r['caught']:2d}/{r['tries']}"
                      f"  (median touch {r['touch_ms']:.0f} ms, allocation lifetime {r['life_ms']:.0f} ms)")
        print("  shorter plateaus at 20 Hz (one reading every 50 ms):")
        for hold_s in (0.05, 0.025):
            r = spikes(root, 20.0, args.tries, args.seed, "plateau", hold_s)
            print(f"    held {hold_s * 1000:3.0f} ms: caught {r['caught']:2d}/{r['tries']}"
                  f"  (median touch {r['touch_ms']:.0f} ms, allocation lifetime {r['life_ms']:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
