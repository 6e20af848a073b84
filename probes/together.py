"""Several models that must stay loaded together: the set's measurements.

A real server rarely holds one model: a chat model beside an embedder, a
second user's model. Each fits alone; together they may not, and then the
server evicts one to load the other (or the card runs out). Ollama decides
this silently, so the probe makes it visible:

* :func:`measure` loads each model of the set **alone** at its context, and
  at the shortest context a plan may give it (two points: how its peak grows
  with the context, measured, so the plan needs no memory model for an
  architecture never measured, and interpolates between them),
  each with a prompt that fills the context as a user's long input would;
  then loads them **together**, the way the server holds them (each with its
  ``num_ctx``, one after the other, the request's ``keep_alive``), and after
  each load asks ``/api/ps`` which of the set is still there. A model of the
  set missing after another's load is an eviction, the failure itself.
* :func:`retest` is the set's stability retest: every model loaded, then the
  fixed task sent to all of them at once, while a thread polls ``/api/ps``;
  the set held only if every model stayed listed from its load to the end,
  on a GPU wholly in device memory (``size_vram == size``), every answer
  came back and the peak stayed under the limit. Each device's reading with
  the set loaded, less its idle one, says which card holds what.

Every figure is the memory source's reading during a sampled step
(:func:`probes.step.sampled`), relative to the idle reading before the
first load. By hand::

    ollama run A "..." ; ollama run B "..." ; ollama ps   # is A still there?
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from probes.base import ProbeEnv, restoring, server_settings
from probes.memory import devices_of
from probes.ollama_api import canonical_name
from probes.result import ProbeResult, timed
from probes.stability import NUM_PREDICT, SEED
from probes.step import sampled
from probes.texts import filled, stability_task

#: share of each model's context the set's measurements fill (the context step's own fill)
FILL = 0.85
#: seconds between two ``/api/ps`` polls while the set's retest runs
POLL_S = 0.25


@dataclass(frozen=True)
class Member:
    """One model of the set, the context it is served with, and whether it
    is an embedding model (sent ``/api/embed``, as its clients send it)."""

    model: str
    num_ctx: int
    embedding: bool = False

    def to_dict(self) -> dict:
        return {"model": self.model, "num_ctx": self.num_ctx, "embedding": self.embedding}


def send(env: ProbeEnv, member: Member, prompt: str, options: dict, keep_alive="10m"):
    """One request as the model's clients send it: a completion, or for an
    embedding model an embedding of ``prompt`` (cut at its context)."""
    if member.embedding:
        return env.api.embed(member.model, prompt, {"num_ctx": options.get("num_ctx")}, keep_alive=keep_alive)
    return env.api.generate(member.model, prompt, options, keep_alive=keep_alive)


def _devices(env: ProbeEnv) -> list[dict]:
    """Each device's reading now (one per card where the source keeps them
    apart); none on host memory, whose one "device" is the machine: its
    available memory counts a model's mapped weights as cache, so its change
    is not what the set holds (the set's own readings are)."""
    if getattr(env.reader, "name", None) == "host":
        return []
    try:
        found = devices_of(env.reader)
    except Exception:  # noqa: BLE001 - a per-device reading that fails leaves the set's sum
        return []
    return [{"label": d.label, "name": d.name, "used": d.used_bytes, "total": d.total_bytes} for d in found]


def _unload(env: ProbeEnv, members: list[Member]) -> None:
    """Unload the set's own models (each load is then measured from its
    start); a model the user has loaded beside them stays, as in every probe."""
    here = _names(env)
    for m in members:
        if _listed(m.model, here):
            env.unload(m.model)


def _names(env: ProbeEnv) -> set[str]:
    """The models ``/api/ps`` lists now, each spelled as :func:`canonical_name` spells it."""
    return {canonical_name(m.name) for m in env.api.ps()}


def _listed(model: str, names: set[str]) -> bool:
    return canonical_name(model) in names


def _short(env: ProbeEnv, member: Member, keep_alive) -> object:
    """A one-token request: loads the model at its context (or finds it loaded)."""
    return send(env, member, "Say OK.", {"num_ctx": member.num_ctx, "num_predict": 1, "temperature": 0,
                                         "seed": SEED}, keep_alive)


class Prompts:
    """The fill prompt per model: its tokens per copy of the paragraph are
    counted on the server (two short requests, one and three copies), so each
    model's prompt fills its own context whatever its tokenizer; once per
    model name, as every tag of a model shares its tokenizer."""

    def __init__(self, env: ProbeEnv):
        self.env = env
        self._cost: dict[str, tuple[int, int] | None] = {}

    def _count(self, member: Member) -> tuple[int, int] | None:
        model = canonical_name(member.model).rsplit(":", 1)[0]   # a model's tags share its tokenizer
        if model not in self._cost:
            counts = []
            for units in (1, 3):
                gen = send(self.env, member, filled(units, "set", stability_task(), numbered=False),
                           {"num_ctx": 4096, "num_predict": 1, "temperature": 0})
                counts.append(gen.prompt_eval_count if gen.ok else None)
            self.env.api.unload(member.model)
            good = None not in counts and counts[1] > counts[0]
            self._cost[model] = (counts[0], (counts[1] - counts[0]) // 2) if good else None
        return self._cost[model]

    def prompt(self, member: Member, num_ctx: int, fill: float = FILL) -> str:
        cost = self._count(member)
        if cost is None:
            return filled(1, "set", stability_task(), numbered=False)
        fixed, per_unit = cost
        units = max(1, (int(num_ctx * fill) - fixed) // max(1, per_unit) + 1)
        return filled(units, "set", stability_task(), numbered=False)


def _options(num_ctx: int) -> dict:
    return {"num_ctx": num_ctx, "num_predict": 8, "temperature": 0, "seed": SEED}


def alone(env: ProbeEnv, prompts: "Prompts", member: Member, num_ctx: int, keep_alive="10m") -> tuple[dict, object]:
    """One model alone at ``num_ctx``, its context filled: a point of its peak
    line, and the step's chart."""
    prompt = prompts.prompt(member, num_ctx)
    with sampled(env, f"alone {member.model} num_ctx={num_ctx}") as step:
        gen = send(env, member, prompt, _options(num_ctx), keep_alive)
        step.mark("answered" if gen.ok else "failed")
    env.unload(member.model)
    return {"num_ctx": num_ctx, "peak": step.peak if gen.ok else None, "ok": gen.ok, "error": gen.error,
            "prompt_tokens": gen.prompt_eval_count, **step.reading()}, step.chart()


def _contexts(member: Member, floor: int) -> list[int]:
    """Where a model is measured alone: its own context, and, when a plan may
    shorten it (its context is over ``floor``), the shortest context the plan
    may give it, so that every context the plan picks lies between two
    measured points (no slope assumed, nothing extrapolated)."""
    if member.num_ctx <= floor:
        return [member.num_ctx]
    return [member.num_ctx, floor]


@timed
def measure(env: ProbeEnv, members: list[Member], floor: int, keep_alive="10m") -> ProbeResult:
    """Each model alone (at its context, and at ``floor``, the shortest a
    plan may give it, where its context is over that), then the set together
    as the server holds it; one ``set`` fact."""
    result = ProbeResult("together", ok=False)
    prompts = Prompts(env)
    with restoring(env):
        _unload(env, members)
        singles = []
        for member in members:
            points = []
            for num_ctx in _contexts(member, floor):
                point, chart = alone(env, prompts, member, num_ctx, keep_alive)
                points.append(point)
                result.charts.append(chart)
            singles.append({**member.to_dict(), "points": points})
        evicted, loads = [], []
        with sampled(env, "together " + " + ".join(m.model for m in members)) as step:
            for i, member in enumerate(members):
                gen = send(env, member, prompts.prompt(member, member.num_ctx), _options(member.num_ctx), keep_alive)
                step.mark(f"{member.model} {'loaded' if gen.ok else 'failed'}")
                here = _names(env)
                loads.append({"model": member.model, "ok": gen.ok, "error": gen.error, "load_s": gen.load_s,
                              "listed": sorted(here)})
                for earlier in members[:i]:
                    if not _listed(earlier.model, here) and \
                            not any(e["model"] == earlier.model for e in evicted):
                        evicted.append({"model": earlier.model, "by": member.model})
            listed = _names(env)
        together = {"peak": step.peak, "all_loaded": all(_listed(m.model, listed) for m in members),
                    "listed": sorted(listed), "loads": loads, **step.reading()}
        result.charts.append(step.chart())
    fact = {"kind": "set", "members": singles, "together": together, "evicted": evicted, "n": len(members),
            "limit": env.limit_bytes}
    result.facts.append(fact)
    result.ok = all(p["ok"] for a in singles for p in a["points"])
    for a in singles:
        for p in a["points"]:
            result.rows.append({"model": a["model"], "num_ctx": p["num_ctx"], "together": "alone",
                                "peak": p["peak"], "error": p["error"] or ""})
    result.rows.append({"model": " + ".join(m.model for m in members), "num_ctx": "",
                        "together": "together", "peak": together["peak"],
                        "error": ", ".join(f"{e['by']} evicted {e['model']}" for e in evicted)})
    return result


@timed
def retest(env: ProbeEnv, members: list[Member], wanted_env: dict[str, str], keep_alive="10m") -> ProbeResult:
    """The fixed task against every model of the set at once, with the
    set's server settings (``wanted_env``) in effect; one ``set_retest`` fact."""
    result = ProbeResult("together_retest", ok=False)
    task = stability_task()
    with restoring(env), server_settings(env, wanted_env) as applied:
        if not applied:
            settings = " ".join(f"{k}={v}" for k, v in wanted_env.items())
            result.error = f"not verified: restart Ollama with {settings} and run the check again"
            result.facts.append({"kind": "set_retest", "members": [m.to_dict() for m in members],
                                 "applied": False, "unconfirmed": result.error, "measured": False})
            return result
        _unload(env, members)
        seen: dict[str, list[bool]] = {m.model: [] for m in members}
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                try:
                    here = _names(env)
                except Exception:  # noqa: BLE001 - a poll that fails says nothing either way
                    here = None
                if here is not None:
                    for m in members:
                        seen[m.model].append(_listed(m.model, here))
                stop.wait(POLL_S)

        idle_devices = _devices(env)
        with sampled(env, "set retest " + " + ".join(m.model for m in members)) as step:
            preload = [_short(env, m, keep_alive) for m in members]
            step.mark("all loaded")
            # which card holds what: each device's reading now, less its idle one
            held_devices = [{**d, "held": d["used"] - i["used"]} for d, i in zip(_devices(env), idle_devices)
                            if d["used"] is not None and i["used"] is not None and d["label"] == i["label"]]
            # what the server says each holds, beside the measured whole (the ledger's rows per model)
            held = [{"model": r.name, "size": r.size_bytes, "size_vram": r.size_vram_bytes,
                     "context_length": r.context_length} for r in env.api.ps()]
            watcher = threading.Thread(target=poll, daemon=True)
            watcher.start()
            gens: list = [None] * len(members)
            options = [{"num_ctx": m.num_ctx, "num_predict": NUM_PREDICT, "temperature": 0, "seed": SEED}
                       for m in members]
            # daemons: Ctrl-C ends the wait at once, and the restore settles what is still running on the server
            threads = [threading.Thread(target=lambda i=i, m=m: gens.__setitem__(
                i, send(env, m, task, options[i], keep_alive)), daemon=True) for i, m in enumerate(members)]
            try:
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
            finally:
                stop.set()
            step.mark("answered")
            watcher.join()
            listed = _names(env)
        result.charts.append(step.chart())
    dropped = sorted(m.model for m in members
                     if False in seen[m.model] or not _listed(m.model, listed))
    # on a GPU, a model of the set partly in system memory is a split that costs speed, not a fit
    spilled = sorted(r["model"] for r in held if env.on_gpu and r["size_vram"] < r["size"])
    answered = all(g is not None and g.ok for g in gens) and all(g.ok for g in preload)
    fact = {"kind": "set_retest", "members": [m.to_dict() for m in members], "applied": True,
            "server_env": dict(wanted_env), "answered": answered, "dropped": dropped, "spilled": spilled,
            "devices": held_devices,
            "polls": min((len(v) for v in seen.values()), default=0), "peak": step.peak, "ps": held,
            "limit": env.limit_bytes, "errors": sorted({g.error for g in gens + preload if g and g.error}),
            "answers": [{"model": m.model, "tokens": g.eval_count if g else None,
                         "load_s": g.load_s if g else None} for m, g in zip(members, gens)],
            **step.reading()}
    result.facts.append(fact)
    result.ok = answered and not dropped and step.measured
    result.error = "; ".join(fact["errors"]) or (f"dropped from /api/ps: {', '.join(dropped)}" if dropped else None)
    for m, g in zip(members, gens):
        result.rows.append({"model": m.model, "num_ctx": m.num_ctx, "tokens": g.eval_count if g else None,
                            "stayed": m.model not in dropped, "peak": step.peak})
    return result
