#!/usr/bin/env python3
"""The context search against a fine sweep and the old x4 ladder, on the rig.

    OOMVET_RIG_CACHE=/work/main/.cache [OOMVET_RIG_VERSION=legacy] .venv/bin/python bench/bench_search.py

One engine per run: the rig's current v0.34.4 by default,
``OOMVET_RIG_VERSION=legacy`` for v0.11.4 (``--ollama-bin`` points at another
build). The F16 stand-in is swept every 256
tokens from 2048 to its trained 8192 (every point a load plus a prompt that
fills 85 %, as the context step measures), which gives the true largest
fitting context for any budget. Three budgets between the 2048 peak and the
8192 peak are then searched (``probes/search.py``) and laddered (2048, 4096,
8192 as the seed did), each in the same run. Prints loads, the context found,
its share of the true maximum and the wall time. Not a test: the figures go
into bench/README.md.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes import context# noqa: E402
from probes.base import ProbeEnv  # noqa: E402
from probes.memory.host import HostReader  # noqa: E402
from probes.ollama_api import Ollama  # noqa: E402
from oomrig import Rig  # noqa: E402
from probes.units import fmt_size  # noqa: E402
from rules.thresholds import fit_limit  # noqa: E402

MODEL = "neohorse-1:f16"
TRAINED = 8192


def tier_points(result) -> dict[int, tuple[bool, int | None]]:
    # the server answered, and the peak; the bench judges the peak against its own limit
    return {f["num_ctx"]: (f["answered"], f["peak"]) for f in result.facts if f["kind"] == "tier"}


def _terminate(signum, frame):
    raise KeyboardInterrupt  # a kill unwinds like Ctrl-C, so the rig's server is stopped


def main() -> int:
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ollama-bin", help="another Ollama build (sets OLLAMA_BIN for the rig)")
    parser.add_argument("--step", type=int, default=256)
    parser.add_argument("--bracket", action="store_true",
                        help="instead of the sweep, prove each answer by re-measuring it and 256 above it "
                             "(the true max when peaks grow with the context); for a machine too busy to sweep")
    parser.add_argument("--fill", type=float, default=context.FILL,
                        help="share of num_ctx each request fills (default %(default)s; on a loaded 2-core "
                             "machine 0.02 keeps the sweep to minutes: the KV cache is allocated at load)")
    args = parser.parse_args()
    if args.ollama_bin:
        os.environ["OLLAMA_BIN"] = args.ollama_bin
    with Rig(log=lambda m: print(f"[rig] {m}", file=sys.stderr)) as rig:
        api = Ollama(rig.host)
        print(f"engine: Ollama {api.version()}  model {MODEL}  fill {args.fill}", flush=True)
        reader = HostReader(server_pid=lambda: rig.server_pid)  # the model process of either engine
        env = ProbeEnv(api=api, reader=reader, device=reader.info(), control=rig.server, timeout_s=7200)

        started = time.monotonic()
        sweep_ctx = list(range(2048, TRAINED + 1, args.step)) if not args.bracket else [2048, TRAINED]
        sweep = tier_points(context.run(env, MODEL, tiers=sweep_ctx, fill=args.fill))
        sweep_s = time.monotonic() - started
        print(f"{'sweep' if not args.bracket else 'ends'}: {len(sweep)} loads in {sweep_s:.0f}s; "
              f"peak 2048 {fmt_size(sweep[2048][1])}, 8192 {fmt_size(sweep[TRAINED][1])}", flush=True)
        low, high = sweep[2048][1], sweep[TRAINED][1]
        for share in (0.25, 0.5, 0.75):
            budget = int((low + share * (high - low)) / 0.95)  # the fit limit lands at that share
            limit = fit_limit(budget)
            true_max = max((c for c, (ok, peak) in sweep.items() if ok and peak is not None and peak <= limit),
                           default=None)
            env.limit_bytes = budget
            found_by = {}
            line = [f"budget {fmt_size(budget)} (fit {fmt_size(limit)}): true max {true_max}"]
            for name, kwargs in (("search", {}), ("ladder", {"tiers": [2048, 4096, 8192]})):
                t0 = time.monotonic()
                result = context.run(env, MODEL, want_ctx=TRAINED, fit_limit_bytes=limit, fill=args.fill, **kwargs)
                wall = time.monotonic() - t0
                points = tier_points(result)
                found = max((c for c, (ok, peak) in points.items() if ok and peak is not None and peak <= limit),
                            default=None)
                found_by[name] = found
                if args.bracket and name == "search" and found:
                    env.limit_bytes = None
                    proof = tier_points(context.run(env, MODEL, tiers=[found, found + 256], fill=args.fill))
                    env.limit_bytes = budget
                    above = proof.get(found + 256, (False, None))[1]
                    holds = proof[found][1] is not None and proof[found][1] <= limit and above and above > limit
                    true_max = found if holds else None
                    line[0] = (f"budget {fmt_size(budget)} (fit {fmt_size(limit)}): re-measured {found} "
                               f"{fmt_size(proof[found][1])}, {found + 256} {fmt_size(above)} -> true max "
                               f"{true_max if holds else 'not proved'}")
                share_of = f"{100 * found / true_max:.0f}%" if found and true_max else "—"
                line.append(f"{name}: {len(points)} loads, ctx {found}, {share_of} of true max, {wall:.0f}s")
            print(" | ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
