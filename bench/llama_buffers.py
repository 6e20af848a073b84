#!/usr/bin/env python3
"""llama-server's own buffers for any shape, in a second each: the data the
current engine's memory model is derived from and checked on.

    OOMVET_RIG_CACHE=/work/main/.cache .venv/bin/python bench/llama_buffers.py \
        [--models shape-llama3.1-8b,...] [--contexts 4096,16384,32768] [--ub 512,1024] \
        [--fa on,off] [--kv f16,q8_0] [--parallel 1,4] [--out FILE.jsonl]

Starts the rig's llama-server (v0.34.4's, the binary Ollama runs) directly on
each stand-in with the flags Ollama would pass (``-c ctx*parallel -np P -b UB
-ub UB --flash-attn X --cache-type-k/v``), reads the buffer lines it logs
while it loads (weights, KV, compute, output), and stops it before it serves
anything. The weights are mapped, not read, so even a 7 GiB shape takes about
a second: the buffers are sized from the shapes alone. Prints one row per
load with oomvet's prediction beside it; ``--out`` appends JSON lines.
Not a test: the figures go into bench/README.md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oomrig.paths import CURRENT_VERSION, default_paths  # noqa: E402
from oomrig.standins import SHAPES, standin_path, write_gguf  # noqa: E402
from probes import memmodel, serverlog  # noqa: E402
from probes.memmodel import Arch  # noqa: E402

MIB = 1 << 20


def arch_of(shape) -> Arch:
    return Arch(arch=shape.arch, block_count=shape.layers, head_count=shape.heads, head_count_kv=shape.heads_kv,
                embedding_length=shape.embd, context_length=shape.ctx_train, vocab_size=shape.vocab,
                key_length=shape.head_dim, value_length=shape.head_dim, sliding_window=shape.sliding_window,
                feed_forward_length=shape.ffn, expert_count=shape.experts, expert_used_count=shape.experts_used,
                expert_feed_forward_length=shape.expert_ffn or None)


def buffers(binary: Path, model: Path, ctx: int, parallel: int, ub: int, fa: str, kv: str) -> dict:
    cmd = [str(binary), "--model", str(model), "--port", "0", "--host", "127.0.0.1", "--no-webui", "--offline",
           "-c", str(ctx * parallel), "-np", str(parallel), "-b", str(ub), "-ub", str(ub), "--flash-attn", fa,
           "--cache-type-k", kv, "--cache-type-v", kv, "--log-verbosity", "4", "--no-log-prefix",
           "--no-log-timestamps", "-t", "1"]
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    lines = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for line in proc.stdout:
            lines.append(line)
            if "compute buffer size" in line and any("output buffer size" in x for x in lines) \
                    or "failed to load model" in line or "error" in line.lower() and "main:" in line:
                # the compute buffer is the last one sized; the host copy line may follow
                break
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or "server is listening" in line or "model loaded" in line:
                break
            lines.append(line)
    finally:
        proc.kill()
        proc.wait()
    digest = serverlog.parse(lines)
    got = {}
    for b in digest.buffers:
        got[b["kind"]] = got.get(b["kind"], 0) + b["bytes"]
    return {"buffers": got, "projected": (digest.fit or {}).get("projected"),
            "errors": digest.errors[:2] + digest.oom_lines[:2]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--contexts", default="4096,16384,32768")
    parser.add_argument("--ub", default="auto", help="micro-batch sizes, or auto: Ollama's choice per context")
    parser.add_argument("--fa", default="on,off")
    parser.add_argument("--kv", default="f16,q8_0")
    parser.add_argument("--parallel", default="1,4")
    parser.add_argument("--level", default="Q4_K_M")
    parser.add_argument("--out")
    args = parser.parse_args()
    paths = default_paths(CURRENT_VERSION)
    binary = paths.llama_server
    if not binary.is_file():
        parser.exit(2, f"llama_buffers: no llama-server at {binary} (run scripts/setup.sh)\n")
    out = open(args.out, "a") if args.out else None
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    worst = 0.0
    print(f"{'model':18s} {'ctx':>6s} {'ub':>5s} fa  kv   par {'KV':>8s} {'compute':>8s} {'oomvet':>8s} {'err':>6s}")
    for name in split(args.models):
        shape = SHAPES[name]
        model = standin_path(paths, shape, args.level)
        if not model.is_file():
            write_gguf(shape, args.level, model)
        arch = arch_of(shape)
        grid = itertools.product(map(int, split(args.contexts)), split(args.fa), split(args.kv),
                                 map(int, split(args.parallel)))
        for ctx, fa, kv, par in grid:
            if kv != "f16" and fa == "off":
                continue  # a quantized V cache needs flash attention
            ubs = [memmodel.automatic_batch(memmodel.ENGINE_LLAMA_SERVER, ctx)] if args.ub == "auto" \
                else list(map(int, split(args.ub)))
            for ub in ubs:
                got = buffers(binary, model, ctx, par, ub, fa, kv)
                fp = memmodel.footprint(memmodel.ENGINE_LLAMA_SERVER, arch, 0, ctx, par, kv, ub,
                                        flash_attention=fa == "on")
                measured = got["buffers"].get("compute")
                e = (fp.compute - measured) / measured if measured else None
                worst = max(worst, abs(e)) if e is not None else worst
                print(f"{name[6:]:18s} {ctx:6d} {ub:5d} {fa:3s} {kv:4s} {par:3d} "
                      f"{got['buffers'].get('KV', 0) / MIB:7.1f}M {(measured or 0) / MIB:7.1f}M "
                      f"{fp.compute / MIB:7.1f}M {'' if e is None else f'{100 * e:+.1f}%':>6s}"
                      + (f"  {got['errors'][0][:60]}" if got["errors"] else ""), flush=True)
                if out:
                    out.write(json.dumps({"model": name, "arch": arch.__dict__, "ctx": ctx, "ub": ub, "fa": fa,
                                          "kv": kv, "parallel": par, **got,
                                          "predicted": fp.to_dict()}) + "\n")
                    out.flush()
    print(f"worst compute error: {100 * worst:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
