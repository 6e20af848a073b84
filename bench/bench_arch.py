#!/usr/bin/env python3
"""The memory model on real architectures: predicted against measured, per load.

    OOMVET_RIG_CACHE=/work/main/.cache .venv/bin/python bench/bench_arch.py [--rig-version 0.11.4]
        [--models shape-llama3.1-8b,...] [--contexts 4096,16384,32768] [--parallel 1,4]
        [--out bench/results/arch-0.34.4.jsonl]

One engine per run (the rig's v0.34.4 by default). The stand-ins
(``oomrig/standins.py``: five published shapes at Q4_K_M, zero-valued,
sparse) are written once and registered in the engine's store. For each
server configuration (flash attention on or off; KV f16, or q8_0 with
flash attention on; ``OLLAMA_NUM_PARALLEL`` 1 or 4) the rig server is
started with those settings, and each model x context is loaded for real
with a one-token request. Each row records:

* the buffers the engine logged (weights, KV, compute, output: what a GPU
  would have to hold, and what /api/ps reports on v0.34.4),
* the model process's peak resident memory (VmHWM),
* llama.cpp's own projection ("projected to use X MiB") where it prints one,
* /api/ps ``size``, and oomvet's prediction for the same settings,

and the error of each against the logged buffers. A load whose predicted
total would not fit in this machine's memory (less 4 GiB) is skipped and
says so. Rows go to a JSON-lines file (one per load, appended as they come,
so an interrupted run keeps what it measured) and a table on stdout.
Not a test: the figures go into bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oomrig import Rig  # noqa: E402
from oomrig.standins import LOADED, SHAPES, ensure_standins, tag  # noqa: E402
from probes import memmodel, predict, serverlog  # noqa: E402
from probes.ollama_api import Ollama  # noqa: E402

MIB = 1 << 20


def _terminate(signum, frame):
    raise KeyboardInterrupt  # a kill unwinds like Ctrl-C: the rig's server is stopped


def configs(parallels: list[int]) -> list[dict]:
    """Server settings to measure: FA off/f16, FA on/f16, FA on/q8_0, per parallel."""
    out = []
    for par in parallels:
        for fa, kv in (("0", "f16"), ("1", "f16"), ("1", "q8_0")):
            out.append({"OLLAMA_FLASH_ATTENTION": fa, "OLLAMA_KV_CACHE_TYPE": kv, "OLLAMA_NUM_PARALLEL": str(par)})
    return out


def model_pid(server_pid: int) -> int | None:
    """The model process under the server (llama-server, or ``ollama runner``)."""
    try:
        for child in psutil.Process(server_pid).children(recursive=True):
            cmd = " ".join(child.cmdline())
            if "llama-server" in cmd or " runner" in cmd:
                return child.pid
    except psutil.Error:
        return None
    return None


def vm_hwm(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def measure(rig: Rig, api: Ollama, log: serverlog.FileLog, model: str, ctx: int) -> dict:
    mark = log.offset()
    started = time.monotonic()
    gen = api.generate(model, "hi", options={"num_ctx": ctx, "num_predict": 1, "temperature": 0})
    row = {"load_s": round(time.monotonic() - started, 1), "ok": gen.ok, "error": gen.error}
    pid = model_pid(rig.server_pid)
    row["peak_rss"] = vm_hwm(pid) if pid else None
    loaded = api.loaded(model)
    row["ps_size"] = loaded.size_bytes if loaded else None
    digest = serverlog.parse(log.lines_since(mark))
    row["buffers"] = {}
    for b in digest.buffers:
        row["buffers"][b["kind"]] = row["buffers"].get(b["kind"], 0) + b["bytes"]
    row["buffer_sum"] = sum(row["buffers"].values()) or None
    # llama.cpp's fit line counts only the "Host" buffer type; on a CPU the
    # repacked weights (CPU_REPACK) sit in a row of their own: sum the
    # breakdown's rows, the first table (printed before the load)
    row["projected_line"] = (digest.fit or {}).get("projected")
    row["projected"] = breakdown_total(log.lines_since(mark)) or row["projected_line"]
    row["cmdline"] = {k: v for k, v in (digest.cmdline or {}).items() if k != "model_path"}
    api.unload(model, wait_s=120)
    return row


_BREAKDOWN_ROW = re.compile(r"common_memory_breakdown_print:\s*\|\s*- (?P<dev>\S+)\s*\|\s*(?P<mib>\d+) =")


def breakdown_total(lines: list[str]) -> int | None:
    """Bytes of llama.cpp's first memory breakdown table, all rows."""
    total, seen = 0, set()
    for line in lines:
        m = _BREAKDOWN_ROW.search(line)
        if m:
            if m.group("dev") in seen:
                break
            seen.add(m.group("dev"))
            total += int(m.group("mib")) * MIB
    return total or None


def err(pred, truth) -> str:
    return "—" if not pred or not truth else f"{100 * (pred - truth) / truth:+.1f}%"


def shape_arch(shape) -> memmodel.Arch:
    """The memory model's view of a stand-in, from the shape it was written with."""
    dk = shape.head_dim if shape.head_dim else None
    return memmodel.Arch(shape.arch, shape.layers, shape.heads, shape.heads_kv, shape.embd, shape.ctx_train,
                         shape.vocab, key_length=dk, value_length=dk, sliding_window=shape.sliding_window,
                         feed_forward_length=shape.ffn, expert_count=shape.experts,
                         expert_used_count=shape.experts_used, expert_feed_forward_length=shape.expert_ffn or None)


def rescore(path: Path) -> int:
    """The rows of an earlier run, scored against the memory model as it is
    now (the loads' logged buffers do not change; the prediction may)."""
    print("| shape | ctx | FA | KV | slots | buffers MiB | oomvet total | compute MiB logged / predicted |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if not row.get("ok") or not row.get("buffer_sum"):
            continue
        arch = shape_arch(SHAPES[row["model"]])
        fp = memmodel.footprint(row["engine"], arch, row["buffers"]["model"], row["ctx"], row["parallel"], row["kv"],
                                flash_attention=row["fa"] == "1")
        scored = "KV" in row["buffers"]  # Ollama's Go engine logs no KV line: its sum is not the load's
        error = err(fp.total, row["buffer_sum"]) if scored else "—"
        if scored:
            worst = max(worst, abs(fp.total - row["buffer_sum"]) / row["buffer_sum"])
        print(f"| {row['model'].removeprefix('shape-')} | {row['ctx']} | {'on' if row['fa'] == '1' else 'off'} "
              f"| {row['kv']} | {row['parallel']} | {row['buffer_sum'] / MIB:.0f} | {error} "
              f"| {row['buffers'].get('compute', 0) / MIB:.0f} / {fp.compute / MIB:.0f} |")
    print(f"worst |error| of the total where the log has every buffer: {100 * worst:.2f}%")
    return 0


def main() -> int:
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rig-version", default=None, help="0.34.4 (default) or 0.11.4")
    parser.add_argument("--models", default=",".join(LOADED),
                        help=f"stand-in names, comma-separated (known: {', '.join(SHAPES)})")
    parser.add_argument("--contexts", default="4096,16384,32768")
    parser.add_argument("--parallel", default="1,4")
    parser.add_argument("--level", default="Q4_K_M")
    parser.add_argument("--only", help="one configuration, e.g. fa=1,kv=q8_0,par=4")
    parser.add_argument("--out", help="JSON-lines file to append rows to")
    parser.add_argument("--rescore", metavar="FILE",
                        help="load nothing: print FILE's rows (an --out file) against today's memory model")
    args = parser.parse_args()
    if args.rescore:
        return rescore(Path(args.rescore))
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        parser.exit(2, f"bench_arch: no stand-in {', '.join(unknown)} (known: {', '.join(SHAPES)})\n")
    contexts = [int(c) for c in args.contexts.split(",")]
    room = psutil.virtual_memory().total - 4 * (1 << 30)
    out = open(args.out, "a") if args.out else None
    todo = configs([int(p) for p in args.parallel.split(",")])
    if args.only:
        want = dict(kv.split("=") for kv in args.only.split(","))
        todo = [c for c in todo if c["OLLAMA_FLASH_ATTENTION"] == want.get("fa", c["OLLAMA_FLASH_ATTENTION"])
                and c["OLLAMA_KV_CACHE_TYPE"] == want.get("kv", c["OLLAMA_KV_CACHE_TYPE"])
                and c["OLLAMA_NUM_PARALLEL"] == want.get("par", c["OLLAMA_NUM_PARALLEL"])]
    began = time.monotonic()
    print(f"{'model':20s} {'ctx':>6s} fa kv   par {'buffers':>9s} {'peak RSS':>9s} {'oomvet':>7s} "
          f"{'llama.cpp':>9s} {'/api/ps':>7s}", flush=True)
    for n, env in enumerate(todo, 1):
        with Rig(env=env, version=args.rig_version, log=lambda m: print(f"[rig] {m}", file=sys.stderr)) as rig:
            ensure_standins(rig.server, rig.paths, names, (args.level,), log=lambda m: print(f"[rig] {m}", file=sys.stderr))
            api = Ollama(rig.host, timeout_s=1800)
            version, engine = predict.server_engine(api)
            log = serverlog.FileLog(rig.server.log_path)
            fa, kv, par = env["OLLAMA_FLASH_ATTENTION"], env["OLLAMA_KV_CACHE_TYPE"], int(env["OLLAMA_NUM_PARALLEL"])
            for name in names:
                model = tag(SHAPES[name], args.level)
                shape = predict.read_shape(api, model)
                for ctx in contexts:
                    fp = memmodel.footprint(engine, shape.arch, shape.weights_bytes, ctx, par, kv,
                                            flash_attention=fa == "1")
                    head = f"{name:20s} {ctx:6d} {fa:2s} {kv:4s} {par:3d}"
                    if fp.total > room:
                        print(f"{head} skipped: predicted {fp.total / 2**30:.1f} GiB > {room / 2**30:.1f} GiB here")
                        continue
                    row = measure(rig, api, log, model, ctx)
                    row.update(engine=engine, version=version, model=name, level=args.level, ctx=ctx, fa=fa, kv=kv,
                               parallel=par, predicted=fp.to_dict())
                    truth = row["buffer_sum"]
                    print(f"{head} {(truth or 0) / MIB:8.0f}M {(row['peak_rss'] or 0) / MIB:8.0f}M "
                          f"{err(fp.total, truth):>7s} {err(row['projected'], truth):>9s} "
                          f"{err(row['ps_size'], truth):>7s}" + ("" if row["ok"] else f"  FAILED {row['error']}"),
                          flush=True)
                    if out:
                        out.write(json.dumps(row) + "\n")
                        out.flush()
        spent = time.monotonic() - began
        print(f"[{n}/{len(todo)} configurations, {spent / 60:.1f} min, about "
              f"{spent / n * (len(todo) - n) / 60:.0f} min left]", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
