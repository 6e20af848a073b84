"""``oomvet plan``: what each tag of a model should need on a card, without loading anything.

For every tag of the model on the server: the memory model's weights, KV
bytes per token and compute buffer (``probes/predict.py``, the server's own
engine), the peak its process should reach with the context filled
(``total``; ``buffers`` in ``--json`` is what the server's log would list),
the largest context whose peak is predicted to fit under the card with the
rules' safety margin, and what the server's own default context would allocate on
that card (the current engine picks 4k / 32k / 256k by total VRAM, a common
surprise OOM). Predictions only: nothing here is measured, and the output
says so. With ``--also`` (more models loaded together) or ``--vram`` given
more than once (one per card) it plans the set: each model's peak, whether
their sum fits under the cards with the margin, else the largest contexts
that do (:func:`set_contexts`), ``OLLAMA_MAX_LOADED_MODELS`` against the set's
size, and where the engine puts each model's layers on the cards
(``probes/memmodel/placement.py``), each model after the ones before it.
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
from probes.base import known_keys
from probes.memory import devices_of
from probes.units import SizeError, fmt_size, parse_size
from rules.setplan import MIN_SET_CTX, fit_contexts
from rules.thresholds import SAFETY_MARGIN_FRACTION, fit_limit


STEP = 256
_GPUS = ("nvidia", "amd", "apple", "simulated")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("plan", help=t("cmd_plan.help", "en"), description=" / ".join(pair("cmd_plan.help")))
    add_world_args(p)
    p.add_argument("--also", metavar="MODEL", action="append", default=[], help=" / ".join(pair("plan_set.help_also")))
    p.add_argument("--vram", metavar="SIZE", action="append", help=" / ".join(pair("plan_set.help_vram")))
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


def _arguments(args) -> tuple[int | None, int, str, list[int] | None]:
    ctx = _positive(args.ctx) if args.ctx is not None else None
    parallel = _positive(args.parallel)
    kv = str(args.kv).lower()
    if kv not in memmodel.LLAMA_SERVER_KV_BYTES:
        raise UsageError(t("cmd_plan.bad_kv", known=", ".join(memmodel.LLAMA_SERVER_KV_BYTES), value=args.kv))
    cards = None
    if args.vram:
        cards = []
        for text in args.vram:
            try:
                cards.append(parse_size(text))
            except SizeError as exc:
                raise UsageError(t("cmd_plan.bad_vram", why=exc)) from None
            if cards[-1] <= 0:
                raise UsageError(t("plan_set.empty_card", value=text))
    return ctx, parallel, kv, cards


def _check_set(api, model: str, also: list[str]) -> None:
    """One line for an ``--also`` the server lacks or that is in the set twice."""
    names, digests = api.tags(), api.digests()
    seen = [model]
    for name in also:
        if not any(api.same_model(name, n, digests) for n in names):
            raise UsageError(t("plan_set.not_on_server", model=name, known=", ".join(names) or "-"))
        if any(api.same_model(name, n, digests) for n in seen):
            raise UsageError(t("plan_set.twice", model=name))
        seen.append(name)


class _Card:
    """The device as ``predict.default_ctx`` reads it, for a card being planned for."""

    def __init__(self, vendor: str, total: int):
        self.vendor, self.total_bytes = vendor, total


def _predict(api, tag: str, engine: str, device, server_env: dict | None, limit: int, ctx: int | None,
             parallel: int, kv: str, flash: bool, on_gpu: bool) -> tuple[dict, object, object]:
    """One tag's row (what ``--json`` lists), its ``(num_ctx, parallel) -> Footprint``
    (None without a prediction) and its shape."""
    shape = predict.read_shape(api, tag, on_gpu=on_gpu)
    unknown_arch = predict.no_prediction(shape, engine)
    if unknown_arch:
        return {"model": tag, "level": shape.level, "predicted": False, "architecture": unknown_arch}, None, shape
    footprint = predict.predictor(shape, engine, kv, flash_attention=flash)
    trained = shape.arch.context_length or None
    default = predict.default_ctx(engine, device, server_env, trained)
    f = footprint(ctx or default, parallel)
    top = trained or 262144
    max_ctx = memmodel.largest_fitting_ctx(lambda c: footprint(c, parallel).peak, limit, STEP, top, STEP)
    if max_ctx is not None and trained and footprint(trained, parallel).peak <= limit:
        max_ctx = trained
    default_total = footprint(default, parallel).peak
    return ({"model": tag, "level": shape.level, "predicted": True, "weights": f.weights,
             "weights_source": shape.weights_source,
             "kv_per_token": int(round(memmodel.kv_per_token(engine, shape.arch, kv))),
             "compute": f.compute, "num_ctx": f.num_ctx, "buffers": f.total, "total": f.peak,
             "max_ctx": max_ctx, "trained_ctx": trained, "server_default_ctx": default,
             "default_total": default_total, "default_fits": default_total <= limit}, footprint, shape)


def plan(api, model: str, device, server_env: dict | None, vram: int, ctx: int | None = None, parallel: int = 1,
         kv: str = "f16", fa: str = "server", *, also: list[str] | tuple = (), cards: list[int] | None = None,
         known=None) -> dict:
    """The whole plan as one dict (what ``--json`` prints). ``cards``: the
    GPUs' bytes one by one (default: one of ``vram``; none on a CPU);
    ``known``: the keys ``server_env`` covers (None: all of it)."""
    version, engine = predict.server_engine(api)
    on_gpu = getattr(device, "vendor", None) in ("nvidia", "amd", "apple", "simulated")
    flash = {"on": True, "off": False}.get(fa, predict.flash_attention(engine, server_env, on_gpu))
    fa_source = "given" if fa in ("on", "off") else ("server" if flash is not None else "unknown")
    if flash is None:
        flash = False   # not read: planned with the larger compute buffer
    limit = fit_limit(vram)
    base = model.split(":", 1)[0]
    tags = [model] + [name for name in api.siblings(model)]
    seen = {tag: _predict(api, tag, engine, device, server_env, limit, ctx, parallel, kv, flash, on_gpu)
            for tag in dict.fromkeys([*tags, *also])}
    rows, members = [seen[tag][0] for tag in tags], [seen[tag] for tag in [model, *also]]
    first = rows[0]
    cards = list(cards) if cards is not None else ([vram] if on_gpu else [])
    result = {"model": model, "base": base, "engine": engine, "version": version, "vram": vram, "fit_limit": limit,
              "num_parallel": parallel, "kv_cache_type": kv, "server_default_ctx": first.get("server_default_ctx"),
              "flash_attention": flash, "flash_attention_source": fa_source,
              "expected_error": predict.EXPECTED_ERROR[engine], "predicted": True, "tags": rows,
              "devices": [{"card": i, "vram": size} for i, size in enumerate(cards)]}
    result.update(plan_set(members, engine, cards, limit, parallel, server_env, known, on_gpu,
                           getattr(device, "vendor", None) == "apple"))
    return result


def _server_setting(server_env: dict | None, known, key: str) -> tuple[str | None, bool]:
    """``(value, read)``: the value as Ollama reads it (trimmed of spaces and
    quotes; None when unset), and whether it was read at all."""
    if server_env is None or (known is not None and key not in known):
        return None, False
    return str(server_env.get(key) or "").strip().strip("\"'") or None, True


def _number(raw: str | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None   # Ollama then uses the default, as if unset


def _split(engine: str, f, shape, free: list[int], spread: bool, server_env, known, unified: bool):
    """Where this model's layers land on GPUs with ``free`` bytes free."""
    if engine == memmodel.ENGINE_LLAMA_SERVER:
        target, _ = _server_setting(server_env, known, "LLAMA_ARG_FIT_TARGET")
        margin = _number(target)
        layers = memmodel.model_layers(shape.arch, shape.weights_bytes, f.num_ctx, f.num_parallel, f.num_batch,
                                       f.kv_type, estimate_min_ctx=0, compute_bytes=f.compute)
        predicted = memmodel.server_vram_prediction(shape.arch, shape.weights_bytes, f.num_ctx, f.num_parallel)
        margin_bytes = memmodel.FIT_TARGET_BYTES if margin is None else margin * memmodel.MIB
        return memmodel.current_split(layers, free, predicted_bytes=predicted, spread=spread, margin_bytes=margin_bytes)
    overhead = _number(_server_setting(server_env, known, "OLLAMA_GPU_OVERHEAD")[0]) or 0
    layers = memmodel.model_layers(shape.arch, shape.weights_bytes, f.num_ctx, f.num_parallel, f.num_batch, f.kv_type)
    return memmodel.legacy_split(layers, free, spread=spread, overhead_bytes=overhead, unified=unified,
                                 min_gpu_bytes=memmodel.MIN_GPU_BYTES_METAL if unified else memmodel.MIN_GPU_BYTES_CUDA)


def plan_set(members: list, engine: str, cards: list[int], limit: int, parallel: int, server_env: dict | None,
             known, on_gpu: bool, unified: bool = False) -> dict:
    """``models`` (each with its placement on the cards, after the ones before
    it) and ``set``: the sum of the peaks against ``limit``, the contexts
    that fit when it is over, and ``OLLAMA_MAX_LOADED_MODELS`` against the size."""
    raw_spread, spread_read = _server_setting(server_env, known, "OLLAMA_SCHED_SPREAD")
    # Ollama's Bool: unset is off; a value that is not a boolean counts as on
    spread = raw_spread is not None and raw_spread.lower() not in ("0", "f", "false")
    raw_max, max_read = _server_setting(server_env, known, "OLLAMA_MAX_LOADED_MODELS")
    value = _number(raw_max)
    source = "set" if value else ("default" if max_read else "unknown")
    if max_read and not value:
        value = 3 * max(len(cards), 1)   # 0 or unset: 3 per GPU (3 on a CPU)
    size = len(members)
    models = [dict(row) for row, _, _ in members]
    judged = all(m["predicted"] for m in models)
    total = sum(m["total"] for m in models) if judged else None
    proposal = None
    if judged and total > limit:
        peaks = [(lambda fp: lambda c: fp(c, parallel).peak)(fp) for _, fp, _ in members]
        proposal = fit_contexts(peaks, [m["num_ctx"] for m in models], limit)
        if proposal is not None:
            for m, peak, c in zip(models, peaks, proposal):
                m["proposed_ctx"], m["proposed_total"] = c, peak(c)
    free = list(cards)
    for i, (m, (_, footprint, shape)) in enumerate(zip(models, members)):
        if footprint is None or not cards:
            continue
        at = m.get("proposed_ctx", m["num_ctx"])   # where the set fits, if it can
        split = _split(engine, footprint(at, parallel), shape, free, spread, server_env, known, unified)
        m["placement"] = {**split.to_dict(), "num_ctx": at, "alongside": i == 0 or not split.slow}
        for share in split.shares:
            free[share.card] -= share.bytes
    return {"models": models, "set": {
        "size": size, "total": total, "fit_limit": limit, "fits": None if total is None else total <= limit,
        "margin": SAFETY_MARGIN_FRACTION, "proposal": proposal,
        "proposed_total": None if proposal is None else sum(m["proposed_total"] for m in models),
        "floor_total": None if total is None or total <= limit or proposal is not None else sum(
            fp(min(MIN_SET_CTX, m["num_ctx"]), parallel).peak for m, (_, fp, _) in zip(models, members)),
        "max_loaded_models": {"value": value, "source": source, "wanted": size,
                              "enough": None if value is None else value >= size},
        "sched_spread": spread if spread_read else None}}


def run(args) -> int:
    model = require_model(args)
    ctx, parallel, kv, cards = _arguments(args)  # bad input is refused before any server starts
    also = list(args.also or [])
    with open_world(WorldOptions.from_args(args)) as world:
        api, control = world.env.api, world.env.control
        _check_set(api, model, also)
        device = world.selection.reader.info()
        if cards is not None:
            planned = _Card("nvidia", sum(cards))   # GPUs of those sizes: their sum sets the default context
        else:
            planned = device  # what this device can give (or --budget)
            cards = _cards_here(world) if getattr(device, "vendor", None) in _GPUS else []
        card = sum(cards) or int(world.limit.bytes)
        result = plan(api, model, planned, control.env(), card, ctx, parallel, kv, args.fa, also=also, cards=cards,
                      known=known_keys(control))
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return ExitCode.OK
    out = Console()
    if len(result["models"]) > 1 or len(result["devices"]) > 1:
        render_set(out, result)
    else:
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


def _cards_here(world) -> list[int]:
    """The cards of this machine the server may use, each read apart; with
    one card (or a --budget, which is one limit) that limit alone."""
    found = devices_of(world.selection.reader)
    if len(found) > 1 and world.budget is None and all(d.total_bytes for d in found):
        return [int(d.total_bytes) for d in found]
    return [int(world.limit.bytes)]


def render_set(out: Console, result: dict) -> None:
    """The set: one row per model (its context and peak, and the proposed ones
    when the set is over), the verdict, the settings it needs, and where each
    model's layers go. Every line but the table's wraps on words; the table
    keeps every model name and figure whole, as :func:`render` does."""
    def say(key: str, **values) -> None:
        out.print(t(key, **values), highlight=False)

    models, group = result["models"], result["set"]
    cards = " + ".join(fmt_size(d["vram"], 1) for d in result["devices"]) or fmt_size(result["vram"], 1)
    say("plan_set.title", cards=cards, engine=result["engine"], version=result["version"])
    shown = [m for m in models if m["predicted"]]
    proposed = group["proposal"] is not None
    if shown:
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, collapse_padding=True)
        width = max(len(m["model"]) for m in shown)
        table.add_column(t("plan_set.col_model"), no_wrap=True, min_width=max(width, len(t("plan_set.together"))))
        keys = ("col_ctx", "col_total") + (("col_proposed", "col_then") if proposed else ())
        for key in keys:
            table.add_column(t(f"plan_set.{key}"), justify="right", no_wrap=True)
        for m in shown:
            cells = [str(m["num_ctx"]), fmt_size(m["total"], 1)]
            if proposed:
                cells += [str(m["proposed_ctx"]), fmt_size(m["proposed_total"], 1)]
            table.add_row(m["model"], *cells)
        if group["total"] is not None:
            last = ["", fmt_size(group["total"], 1)] + (["", fmt_size(group["proposed_total"], 1)] if proposed else [])
            table.add_row(t("plan_set.together"), *last)
        out.print(table)
    for m in models:
        if not m["predicted"]:
            say("cmd_plan.no_prediction", model=m["model"], arch=m["architecture"])
    limit, margin = fmt_size(group["fit_limit"], 1), _pct(group["margin"])
    if group["fits"] is None:
        say("plan_set.unjudged", models=", ".join(m["model"] for m in models if not m["predicted"]))
    else:
        say("plan_set.fits" if group["fits"] else "plan_set.over", total=fmt_size(group["total"], 1), limit=limit,
            margin=margin)
    if proposed:
        say("plan_set.proposal", total=fmt_size(group["proposed_total"], 1), limit=limit)
        for m in models:
            if m["proposed_ctx"] < m["num_ctx"]:
                say("plan_set.gives_up", model=m["model"], before=m["num_ctx"], after=m["proposed_ctx"],
                    tokens=m["num_ctx"] - m["proposed_ctx"], freed=fmt_size(m["total"] - m["proposed_total"], 1))
            else:
                say("plan_set.keeps", model=m["model"], ctx=m["num_ctx"])
        say("plan_set.how_to_set")
    elif group["floor_total"] is not None:
        say("plan_set.no_proposal", floor=MIN_SET_CTX, total=fmt_size(group["floor_total"], 1), limit=limit)
    if group["size"] > 1:
        loaded = group["max_loaded_models"]
        if loaded["enough"] is None:
            say("plan_set.max_loaded_unknown", n=group["size"])
        else:
            say("plan_set.max_loaded_ok" if loaded["enough"] else "plan_set.max_loaded_low", value=loaded["value"],
                source=t(f"plan_set.source_{loaded['source']}"), n=group["size"])
    _render_placement(say, result)


def _render_placement(say, result: dict) -> None:
    placed = [m for m in result["models"] if m.get("placement")]
    if not placed:
        return
    spread = result["set"]["sched_spread"]
    if spread is None or spread:
        say("plan_set.spread_unknown" if spread is None else "plan_set.spread_on")
    say("plan_set.placement", engine=result["engine"])
    for m in placed:
        split = m["placement"]
        say("plan_set.at_ctx", model=m["model"], ctx=split["num_ctx"])
        if not split["cards"]:
            say("plan_set.all_cpu")
            continue
        for share in split["cards"]:
            say("plan_set.card_output" if share["output"] else "plan_set.card", n=share["card"] + 1,
                layers=share["layers"], total=split["layers_total"], bytes=fmt_size(share["bytes"], 1))
        if split["slow"]:
            say("plan_set.cpu_part", layers=split["cpu_layers"] + int(split["output_on_cpu"]),
                total=split["layers_total"], bytes=fmt_size(split["cpu_bytes"], 1))
            if split["slow_reason"] == "layers_on_cpu":
                say("plan_set.slow_layers", n=split["cpu_layers"] + int(split["output_on_cpu"]))
            else:
                say("plan_set.slow_output")
        if not split["alongside"]:
            say("plan_set.evicts")


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
