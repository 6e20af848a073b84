"""``oomvet plan``: what each tag of a model should need on a card, without loading anything.

For every tag of the model on the server: the memory model's weights, KV
bytes per token and compute buffer (``probes/predict.py``, the server's own
engine), the peak its process should reach with the context filled
(``total``; ``buffers`` in ``--json`` is what the server's log would list),
the largest context whose peak is predicted to fit under the card with the
rules' safety margin, and what the server's own default context would allocate on
that card (the current engine picks 4k / 32k / 256k by total VRAM, a common
surprise OOM). Predictions only: nothing here is measured, and the output
says so.
"""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich import box
from rich.table import Table

from common.catalog import pair, t
from common.errors import ExitCode, UsageError

from assistant.session.world import WorldOptions, add_world_args, open_world, require_model
from probes import memmodel, predict
from probes.units import SizeError, fmt_size, parse_size
from rules.thresholds import fit_limit


STEP = 256


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("plan", help=t("cmd_plan.help", "en"), description=" / ".join(pair("cmd_plan.help")))
    add_world_args(p)
    p.add_argument("--vram", metavar="SIZE", help="the card to plan for (default: this device, or --budget)")
    p.add_argument("--ctx", metavar="N", help="also show the total at this num_ctx (default: the server's default)")
    p.add_argument("--parallel", metavar="P", default="1", help="OLLAMA_NUM_PARALLEL to plan for (default 1)")
    p.add_argument("--kv", metavar="TYPE", default="f16", help="KV cache type: f16, q8_0, q4_0 ... (default f16)")
    p.add_argument("--fa", choices=("server", "on", "off"), default="server",
                   help="flash attention: as the server runs it (default; read from its settings, planned "
                        "without it when they cannot be read), or on / off")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def _positive(text) -> int:
    try:
        value = int(str(text))
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(t("cmd_plan.bad_ctx", value=text))
    return value


def _arguments(args) -> tuple[int | None, int, str, int | None]:
    ctx = _positive(args.ctx) if args.ctx is not None else None
    parallel = _positive(args.parallel)
    kv = str(args.kv).lower()
    if kv not in memmodel.LLAMA_SERVER_KV_BYTES:
        raise UsageError(t("cmd_plan.bad_kv", known=", ".join(memmodel.LLAMA_SERVER_KV_BYTES), value=args.kv))
    vram = None
    if args.vram is not None:
        try:
            vram = parse_size(args.vram)
        except SizeError as exc:
            raise UsageError(t("cmd_plan.bad_vram", why=exc)) from None
    return ctx, parallel, kv, vram


class _Card:
    """The device as ``predict.default_ctx`` reads it, for a card being planned for."""

    def __init__(self, vendor: str, total: int):
        self.vendor, self.total_bytes = vendor, total


def plan(api, model: str, device, server_env: dict, vram: int, ctx: int | None = None, parallel: int = 1,
         kv: str = "f16", fa: str = "server") -> dict:
    """The whole plan as one dict (what ``--json`` prints)."""
    version, engine = predict.server_engine(api)
    on_gpu = getattr(device, "vendor", None) in ("nvidia", "amd", "apple", "simulated")
    flash = {"on": True, "off": False}.get(fa, predict.flash_attention(engine, server_env, on_gpu))
    fa_source = "given" if fa in ("on", "off") else ("server" if flash is not None else "unknown")
    if flash is None:
        flash = False   # not read: planned with the larger compute buffer
    limit = fit_limit(vram)
    base = model.split(":", 1)[0]
    tags = [model] + [name for name in api.siblings(model)]
    rows = []
    default_for_model = None
    for tag in tags:
        shape = predict.read_shape(api, tag, on_gpu=on_gpu)
        unknown_arch = predict.no_prediction(shape, engine)
        if unknown_arch:
            rows.append({"model": tag, "level": shape.level, "predicted": False, "architecture": unknown_arch})
            continue
        footprint = predict.predictor(shape, engine, kv, flash_attention=flash)
        trained = shape.arch.context_length or None
        default = predict.default_ctx(engine, device, server_env, trained)
        if tag == model:
            default_for_model = default
        at = ctx or default
        f = footprint(at, parallel)
        top = trained or 262144
        max_ctx = memmodel.largest_fitting_ctx(lambda c: footprint(c, parallel).peak, limit, STEP, top, STEP)
        if max_ctx is not None and trained and footprint(trained, parallel).peak <= limit:
            max_ctx = trained
        default_total = footprint(default, parallel).peak
        rows.append({"model": tag, "level": shape.level, "predicted": True, "weights": f.weights,
                     "weights_source": shape.weights_source,
                     "kv_per_token": int(round(memmodel.kv_per_token(engine, shape.arch, kv))),
                     "compute": f.compute, "num_ctx": f.num_ctx, "buffers": f.total, "total": f.peak,
                     "max_ctx": max_ctx,
                     "trained_ctx": trained, "server_default_ctx": default, "default_total": default_total,
                     "default_fits": default_total <= limit})
    return {"model": model, "base": base, "engine": engine, "version": version, "vram": vram, "fit_limit": limit,
            "num_parallel": parallel, "kv_cache_type": kv, "server_default_ctx": default_for_model,
            "flash_attention": flash, "flash_attention_source": fa_source,
            "expected_error": predict.EXPECTED_ERROR[engine], "predicted": True, "tags": rows}


def run(args) -> int:
    model = require_model(args)
    ctx, parallel, kv, vram = _arguments(args)  # bad input is refused before any server starts
    with open_world(WorldOptions.from_args(args)) as world:
        device = world.selection.reader.info()
        if vram is not None:
            card, planned = vram, _Card("nvidia", vram)   # a GPU of that size: its VRAM sets the default
        else:
            card, planned = int(world.limit.bytes), device  # what this device can give (or --budget)
        result = plan(world.env.api, model, planned, world.env.control.env(), card, ctx, parallel, kv, args.fa)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return ExitCode.OK
    out = Console()
    if any(row["predicted"] for row in result["tags"]):
        out.print(render(result, ctx))
    for row in result["tags"]:
        if not row["predicted"]:
            out.print(t("cmd_plan.no_prediction", model=row["model"], arch=row["architecture"]), highlight=False)
    first = result["tags"][0]
    if first["predicted"]:
        verdict = t("cmd_plan.default_fits") if first["default_fits"] else t("cmd_plan.default_over")
        out.print(t("cmd_plan.default_note", ctx=first["server_default_ctx"], verdict=verdict), highlight=False)
    out.print(t(f"cmd_plan.fa_{result['flash_attention_source']}",
                state=t("cmd_plan.on" if result["flash_attention"] else "cmd_plan.off")), highlight=False)
    error = result["expected_error"]
    out.print(t("cmd_plan.expected_error", peak=_pct(error["peak"]), buffers=_pct(error["buffers"])),
              highlight=False)
    return ExitCode.OK


def _pct(share: float) -> str:
    return f"{100 * share:.1f}".rstrip("0").rstrip(".")


def render(result: dict, ctx: int | None) -> Table:
    """The per-tag table. The tag is the one column a user needs whole: it never
    wraps or shortens (issue 31: an 80-column terminal showed "neohors…" in every
    row), nor does a figure (the headers are two short lines). The total at
    the server's default context is the "total at" column's without ``--ctx``,
    and in ``--json`` always."""
    table = Table(title=t("cmd_plan.title", model=result["model"], vram=fmt_size(result["vram"]),
                          engine=result["engine"], version=result["version"]), title_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, collapse_padding=True)
    at = ctx or result["server_default_ctx"]
    rows = [row for row in result["tags"] if row["predicted"]]
    table.add_column(t("cmd_plan.col_tag"), no_wrap=True, min_width=max(len(row["model"]) for row in rows))
    for key in ("col_weights", "col_kv", "col_compute"):
        table.add_column(t(f"cmd_plan.{key}"), justify="right", no_wrap=True)
    table.add_column(t("cmd_plan.col_at_ctx", ctx=at), justify="right", no_wrap=True)
    table.add_column(t("cmd_plan.col_max_ctx"), justify="right", no_wrap=True)
    table.add_column(t("cmd_plan.col_default"), justify="right", no_wrap=True, min_width=7)
    for row in rows:
        # one decimal: MiB-sized figures with two would push the table past 80 columns
        table.add_row(row["model"], fmt_size(row["weights"], 1), fmt_size(row["kv_per_token"], 1),
                      fmt_size(row["compute"], 1), fmt_size(row["total"], 1),
                      str(row["max_ctx"]) if row["max_ctx"] else t("cmd_plan.none"),
                      str(row["server_default_ctx"]))
    return table
