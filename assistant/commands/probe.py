"""``oomvet probe NAME``: run one measurement procedure on its own.

The five probes of the method, each runnable alone against any world (a
user's Ollama, ``--rig``, ``--simulate``), printing a table or, with
``--json``, one JSON object with the facts it would post to the rules.
"""
from __future__ import annotations

import json
import sys

from rich.console import Console

from assistant.session import render
from common.catalog import get_lang, set_lang, t
from common.errors import ExitCode

from assistant.session.args import settle_s
from assistant.session.world import WorldOptions, add_world_args, open_world, require_model
from probes import backend, baseline, context, quant, stability
from rules.engine import read_measurements
from rules.facts import MEASUREMENTS
from rules.thresholds import QUANT_SKIP_SLACK, fit_limit
from probes.units import fmt_size

NAMES = ("baseline", "context", "quant", "backend", "stability")


def add_parser(sub) -> None:
    p = sub.add_parser("probe", help="run one measurement: baseline, context, quant, backend, stability",
                       description="Run one of the five measurement procedures on its own and print what it "
                                   "measured, then how the rules read each measurement (\"readings\" in --json). "
                                   "Exits 0 when the probe ran to the end, 1 when it broke off.")
    p.add_argument("name", choices=NAMES, metavar="NAME", help="one of: " + ", ".join(NAMES))
    add_world_args(p)
    p.add_argument("--num-ctx", type=int, default=2048, help="context length to load at (default 2048)")
    p.add_argument("--num-batch", type=int, default=512, help="batch size (default 512)")
    p.add_argument("--settle", type=float, default=None,
                   help="baseline: seconds to watch memory after load (default 30; 5 with --rig)")
    p.add_argument("--tiers", help="context: comma-separated num_ctx tiers (default: planned from the model)")
    p.add_argument("--want-ctx", type=int, help="context: the context you need")
    p.add_argument("--knob", choices=backend.KNOBS, help="backend: the one knob to change")
    p.add_argument("--value", help="backend: its new value")
    p.add_argument("--num-predict", type=int, default=stability.NUM_PREDICT, help="stability: tokens to generate")
    p.add_argument("--allow-pull", action="store_true", help="quant: pull a missing model (never by default)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout and nothing else")
    p.add_argument("--lang", choices=("en", "zh"))
    p.set_defaults(run=run)


def run(args) -> int:
    set_lang(args.lang)
    model = require_model(args)
    err = Console(stderr=True)
    if args.name == "backend" and (args.knob is None or args.value is None):
        from common.errors import UsageError
        raise UsageError(t("probe.knob_needed"))
    value = args.value
    if args.name == "backend" and args.knob != "kv_cache_type":
        value = _positive_int(value)  # bad input is refused before anything is measured
    with open_world(WorldOptions.from_args(args), log=lambda m: err.print(m, markup=False, highlight=False)) as world:
        if not args.json:
            err.print(t("probe.source", source=world.selection.reader.name, why=world.selection.why))
            err.print(t("probe.limit", limit=fmt_size(world.limit.bytes), note=world.limit.note))
            err.print(t("probe.running", name=args.name, model=model, where=world.host))
        result = _dispatch(args, world, model, value)
        readings = read_result(args.name, result, world.limit.bytes, world.env.on_gpu)
        payload = {"probe": args.name, "model": model, "host": world.host, "limit": world.limit.bytes,
                   "memory_source": world.selection.reader.name, "device": world.device_fact(),
                   "server": world.server_fact,
                   **result.to_dict(), "readings": readings}
    if args.json:
        sys.stdout.write(json.dumps(payload, default=str) + "\n")
    else:
        out = Console()
        out.print(result)
        lang_zh = get_lang() == "zh"
        for reading in (r for r in readings if r):
            out.print(t("render.reading", text=reading["note_zh" if lang_zh else "note"]), highlight=False)
        for note in result.notes:
            out.print(t("probe.note", text=render.note(note)), highlight=False)
    return ExitCode.OK if result.ok else ExitCode.NO_FIT


def read_result(name: str, result, limit: int | None, on_gpu: bool) -> list[dict | None]:
    """The rules' reading of each measurement of a probe run alone (the probe
    posts no verdict): under the world's limit, or none when it has none."""
    facts = [f for f in result.facts if f["kind"] in MEASUREMENTS]
    if not facts:
        return []
    return read_measurements(name, facts, limit=limit or NO_LIMIT, gpu=on_gpu)


#: the limit of a world that has none: a reading then says only what failed
NO_LIMIT = 1 << 62


def _dispatch(args, world, model, value):
    env = world.env
    if args.name == "baseline":
        return baseline.run(env, model, num_ctx=args.num_ctx, num_batch=args.num_batch,
                            settle_s=settle_s(args.settle, world))
    if args.name == "context":
        tiers = [int(x) for x in args.tiers.split(",")] if args.tiers else None
        return context.run(env, model, tiers=tiers, want_ctx=args.want_ctx, num_batch=args.num_batch,
                           fit_limit_bytes=None if env.limit_bytes is None else fit_limit(env.limit_bytes))
    if args.name == "quant":
        return quant.run(env, model, num_ctx=args.num_ctx, allow_pull=args.allow_pull,
                         fit_limit_bytes=None if env.limit_bytes is None else fit_limit(env.limit_bytes),
                         prediction_slack=QUANT_SKIP_SLACK)
    if args.name == "backend":
        return backend.run(env, model, args.knob, value, num_ctx=args.num_ctx, num_batch=args.num_batch)
    config = {"model": model, "max_context_len": args.num_ctx, "max_batch_size": args.num_batch,
              "max_concurrency": 1}
    return stability.run(env, config, num_predict=args.num_predict)


def _positive_int(text: str) -> int:
    from common.errors import UsageError

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(t("probe.bad_value", value=text))
    return value
