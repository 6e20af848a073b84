"""A diagnosis of several models that must stay loaded together.

``oomvet diagnose --model A --also B``: the set's own loop between its rules
(:mod:`rules.together`) and the world. It reads each model's context as the
server gives it (a request without ``num_ctx``, then ``/api/ps``) and the
server's ``OLLAMA_MAX_LOADED_MODELS`` as read (never assumed), measures the
set (:func:`probes.together.measure`), then does what the rules ask: measure
a model's lower-bit tags (:func:`probes.quant.run`, the same coherence check
as the one-model method, and a filled point alone), retest an arrangement
with every model at once (:func:`probes.together.retest`), or stop. The
result is one plain dict (what ``--json`` prints and the files are made of).
"""
from __future__ import annotations

from typing import Any, Callable

from common.catalog import t
from common.errors import ModelNotFoundError, ProbeError, UsageError
from probes import quant, together
from probes.base import known_keys, restoring
from probes.ollama_api import canonical_name
from probes.memory import devices_of as devices_of_reader
from probes.units import fmt_size
from rules.coherence import failed_checks
from rules.setplan import MIN_SET_CTX
from rules.together import MAX_LOADED_UNSET, SetRules

Say = Callable[[str], None]

def server_max_loaded(control, gpus: int) -> tuple[int | None, str]:
    """The server's OLLAMA_MAX_LOADED_MODELS as read, and where from: its
    value; Ollama's default (3 per GPU, 3 on a CPU) when it was read as unset;
    None when the server's settings were not read."""
    env = control.env()
    known = known_keys(control)
    if env is None or (known is not None and "OLLAMA_MAX_LOADED_MODELS" not in known):
        return None, "unread"
    raw = str(env.get("OLLAMA_MAX_LOADED_MODELS") or "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw), "set"
    return MAX_LOADED_UNSET * max(1, gpus), "default"


def server_keep_alive(control) -> str | None:
    """The server's OLLAMA_KEEP_ALIVE as read ("5m" when read as unset,
    Ollama's default); None when the server's settings were not read."""
    env = control.env()
    known = known_keys(control)
    if env is None or (known is not None and "OLLAMA_KEEP_ALIVE" not in known):
        return None
    return str(env.get("OLLAMA_KEEP_ALIVE") or "").strip() or "5m"


def served_context(env, model: str, embedding: bool) -> tuple[int | None, bool]:
    """The context the server gives ``model`` when a request names none (as
    the user's clients send): loaded once, read from ``/api/ps``; and whether
    it is an embedding model (one the server did not label as such is found
    when ``/api/generate`` refuses it). A model that does not load alone is
    said in one line (ProbeError), with the server's reason."""
    gen = env.api.embed(model, "OK") if embedding else env.api.generate(model, "Say OK.", {"num_predict": 1,
                                                                                          "temperature": 0})
    if not gen.ok and not embedding and "does not support" in str(gen.error or ""):
        gen, embedding = env.api.embed(model, "OK"), True
    if not gen.ok:
        raise ProbeError(t("set.no_load", model=model, error=str(gen.error or "?").strip()))
    row = env.api.loaded(model)
    env.unload(model)
    return (row.context_length if row is not None else None), embedding


def check_set(api, models: list[str], lang: str) -> None:
    """One clear line (exit 2) for a set that cannot be measured: a model
    named twice under any spelling (``neohorse-1`` and ``neohorse-1:latest``,
    or two tags of one file), or one the server does not have."""
    digests = api.digests()
    for i, model in enumerate(models):
        if any(canonical_name(model) == canonical_name(other) or api.same_model(model, other, digests)
               for other in models[:i]):
            raise UsageError(t("diagnose.set_twice", lang, models=", ".join(models)))
    missing = []
    for model in models:
        try:
            api.show(model)
        except ModelNotFoundError:
            missing.append(model)
    if missing:
        raise UsageError(t("diagnose.set_missing", lang, models=", ".join(missing)))


def diagnose_set(world, models: list[str], lang: str, say: Say, out) -> tuple[dict, int, list]:
    """Check, run and write a set diagnosis (``diagnose --also``, the chat):
    the result, the exit code and the files written (all or nothing)."""
    from assistant.files.atomic import write_files
    from assistant.files.set_outputs import set_files

    check_set(world.env.api, models, lang)
    result, code = SetSession(world, models, lang, say).run()
    paths = write_files(out, set_files(result), lang=lang)
    say(t("set.wrote", lang, n=len(paths), out=out, names=", ".join(p.name for p in paths)))
    return result, code, paths


def world_devices(world) -> list[dict]:
    """Each device as the memory source reads it (one per card where the
    source keeps them apart), with the limit that applies to the set."""
    limit = {"limit_bytes": world.limit.bytes, "limit_from": "budget" if world.budget is not None else "device"}
    try:
        found = devices_of_reader(world.selection.reader)
    except Exception:  # noqa: BLE001 - a device list that fails leaves the summed view below
        found = []
    if found:
        return [{**d.to_dict(), **limit} for d in found]
    fact = world.device_fact()
    return [{"index": 0, "name": fact["name"], "vendor": fact["vendor"], "total_bytes": fact["total"],
             "source": fact["source"], **limit}]


class SetSession:
    """One set diagnosis: ``run()`` returns the result dict and the exit code."""

    def __init__(self, world, models: list[str], lang: str, say: Say):
        self.world, self.env, self.models, self.lang, self.say = world, world.env, models, lang, say
        self.steps: list[dict] = []
        self.charts: list[dict] = []
        self.measured_tags: set[str] = set()   # lower-bit tags already tried
        self.prompts = together.Prompts(world.env)

    def _probe(self, result) -> dict:
        self.steps.append({"probe": result.name, "ok": result.ok, "error": result.error, "wall_s": result.wall_s,
                           "facts": result.facts, "rows": result.rows})
        self.charts += [c.to_dict() for c in result.charts]
        return result.facts[-1] if result.facts else {}

    def run(self) -> tuple[dict, int]:
        env, say, lang = self.env, self.say, self.lang
        if env.limit_bytes is None:
            raise UsageError(t("set.no_limit", lang))
        if env.blind:  # a server elsewhere: its /api/ps figures are reports, and a set is planned on measurements
            raise ProbeError(t("set.blind", lang, why=env.blind))
        # the server as it was, Ctrl-C included: what the set loaded goes, what was loaded comes back
        with restoring(env):
            members = self._members()
            gpus = len(world_devices(self.world)) if env.on_gpu else 0
            max_loaded, max_from = server_max_loaded(env.control, gpus)
            say(t("set.start", lang, models=", ".join(f"{m.model} (num_ctx={m.num_ctx})" for m in members),
                  limit=fmt_size(env.limit_bytes),
                  max_loaded=max_loaded if max_loaded is not None else t("set.unread", lang),
                  source=t(f"set.from.{max_from}", lang)))
            rules = SetRules([m.to_dict() for m in members], env.limit_bytes, max_loaded)
            try:
                step = self._loop(rules, members)
            finally:
                rules.close()
        verified = bool(step["verified"])
        plan = rules.plan.to_dict() if rules.plan is not None else None
        result = {"kind": "set", "lang": lang, "models": [m.to_dict() for m in members],
                  "max_loaded": {"value": max_loaded, "from": max_from}, "limit": env.limit_bytes,
                  "keep_alive": server_keep_alive(env.control),
                  "fit_limit": rules.fit_limit, "causes": rules.causes, "plan": plan,
                  "server_env": dict(rules.server_env), "verified": verified, "why": step["why"],
                  "why_chain": rules.trail, "steps": self.steps, "charts": self.charts,
                  "devices": world_devices(self.world), "engine": (self.world.server_fact or {}).get("engine"),
                  "version": (self.world.server_fact or {}).get("version")}
        if step["why"] in ("set_no_arrangement", "set_retests_spent"):  # stops no rule's sentence says
            say("  " + t(f"setwhy.{step['why']}", lang, n=rules.retests))
        say(t("set.verified" if verified else "set.not_verified", lang))
        return result, (0 if verified else 1)

    def _members(self) -> list[together.Member]:
        """Each model at the context the server gives it, an embedder marked as one."""
        members = []
        for model in self.models:
            ctx, embedding = served_context(self.env, model, self.env.api.show(model).embedding_only)
            if ctx is None:
                raise ProbeError(t("set.no_context", self.lang, model=model))
            members.append(together.Member(model, int(ctx), embedding))
        return members

    def _loop(self, rules: SetRules, members: list[together.Member]) -> dict:
        """Measure the set, then do what the rules ask until they say done; the done step."""
        env, say, lang = self.env, self.say, self.lang
        kinds = {m.model: m.embedding for m in members}
        say(t("set.measuring", lang, n=len(members)))
        fact = self._probe(together.measure(env, members, floor=MIN_SET_CTX))
        self._report_measure(fact)
        step = rules.post(fact)
        shown = 0
        while True:
            for line in rules.trail[shown:]:
                say("  " + (line["note_zh"] if lang == "zh" else line["note"]))
            shown = len(rules.trail)
            if step["action"] == "quant" and kinds[step["model"]]:
                # an embedding model's lower-bit tag gives other vectors: an index built with it no longer matches
                step = rules.post({"kind": "set_levels_done", "model": step["model"], "levels": -1, "remaining": 0})
            elif step["action"] == "quant":
                step = self._levels(rules, step["model"], step["num_ctx"])
            elif step["action"] == "retest":
                plan = step["plan"]
                say(t("set.retesting", lang, arrangement=_arrangement(plan), total=fmt_size(plan["total"]),
                      env=" ".join(f"{k}={v}" for k, v in step["server_env"].items()) or "-"))
                trial = [together.Member(x["tag"], x["num_ctx"], kinds[x["model"]]) for x in plan["members"]]
                fact = self._probe(together.retest(env, trial, step["server_env"]))
                for d in fact.get("devices") or []:
                    say(t("set.held", lang, label=d["label"], name=d["name"], held=fmt_size(d["held"])))
                step = rules.post(fact)
            else:
                return step

    def _report_measure(self, fact: dict) -> None:
        for a in fact["members"]:
            for p in a["points"]:
                self.say(t("set.alone", self.lang, model=a["model"], ctx=p["num_ctx"],
                           peak=fmt_size(p["peak"]) if p["peak"] is not None else t("set.unmeasured", self.lang)))
        peak = fact["together"]["peak"]
        self.say(t("set.together", self.lang, peak=fmt_size(peak) if peak is not None else t("set.unmeasured", self.lang),
                   listed=", ".join(fact["together"]["listed"]) or "-"))
        for e in fact["evicted"]:
            self.say(t("set.evicted", self.lang, model=e["model"], by=e["by"]))

    def _levels(self, rules: SetRules, model: str, num_ctx: int) -> dict:
        """The next lower-bit tag of ``model`` (highest bits first), checked
        for coherence and, when coherent, measured alone with its context
        filled; the rules then say whether it is enough or the next is needed."""
        lower = [tag for _, tag, _ in quant.lower_levels(self.env.api, model) if tag not in self.measured_tags]
        if not lower:
            return rules.post({"kind": "set_levels_done", "model": model, "levels": 0, "remaining": 0})
        tag = lower[0]
        self.measured_tags.add(tag)
        self.say(t("set.quant", self.lang, model=model, tag=tag))
        trials = self._probe(quant.run(self.env, model, num_ctx=num_ctx, candidates=[tag]))
        trial = next((f for f in self.steps[-1]["facts"] if f.get("kind") == "quant_trial"), None) if trials else None
        broken = (failed_checks(trial) if trial.get("answered") else ["not answered"]) if trial else ["not tried"]
        point = None
        if not broken:
            point, chart = together.alone(self.env, self.prompts, together.Member(tag, num_ctx), num_ctx)
            self.charts.append(chart.to_dict())
        rules.post({"kind": "set_level", "model": model, "tag": tag, "coherent": not broken,
                    "peak": point["peak"] if point else None, "num_ctx": num_ctx,
                    "bits": trial.get("bits") if trial else None})
        return rules.post({"kind": "set_levels_done", "model": model, "levels": 1, "remaining": len(lower) - 1})


def _arrangement(plan: dict) -> str:
    return ", ".join(f"{x['tag']} num_ctx={x['num_ctx']}" for x in plan["members"])


def summary(result: dict) -> dict[str, Any]:
    """What ``diagnose --json`` prints for a set: the set, its plan, the devices."""
    keys = ("models", "max_loaded", "keep_alive", "limit", "fit_limit", "causes", "plan", "server_env", "verified", "why",
            "why_chain", "devices", "engine", "version")
    out = {k: result.get(k) for k in keys}
    measured = next((s["facts"][0] for s in result.get("steps") or [] if s["probe"] == "together"), None)
    if measured:
        out["measured"] = {"alone": measured["members"], "together": measured["together"],
                           "evicted": measured["evicted"]}
    out["steps"] = [{"probe": s["probe"], "ok": s["ok"], "error": s["error"], "wall_s": round(s["wall_s"], 2)}
                    for s in result.get("steps") or []]
    return out
