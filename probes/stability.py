"""Step 6 of the method: the fixed task, run after every change.

One shipped task (long paragraphs, a table, JSON and code, English and
Chinese) at fixed ``num_predict``, seed and temperature 0, on the config
under test. It records what separates a memory problem from everything else:
tokens generated, ``done_reason``, HTTP status, error lines, duration, how
much of the output repeats itself. Whether that is a regression against the
previous run is the rules' verdict (``rules.record.retest_regressions``). By hand:
``ollama run M < task.md`` with ``/set parameter num_predict 256``.

The load is the user's: the config's slots all busy at once, repeated
requests for memory that creeps, and for long input a prompt that fills 85%
of the context (copies of one paragraph, then the task), so the KV cache
the config promises is really filled. What the output checks read (loops,
length) is then the fixed task's answer alone, sent first on a fresh load
of the config, exactly as every retest without a fill sends it: a small
model given thousands of tokens loops by nature (the 135M stand-in does at
2k: "The pumps are running at a rate of ..."), which says nothing about the
config, while the fixed task's answer compares across every retest. Sent
after the long input on the same runner it is not the same answer (greedy
decoding parts at near-ties when the runner's cache state differs: Q8_0 at
2048 on llama-server looped there, 0.41 of its 4-grams, and not on a fresh
load). The long input's own answer is recorded beside it.
"""
from __future__ import annotations

import threading
import time
import uuid

from probes import coherence
from probes import sanity
from probes.base import ProbeEnv, known_keys, measured_server_env, restoring, server_settings
from probes.evidence import failure_fields, log_window
from probes.result import ProbeResult, timed
from probes.step import measure_checked, sampled
from probes.texts import filled, stability_task

NUM_PREDICT = 128
SEED = 42


def options_for(config: dict, num_predict: int = NUM_PREDICT) -> dict:
    options = {"num_predict": num_predict, "seed": SEED, "temperature": 0}
    if config.get("max_context_len"):
        options["num_ctx"] = int(config["max_context_len"])
    if config.get("max_batch_size"):
        options["num_batch"] = int(config["max_batch_size"])
    return options


@timed
def run(env: ProbeEnv, config: dict, num_predict: int = NUM_PREDICT,
        prompt_tokens: int | None = None, fill: float | None = None, repeats: int = 1) -> ProbeResult:
    """Run the fixed task on ``config`` (the method's vocabulary: model,
    max_context_len, max_batch_size, max_concurrency, ...), as the user's load:
    ``fill`` (long input) puts records before the task until the prompt fills
    that share of the context; ``repeats`` (memory that creeps) sends it that
    many times in a row; the config's concurrency sends that many at once."""
    deadline = time.monotonic() + env.timeout_s
    model = config["model"]
    task = stability_task()
    options = options_for(config, num_predict)
    parallel = max(1, int(config.get("max_concurrency") or 1))
    result = ProbeResult("stability", ok=False)
    kv = str(config.get("kv_cache") or "f16")
    wanted_env = measured_server_env(parallel, kv)
    with restoring(env), server_settings(env, wanted_env) as applied:
        if not applied:
            # a user's server runs with its own settings: the config cannot be verified here
            settings = " ".join(f"{k}={v}" for k, v in wanted_env.items())
            known = known_keys(env.control)
            unread = env.control.env() is None or (known is not None and not set(wanted_env) <= known)
            if unread:  # not read, so not known to be in effect
                why = getattr(env.control, "why", "") or "the server's settings were not read"
                unconfirmed = (f"{settings} could not be confirmed in effect ({why}); "
                               f"restart Ollama with them and run the check again")
            else:
                unconfirmed = f"the server runs other settings: restart Ollama with {settings} and run the check again"
            if env.blind:  # a server elsewhere: its readings would not have been measurements either
                unconfirmed = f"{unconfirmed}; {env.blind}"
            result.error = f"not verified: {unconfirmed}"
            result.notes.append(result.error)
            result.facts.append({"kind": "stability", "config": dict(config), "eval_count": None,
                                 "done_reason": None, "answered": False, "repeat_share": None,
                                 "errors": [result.error], "peak": None,
                                 "measured": False, "unmeasured": result.error,
                                 "unconfirmed": unconfirmed})
            return result
        fixed = task  # the fixed task alone: the answer every retest is compared on
        answer = None
        if fill and options.get("num_ctx"):
            env.unload(model)  # a fresh load, as every retest sends the fixed task on
            answer = env.api.generate(model, fixed, options)
            task, prompt_tokens = _fill(env, model, task, options["num_ctx"], fill)
        elif prompt_tokens is None:
            # the task's own token count, measured with room to spare, so a cut prompt is visible
            probe_gen = env.api.generate(model, f"[{uuid.uuid4().hex[:6]}]\n" + task,
                                         {"num_ctx": 8192, "num_predict": 1, "temperature": 0})
            prompt_tokens = probe_gen.prompt_eval_count if probe_gen.ok else None
            env.unload(model)
        env.check(deadline)
        weights = env.api.file_size(model)

        def once():
            window = log_window(env)
            with sampled(env, f"stability {model} num_ctx={options.get('num_ctx')} x{parallel}") as step:
                gens = []
                for i in range(max(1, repeats)):
                    step.mark("request" if i == 0 else f"request {i + 1}")
                    gens += _run_parallel(env, model, task, options, parallel)
                step.mark("done")
                loaded = env.api.loaded(model)
            return step, {"gens": gens, "loaded": loaded, "window": window}

        def problems(step, got):
            if not got["gens"][0].ok:
                return []
            placement = got["loaded"].placement if got["loaded"] else None
            on_device = placement == "gpu" or (not env.on_gpu and placement is not None)
            return sanity.load_problems(None, step.peak, weights, weights_on_device=on_device)

        step, got = measure_checked(once, problems, result.notes)
        gens = got["gens"]
        load = gens[0]  # the user's load: what its prompt was evaluated as
        main = answer or load  # the answer the output checks read
        errors = sorted({g.error for g in gens + [main] if g.error})
        answered = all(g.ok for g in gens) and main.ok
        # the rules read the run (failed, cut, looping, over the limit, regressed); the fact only says what happened
        fact = {"kind": "stability", "config": dict(config), "eval_count": main.eval_count,
                "done_reason": main.done_reason, "answered": answered,
                "prompt_tokens": load.prompt_eval_count, "task_tokens": prompt_tokens,
                # what the long input itself produced (the answer read above is the fixed task's)
                "load_eval_count": load.eval_count if answer else None,
                "load_done_reason": load.done_reason if answer else None,
                "fill": fill, "repeats": max(1, repeats), "num_ctx": options.get("num_ctx"),
                "at_once": parallel, "requests": len(gens),
                # the model's own loops: quoting the task it was given is not one
                "repeat_share": round(coherence.repeat_share(main.text, exclude=fixed), 4) if main.ok else None,
                "errors": errors, "peak": step.peak, **step.reading(),
                **failure_fields(next((g for g in gens if not g.ok), None), got["window"], "request")}
        result.ok = answered and step.measured
        result.error = "; ".join(errors) or (f"not measured: {step.unmeasured}" if step.unmeasured else None)
        result.facts.append(fact)
        result.charts.append(step.chart())
        result.rows.append({"model": model, "num_ctx": options.get("num_ctx"), "parallel": parallel,
                            "tokens": main.eval_count, "done": main.done_reason, "status": main.status,
                            "prompt tokens": load.prompt_eval_count, "of": prompt_tokens,
                            "seconds": main.duration_s, "peak": step.peak, "errors": len(errors)})
    return result


def _fill(env: ProbeEnv, model: str, task: str, num_ctx: int, fill: float) -> tuple[str, int | None]:
    """``task`` after copies of one paragraph that bring the prompt to
    ``fill`` of ``num_ctx``, and the prompt's token count (a context probe
    point sends as many tokens, its shorter answer made up in its prompt).
    Every copy costs the same tokens, so two short requests at ``num_ctx``
    (one copy, three copies) give the count exactly without sending the long
    prompt twice (None when the server gave no count). The model is unloaded
    after, so the retest's own load is sampled from the start."""
    nonce = "retest"  # the same prompt for the same config, every time: the retest is deterministic
    counts = []
    for units in (1, 3):
        gen = env.api.generate(model, filled(units, nonce, task, numbered=False),
                               {"num_ctx": num_ctx, "num_predict": 1, "temperature": 0})
        counts.append(gen.prompt_eval_count if gen.ok else None)
    env.unload(model)
    if None in counts or counts[1] <= counts[0]:
        return filled(1, nonce, task, numbered=False), counts[0]
    per_unit = (counts[1] - counts[0]) // 2
    units = max(1, (int(num_ctx * fill) - counts[0]) // per_unit + 1)
    return filled(units, nonce, task, numbered=False), counts[0] + (units - 1) * per_unit


def _run_parallel(env: ProbeEnv, model: str, task: str, options: dict, n: int):
    if n == 1:
        return [env.api.generate(model, task, options)]
    out = [None] * n
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, env.api.generate(model, task, options)))
               for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out
