"""Part 2 of the GPU check: today's Ollama (v0.34.4) with a CUDA llama-server on the card.

Starts ``ollama serve`` from the bundle on loopback, registers the
NeoHorse-1 stand-ins the rig's way (:func:`oomrig.serve.ensure_tags`), and
records, per load, what every source says side by side: NVML and
nvidia-smi (device and the llama-server process), ``/api/ps`` and
llama-server's own buffer lines. First on a free card (the CUDA compute
buffer per context, flash attention auto and off), then with a CUDA
process holding all but a little of the card: the default load (llama.cpp's
fit moving layers to the CPU), a forced full offload (the real OOM text), and
``oomvet diagnose --host ... --auto`` from a symptom. Without a GPU the same
steps run on the CPU engine, which is how they are tested here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from oomrig.serve import ensure_tags
from probes.memory.nvidia_smi import NvidiaSmiReader
from probes.memory.nvml import NvmlReader
from probes.server import ManagedServer
from probes.serverlog import FileLog, parse

MiB = 1 << 20
MODEL = "neohorse-1:f16"
CTX_LADDER = (2048, 4096, 8192)
FA_OFF_LADDER = (2048, 8192)
#: the hog leaves what the F16 tag needed at FITS_CTX plus this share of what WANT_CTX needs
#: beyond it: the wanted context does not fit on the card, a smaller one does. (The stand-in's
#: weights are random, so a diagnosis that turns to lower-bit tags reads their answers as
#: noise; a context the card can hold keeps it on the memory question.)
LEAVE_SHARE = 0.5
FITS_CTX, WANT_CTX = 4096, 8192
DEFAULT_LEAVE_MIB = 1024   # when the free-card loads could not be read
SYMPTOM = ("用 Ollama 跑 NeoHorse-1，上下文开到 8k 就爆显存，报 cudaMalloc failed: out of memory，"
           "4k 的时候没问题。")


def call(host: str, path: str, body: dict | None = None, timeout_s: float = 120.0) -> dict:
    """One API call; an HTTP error is a result (its status and text), not an exception."""
    try:
        resp = httpx.request("GET" if body is None else "POST", f"{host}{path}", json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return {"status": None, "error": f"{type(exc).__name__}: {exc}"}
    try:
        data = resp.json() if resp.content else {}
    except ValueError:
        data = {"text": resp.text[:2000]}
    return {"status": resp.status_code, **(data if isinstance(data, dict) else {"data": data})}


def model_processes(server: ManagedServer) -> list[int]:
    try:
        kids = psutil.Process(server.pid).children(recursive=True)
    except psutil.Error:
        return []
    return [k.pid for k in kids if "llama-server" in (k.name() or "")]


def unload(host: str, model: str, timeout_s: float = 20.0) -> None:
    call(host, "/api/generate", {"model": model, "keep_alive": 0})
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and call(host, "/api/ps").get("models"):
        time.sleep(0.2)


def load(server: ManagedServer, log: FileLog, readers, *, model: str = MODEL, ctx: int, label: str,
         options: dict | None = None) -> dict:
    """One load and a short request; what each source says while it is held;
    then unloaded, so the next load starts from an empty card."""
    mark = log.offset()
    before = {r.name: r.read().to_dict() for r in readers}
    t0 = time.monotonic()
    reply = call(server.host, "/api/generate", {
        "model": model, "prompt": "Name three colours.", "stream": False, "keep_alive": "60s",
        "options": {"num_ctx": ctx, "num_predict": 8, "temperature": 0, **(options or {})}})
    took = time.monotonic() - t0
    pids = model_processes(server)
    during = {}
    for r in readers:
        procs = {p.pid: p.used_bytes for p in r.processes()}
        during[r.name] = {"device": r.read().to_dict(), "model_process_bytes": [procs.get(p) for p in pids],
                          "processes": procs}
    ps = call(server.host, "/api/ps").get("models", [])
    unload(server.host, model)
    digest = parse(log.lines_since(mark))
    fact = digest.fact("gpu-check", model)
    gpu_buffers = sum(b["bytes"] for b in digest.buffers if b["device"].upper().startswith("CUDA"))
    return {"label": label, "model": model, "ctx": ctx, "options": options or {}, "took_s": round(took, 2),
            "status": reply.get("status"), "error": reply.get("error"), "eval_count": reply.get("eval_count"),
            "before": before, "during": during, "ps": ps, "log": fact, "offloaded": digest.offloaded,
            "cuda_buffer_bytes": gpu_buffers or None, "model_pids": pids}


def process_bytes(load: dict | None) -> int | None:
    """What NVML said the llama-server process held during a load."""
    procs = [b for b in ((load or {}).get("during", {}).get("nvml", {}).get("model_process_bytes") or []) if b]
    return procs[0] if procs else None


def leave_mib(fits: dict | None, wanted: dict | None, share: float = LEAVE_SHARE) -> int:
    """MiB the hog leaves free: what the llama-server process held at the
    context that is to fit, plus ``share`` of what the wanted one took beyond it."""
    low, high = process_bytes(fits), process_bytes(wanted)
    if low is None or high is None or high <= low:
        return DEFAULT_LEAVE_MIB
    return int((low + share * (high - low)) // MiB)


def run_bounded(argv: list[str], env: dict | None, timeout_s: float, grace_s: float = 15.0) -> tuple:
    """(exit code or "timeout", stdout, stderr). At the deadline the command
    gets SIGTERM, which unwinds oomvet like Ctrl-C (the server restored, the
    journal marked interrupted), and SIGKILL ``grace_s`` later."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=max(timeout_s, 1e-3))
        return proc.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        stdout, stderr = proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return "timeout", stdout, stderr + f"\n[gpu-check] stopped after {timeout_s:.0f}s\n"


def diagnose(host: str, out: Path, serve_log: Path, timeout_s: float, *, budget: str | None = None) -> dict:
    """``oomvet diagnose --host HOST --auto`` from the symptom, its journal kept under ``out``."""
    answers = out / "answers.yaml"
    lines = [f"symptom: {json.dumps(SYMPTOM, ensure_ascii=False)}", f"want_ctx: {WANT_CTX}", "want_parallel: 1",
             "lang: zh", f"model: {MODEL}"]
    if budget:
        lines.append(f"budget: {budget}")
    answers.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = dict(os.environ, OOMVET_STATE_DIR=str(out / "journal"), PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "assistant", "diagnose", "--host", host, "--auto", "--answers", str(answers),
            "--json", "--out", str(out / "diagnose-out"), "--server-log", str(serve_log)]
    t0 = time.monotonic()
    rc, stdout, stderr = run_bounded(argv, env, timeout_s)
    (out / "diagnose.json").write_text(stdout)
    (out / "diagnose-stderr.txt").write_text(stderr)
    try:
        result = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except ValueError:
        result = None
    return {"argv": argv, "rc": rc, "took_s": round(time.monotonic() - t0, 1), "timeout_s": round(timeout_s),
            "diagnosis": (result or {}).get("diagnosis"), "config": (result or {}).get("config"),
            "verified": (result or {}).get("verified"), "stderr_tail": stderr[-1500:]}


class Part2:
    """The steps of part 2, each run by the caller's clock (see gpu_check.STEPS)."""

    def __init__(self, ollama_bin: Path, models: Path, out: Path, ggufs: dict, worker=None, log=print,
                 gpu: bool = True):
        self.out, self.ggufs, self.worker, self.say, self.gpu = out, ggufs, worker, log, gpu
        out.mkdir(parents=True, exist_ok=True)
        self.serve_log = out / "ollama-serve.log"
        self.server = ManagedServer(ollama_bin, models, log_path=self.serve_log)
        self.log = FileLog(self.serve_log)
        self.readers = [NvmlReader(), NvidiaSmiReader()] if gpu else []
        self.result: dict = {"loads": []}

    def _load(self, **kw) -> dict:
        rec = load(self.server, self.log, self.readers, **kw)
        self.result["loads"].append(rec)
        self.say(f"part 2: {rec['label']} ctx {rec['ctx']}: status {rec['status']}, {rec['took_s']}s, "
                 f"offloaded {rec['offloaded']}, buffers {[(b['device'], b['kind'], round(b['bytes'] / MiB, 1)) for b in rec['log']['buffers']]}"
                 + (f", error {rec['error'][:200]}" if rec.get("error") else ""))
        return rec

    def serve(self) -> None:
        # a fresh store: tags left by an earlier run would name that run's stand-in files
        shutil.rmtree(self.server.models_dir, ignore_errors=True)
        self.server.start()
        self.result["version"] = self.server.version
        self.result["levels"] = ensure_tags(self.server, self.ggufs, self.say)

    def restart(self) -> None:
        """Start the server again so its GPU discovery sees the CUDA backend built meanwhile."""
        mark = self.log.offset()
        self.server.restart({})
        self.result["discovery"] = [ln.rstrip() for ln in self.log.lines_since(mark)
                                    if "discover" in ln.lower() or "inference compute" in ln.lower()][:40]
        self.say(f"part 2: server restarted; discovery: {self.result['discovery'][-3:]}")

    def free_card(self) -> None:
        for ctx in CTX_LADDER:
            self._load(ctx=ctx, label="free card, flash attention auto")

    def fa_off(self) -> None:
        """The compute buffer with flash attention off (the last step: the hog lets go first)."""
        if self.worker is not None:
            self.result["released"] = self.worker.ask({"op": "release"})
        self.server.restart({"OLLAMA_FLASH_ATTENTION": "0"})
        for ctx in FA_OFF_LADDER:
            self._load(ctx=ctx, label="free card, flash attention off")

    def hog(self, leave: int | None = None) -> None:
        free = {r["ctx"]: r for r in self.result["loads"] if r["label"].startswith("free card")}
        leave = leave if leave is not None else leave_mib(free.get(FITS_CTX), free.get(WANT_CTX))
        self.result["leave_mib"] = leave
        if self.worker is None:
            self.result["hog"] = {"skipped": "no CUDA process"}
            return
        self.result["hog"] = self.worker.ask({"op": "hold", "leave_mib": leave})
        self.say(f"part 2: hog holds {self.result['hog'].get('held_mib')} MiB, driver free "
                 f"{(self.result['hog'].get('free') or 0) // MiB} MiB (asked to leave {leave})")

    def full_card(self) -> None:
        self._load(ctx=FITS_CTX, label="full card, Ollama's default placement")
        self._load(ctx=WANT_CTX, label="full card, Ollama's default placement")   # llama.cpp's fit spills layers
        self._load(ctx=WANT_CTX, label="full card, all layers forced to the GPU", options={"num_gpu": 999})

    def diagnose(self, timeout_s: float, budget: str | None = None) -> None:
        self.result["diagnose"] = diagnose(self.server.host, self.out, self.serve_log, timeout_s, budget=budget)
        d = self.result["diagnose"]
        self.say(f"part 2: diagnose rc {d['rc']} in {d['took_s']}s, verified {d['verified']}")

    def close(self) -> None:
        if self.worker is not None and "released" not in self.result:
            self.result["released"] = self.worker.ask({"op": "release"})
        self.server.stop()
        for r in self.readers:
            r.close()
