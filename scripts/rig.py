#!/usr/bin/env python3
"""The test rig from the shell: build/reuse everything, or serve until Ctrl-C.

    python scripts/rig.py setup    # build Ollama v0.11.4, make the GGUFs, create the neohorse-1 tags
    python scripts/rig.py serve    # the same, then serve on a free loopback port until Ctrl-C
"""
from __future__ import annotations

import argparse
import signal
import sys
import time

from probes.errors import ProbeError
from probes.rig import Rig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("setup", "serve"))
    args = parser.parse_args()
    started = time.monotonic()
    try:
        with Rig() as rig:
            print(f"rig ready in {time.monotonic() - started:.0f}s: Ollama {rig.server.version} at {rig.host}; "
                  f"tags: {', '.join(f'{t} ({lvl})' for t, lvl in rig.levels.items())}", flush=True)
            if args.action == "serve":
                print(f"OLLAMA_HOST={rig.host}  (Ctrl-C stops it)", flush=True)
                signal.sigwait({signal.SIGINT, signal.SIGTERM}) if hasattr(signal, "sigwait") else input()
    except ProbeError as exc:
        print(f"rig: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
