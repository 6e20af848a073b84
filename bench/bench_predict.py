#!/usr/bin/env python3
"""How well the memory model predicts the measured peak, before and after calibration.

    OOMVET_RIG_CACHE=/work/main/.cache [OOMVET_RIG_VERSION=legacy] .venv/bin/python bench/bench_predict.py

One engine per run: the rig's current v0.34.4 by default,
``OOMVET_RIG_VERSION=legacy`` for v0.11.4, or ``--ollama-bin`` for another
build. For the 3 stand-in tags x 4 contexts, each a real load plus a request
(the context step's measurement): the measured peak, and the error of
(a) the memory model alone, (b) calibrated with the 2048 load, (c) calibrated
with the 2048 and 8192 loads, (d) Ollama's own /api/ps ``size``. A calibration
point is not scored against itself ("cal" in its cell). Not a test: the
figures go into bench/README.md.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes import context, predict# noqa: E402
from probes.base import ProbeEnv  # noqa: E402
from probes.calibrate import Calibration  # noqa: E402
from probes.memory.host import HostReader  # noqa: E402
from probes.ollama_api import Ollama  # noqa: E402
from oomrig import Rig  # noqa: E402
from probes.units import fmt_size  # noqa: E402

TAGS = ("neohorse-1:f16", "neohorse-1:q8_0", "neohorse-1:q4_1")
CONTEXTS = (2048, 4096, 6144, 8192)


def err(pred: int | None, peak: int) -> str:
    return "—" if pred is None else f"{100 * (pred - peak) / peak:+.1f}%"


def _terminate(signum, frame):
    raise KeyboardInterrupt  # a kill unwinds like Ctrl-C, so the rig's server is stopped


def main() -> int:
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ollama-bin")
    parser.add_argument("--fill", type=float, default=context.FILL)
    args = parser.parse_args()
    if args.ollama_bin:
        os.environ["OLLAMA_BIN"] = args.ollama_bin
    with Rig(log=lambda m: print(f"[rig] {m}", file=sys.stderr)) as rig:
        api = Ollama(rig.host)
        _, engine = predict.server_engine(api)
        print(f"engine: Ollama {api.version()} ({engine})  fill {args.fill}", flush=True)
        reader = HostReader(server_pid=lambda: rig.server_pid)  # the model process of either engine
        env = ProbeEnv(api=api, reader=reader, device=reader.info(), control=rig.server, timeout_s=7200)
        print(f"{'tag':18s} {'num_ctx':>7s} {'peak':>10s} {'model':>8s} {'cal 1':>8s} {'cal 2':>8s} {'/api/ps':>8s}")
        worst = {"model": 0.0, "cal 1": 0.0, "cal 2": 0.0, "/api/ps": 0.0}
        for tag in TAGS:
            shape = predict.read_shape(api, tag)
            footprint = predict.predictor(shape, engine, num_batch=512)   # the probe sends num_batch 512
            result = context.run(env, tag, tiers=list(CONTEXTS), fill=args.fill)
            facts = {f["num_ctx"]: f for f in result.facts if f["kind"] == "tier"}
            one, two = Calibration(footprint), Calibration(footprint)
            one.add(2048, facts[2048]["peak"])
            two.add(2048, facts[2048]["peak"])
            two.add(8192, facts[8192]["peak"])
            for ctx in CONTEXTS:
                peak = facts[ctx]["peak"]
                if peak is None:
                    print(f"{tag:18s} {ctx:7d} unmeasured: {facts[ctx].get('unmeasured')}")
                    continue
                cells = {"model": one.uncalibrated(ctx), "cal 1": None if ctx == 2048 else one.predict(ctx),
                         "cal 2": None if ctx in (2048, 8192) else two.predict(ctx),
                         "/api/ps": facts[ctx].get("ps_size")}
                for k, v in cells.items():
                    if v is not None:
                        worst[k] = max(worst[k], abs(v - peak) / peak)
                shown = {k: (err(v, peak) if v is not None else "cal") for k, v in cells.items()}
                shown["/api/ps"] = err(cells["/api/ps"], peak)
                print(f"{tag:18s} {ctx:7d} {fmt_size(peak):>10s} {shown['model']:>8s} {shown['cal 1']:>8s} "
                      f"{shown['cal 2']:>8s} {shown['/api/ps']:>8s}", flush=True)
        print("worst |error|: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in worst.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
