"""A CUDA process that holds known amounts of device memory on command.

Started by ``gpu_check.py`` on the device machine (PyTorch is on its
image); it reads one JSON command per line on stdin and answers one JSON
line on stdout, so the readers under test watch a separate process, as
they watch a real llama-server. Every size it reports is what PyTorch's
allocator took from the driver (``memory_reserved``): blocks are multiples
of 2 MiB of at least 16 MiB (the plan's levels are multiples of 16 MiB),
which the allocator asks ``cudaMalloc`` for exactly, and ``empty_cache`` hands back on each step down. Times are
``time.monotonic()``, the clock the sampler uses (one clock for every
process of a Linux machine).

Commands: ``{"op": "init"}``; ``{"op": "steps", "steps": [[MiB, hold_s], ...]}``
(the level held, then held for hold_s); ``{"op": "hold", "leave_mib": N}``
(take all but N MiB of what the driver says is free); ``{"op": "release"}``;
``{"op": "exit"}``.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time

MiB = 1 << 20
MIN_BLOCK_MIB = 16
CHUNK_MIB = 4096   # a hold is taken in chunks: one huge request can fail where its parts fit


class Holder:
    def __init__(self, torch):
        self.torch = torch
        self.blocks: list[tuple[int, object]] = []   # (MiB, tensor), newest last

    @property
    def held_mib(self) -> int:
        return sum(m for m, _ in self.blocks)

    def _alloc(self, mib: int) -> None:
        t = self.torch.empty(mib * MiB, dtype=self.torch.uint8, device="cuda")
        t.fill_(1)   # touch it: the pages are the process's for every reader, not a promise
        self.blocks.append((mib, t))

    def set_level(self, mib: int) -> None:
        """Hold ``mib`` (rounded up to 2 MiB) with as few frees as possible:
        blocks are freed newest first, then the shortfall is allocated."""
        mib = max(0, -(-mib // 2) * 2)
        while self.blocks and self.held_mib - self.blocks[-1][0] >= mib:
            self.blocks.pop()
        if self.held_mib > mib:   # the newest block straddles the level: replace it by what is needed
            self.blocks.pop()
        if mib > self.held_mib:
            self._alloc(mib - self.held_mib)
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def state(self) -> dict:
        free, total = self.torch.cuda.mem_get_info()
        return {"t": time.monotonic(), "held_mib": self.held_mib,
                "reserved": int(self.torch.cuda.memory_reserved()), "free": int(free), "total": int(total)}


def handle(holder: Holder, cmd: dict) -> dict:
    torch = holder.torch
    op = cmd.get("op")
    if op == "init":
        torch.cuda.init()
        torch.empty(1, device="cuda")   # the context exists from here on
        torch.cuda.synchronize()
        props = torch.cuda.get_device_properties(0)
        return {"pid": os.getpid(), "device": props.name, "capability": f"{props.major}.{props.minor}",
                "torch": torch.__version__, "cuda": torch.version.cuda,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "device_count": torch.cuda.device_count(), **holder.state()}
    if op == "steps":
        done = []
        for mib, hold_s in cmd["steps"]:
            holder.set_level(int(mib))
            t0 = time.monotonic()
            reserved = int(torch.cuda.memory_reserved())
            time.sleep(float(hold_s))
            done.append({"mib": int(mib), "t0": t0, "t1": time.monotonic(), "reserved": reserved})
        return {"steps": done, **holder.state()}
    if op == "hold":
        free, _ = torch.cuda.mem_get_info()
        want = free // MiB - int(cmd["leave_mib"])
        got = 0
        while want - got >= MIN_BLOCK_MIB:
            part = min(CHUNK_MIB, want - got)
            try:
                holder._alloc(part - part % 2)
            except RuntimeError:   # the driver's free figure was optimistic: stop here, say what was held
                break
            got += part - part % 2
        torch.cuda.synchronize()
        return {"asked_mib": int(want), **holder.state()}
    if op == "release":
        holder.set_level(0)
        return holder.state()
    raise ValueError(f"unknown op {op!r}")


class Worker:
    """The controller's side: starts this file as a child process and asks it
    one command at a time. ``info`` is the answer to ``init``."""

    def __init__(self, python: str = sys.executable, timeout_s: float = 120.0):
        self.proc = subprocess.Popen([python, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.info = self.ask({"op": "init"}, timeout_s)   # torch's import and the CUDA context: seconds
        if "error" in self.info:
            self.close()
            raise RuntimeError(f"CUDA worker: {self.info['error']}")

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def ask(self, cmd: dict, timeout_s: float = 120.0) -> dict:
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            line = self._lines.get(timeout=timeout_s)
        except (BrokenPipeError, queue.Empty) as exc:
            return {"error": f"no answer to {cmd.get('op')}: {type(exc).__name__}"}
        return json.loads(line) if line else {"error": f"worker exited ({self.proc.poll()})"}

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(20)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def main() -> int:
    import torch  # noqa: PLC0415 - on the device image only

    holder = Holder(torch)
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd.get("op") == "exit":
            break
        try:
            reply = handle(holder, cmd)
        except Exception as exc:  # noqa: BLE001 - the controller records it and goes on
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
