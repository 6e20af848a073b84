#!/usr/bin/env python3
"""Wall time of each probe on the rig's real Ollama (CPU), one run each.

    .venv/bin/python bench/bench_probes.py [--model neohorse-1:q8_0]

Prints one line per probe: wall seconds, ok, and the peak it measured. Not a
test: the figures go into bench/README.md by hand.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes import backend, baseline, context, quant, stability# noqa: E402
from probes.base import ProbeEnv  # noqa: E402
from probes.memory.select import select_reader  # noqa: E402
from probes.ollama_api import Ollama  # noqa: E402
from oomrig import Rig  # noqa: E402
from probes.units import fmt_size  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="neohorse-1:q8_0")
    args = parser.parse_args()
    started = time.monotonic()
    with Rig(log=lambda m: print(f"[rig] {m}", file=sys.stderr)) as rig:
        print(f"rig up in {time.monotonic() - started:.1f}s (Ollama {rig.server.version})")
        reader = select_reader(server_pid=lambda: rig.server_pid).reader
        env = ProbeEnv(api=Ollama(rig.host), reader=reader, device=reader.info(), control=rig.server)
        config = {"model": args.model, "max_context_len": 2048, "max_batch_size": 512, "max_concurrency": 1}
        runs = {
            "baseline (num_ctx 2048, settle 30 s)": lambda: baseline.run(env, args.model, settle_s=30),
            "context (tiers 2048/4096/8192)": lambda: context.run(env, args.model),
            "quant (from f16: q8_0, q4_1)": lambda: quant.run(env, "neohorse-1:f16"),
            "backend (num_parallel 1 -> 2, restart)": lambda: backend.run(env, args.model, "num_parallel", 2),
            "stability (fixed task, 128 tokens)": lambda: stability.run(env, config),
        }
        for name, run in runs.items():
            result = run()
            peaks = [c.peak_bytes for c in result.charts if c.peak_bytes is not None]
            print(f"{name:42s} {result.wall_s:7.1f} s  ok={result.ok!s:5s} peak={fmt_size(max(peaks) if peaks else None)}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
