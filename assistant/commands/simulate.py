"""``oomvet simulate SCENARIO.yaml [--port N]``: serve a simulated GPU + Ollama
until Ctrl-C, so any Ollama client (``ollama``, curl, ``oomvet chat --host``)
can be pointed at it. ``chat`` and ``diagnose`` start the same simulator
in-process with ``--simulate``; this command is for looking at it from outside.
"""
from __future__ import annotations

import argparse
import sys

from common.catalog import t
from common.errors import ExitCode
import oomsim as sim
from probes.units import fmt_size


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("simulate", help=t("cmd_simulate.help"),
                                   description=t("cmd_simulate.help"))
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help=t("cmd_simulate.arg_scenario"))
    parser.add_argument("--port", type=int, default=0, help=t("cmd_simulate.arg_port"))
    parser.add_argument("--lang", choices=("en", "zh"), help=argparse.SUPPRESS)
    parser.set_defaults(run=run)
    return parser


def run(args, out=None) -> int:
    out = out or sys.stdout
    lang = getattr(args, "lang", None)
    handle = sim.start(args.scenario, port=args.port)  # bad file or busy port: one line, exit 2
    try:
        scn = handle.scenario
        env = handle.state.env()
        dev = scn.device
        lines = [
            t("cmd_simulate.serving", lang, version=scn.server.version, url=handle.host),
            t("cmd_simulate.device", lang, name=dev.name, vendor=dev.vendor, total=fmt_size(dev.total_bytes),
              others=fmt_size(dev.used_by_others_bytes)),
            t("cmd_simulate.models", lang, tags=", ".join(m.tag for m in scn.models.values())),
            t("cmd_simulate.server", lang, parallel=env["OLLAMA_NUM_PARALLEL"], fa=env["OLLAMA_FLASH_ATTENTION"],
              kv=env["OLLAMA_KV_CACHE_TYPE"], ctx=env["OLLAMA_CONTEXT_LENGTH"]),
            t("cmd_simulate.hint", lang, url=handle.host, hostport=handle.host.split("://", 1)[1]),
            t("cmd_simulate.stop", lang),
        ]
        print("\n".join(lines), file=out, flush=True)
        handle.server.serve_forever()
    except KeyboardInterrupt:
        print(t("cmd_simulate.stopped", lang), file=out, flush=True)
    finally:
        handle.stop()
    return ExitCode.OK
