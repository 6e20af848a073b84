#!/usr/bin/env python3
"""The test rig from the shell: build/reuse everything, or serve until Ctrl-C.

    python scripts/rig.py setup                       # both engines: Ollama v0.34.4 (llama-server) and v0.11.4,
                                                      # the GGUFs, the neohorse-1 tags in each engine's store
    python scripts/rig.py setup --rig-version 0.11.4  # one engine only
    python scripts/rig.py serve                       # v0.34.4 on a free loopback port until Ctrl-C
    python scripts/rig.py serve --rig-version 0.11.4  # the legacy engine instead
    python scripts/rig.py serve --env OLLAMA_NUM_PARALLEL=4 --env OLLAMA_KV_CACHE_TYPE=q8_0
                                                      # configured as a user's server would be

    python scripts/rig.py standins [--rig-version 0.11.4] [--level Q8_0]
                                                      # the real-size stand-ins (oomrig/standins.py): written
                                                      # once, sparse, and created in the engine's store

``OOMVET_RIG_VERSION`` is the default of ``--rig-version`` for ``serve``.
"""
from __future__ import annotations

import argparse
import signal
import sys
import time

from common.errors import ProbeError
from oomrig import CURRENT_VERSION, LEGACY_VERSION, Rig, resolve_version
from oomrig.standins import ensure_standins


def _ready(rig: Rig, started: float) -> None:
    print(f"rig ready in {time.monotonic() - started:.0f}s: Ollama {rig.server.version} ({rig.engine}) at "
          f"{rig.host}; tags: {', '.join(f'{t} ({lvl})' for t, lvl in rig.levels.items())}", flush=True)


def _until_stopped() -> None:
    """Wait for Ctrl-C or SIGTERM (``kill``, ``timeout``, a service manager's
    stop). Both are blocked first, so neither ends the process before the Rig
    has stopped the server it started; SIGINT counts even where the shell
    started this in the background with it ignored."""
    if not hasattr(signal, "sigwait"):
        input()
        return
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    signal.sigwait(stops)


def _settings(pairs: list[str]) -> dict[str, str]:
    """``["OLLAMA_NUM_PARALLEL=4", ...]`` -> a dict; anything else is refused."""
    settings = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.startswith(("OLLAMA_", "LLAMA_ARG_")) or not value:
            raise ValueError(f"--env takes KEY=VALUE with an OLLAMA_* or LLAMA_ARG_* key, not {pair!r}")
        if key in ("OLLAMA_HOST", "OLLAMA_MODELS"):
            raise ValueError(f"{key} is the rig's own (a free loopback port, its model store)")
        settings[key] = value
    return settings


def _stop(signum, frame):
    raise KeyboardInterrupt  # a SIGTERM during a build unwinds like Ctrl-C: what was started is stopped


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("setup", "serve", "standins"))
    parser.add_argument("--level", default="Q4_K_M", help="standins: Q4_K_M (default), Q8_0 or F16")
    parser.add_argument("--rig-version", metavar="V",
                        help=f"{CURRENT_VERSION} (current engine) or {LEGACY_VERSION} (legacy); "
                             "setup: default both, serve: default $OOMVET_RIG_VERSION or current")
    parser.add_argument("--env", metavar="KEY=VALUE", action="append", default=[],
                        help="serve: a server setting (OLLAMA_* or LLAMA_ARG_*), as a user sets it before "
                             "`ollama serve`; repeat for more. Without it the rig runs on Ollama's defaults")
    args = parser.parse_args()
    try:
        settings = _settings(args.env)
    except ValueError as exc:
        parser.exit(2, f"rig: {exc}\n")
    if settings and args.action != "serve":
        parser.exit(2, "rig: --env is for serve (setup builds, it serves nothing)\n")
    try:
        if args.action == "setup":
            versions = [resolve_version(args.rig_version)] if args.rig_version else [CURRENT_VERSION, LEGACY_VERSION]
        else:
            versions = [resolve_version(args.rig_version)]
        for version in versions:
            started = time.monotonic()
            with Rig(version=version, env=settings) as rig:
                _ready(rig, started)
                if args.action == "standins":
                    made = ensure_standins(rig.server, rig.paths, None, (args.level.upper(),))
                    print("\n".join(f"{tag}  {path}" for tag, path in made.items()), flush=True)
                if args.action == "serve":
                    print(f"OLLAMA_HOST={rig.host}  (Ctrl-C stops it)", flush=True)
                    _until_stopped()
    except ProbeError as exc:
        print(f"rig: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
