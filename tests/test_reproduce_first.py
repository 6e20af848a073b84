"""The user's own setup is run first, unchanged, and what it did is the
diagnosis's starting point: a failure on the server's own slots is
concurrency, a failure at the server's default context is the KV cache, and
a setup that runs fine is said as "not reproduced", never as no diagnosis.
"""
from __future__ import annotations

import oomsim as sim
from assistant.intake import parse
from probes import reproduce
from probes.base import ProbeEnv
from probes.ollama_api import Ollama
from probes.server import ForeignServer
from rules.engine import Advisor
from tests.test_rules_current import server
from tests.test_rules_script import (GiB, Script, device, drive, knob, load, passed, reproduction, symptom, target,
                                     tier)
from tests.test_sim_http import make

DEV = device()  # 24 GiB
FIT_16K = [tier("short", 2048, 9 * GiB), tier("long", 16384, 11 * GiB)]


# ---------------------------------------------------------------- the rules

def test_a_failure_on_the_servers_own_slots_is_concurrency_and_the_slots_come_down_to_the_need_first():
    spilled = reproduction(num_ctx=16384, num_parallel=8, requests=4, phase="concurrent", peak=21 * GiB,
                           placement="partial", size=26 * GiB, size_vram=21 * GiB)
    script = Script(reproduce=[[spilled]], baseline=[[load()]], context=[FIT_16K],
                    backend=[[knob("num_parallel", 4, 17 * GiB, old=8)]], stability=[passed()])
    adv, trace, steps = drive([symptom("concurrent"), target(want_ctx=16384, want_parallel=4, keep_context=True),
                               DEV, server(num_parallel=8)], script)
    assert trace == ["probe:reproduce", "probe:baseline", "probe:context", "probe:backend:num_parallel=4",
                     "change:max_concurrency=4", "done"]
    assert steps[0]["args"] == {"model": "neohorse:8b-q8_0", "num_ctx": 16384, "requests": 4, "phase": "concurrent"}
    done = steps[-1]
    assert done["cause"] == "concurrency" and done["advice"] == "fewer_slots" and done["verified"] is True
    assert done["config"]["max_concurrency"] == 4 and done["config"]["max_context_len"] == 16384
    assert done["reproduced"]["verdict"] == "spill" and done["reproduced"]["num_parallel"] == 8


def test_when_fewer_slots_do_not_fit_either_the_ladder_goes_on_as_for_any_overflow():
    spilled = reproduction(num_ctx=16384, num_parallel=8, requests=4, phase="concurrent", placement="partial",
                           peak=21 * GiB)
    script = Script(reproduce=[[spilled]], baseline=[[load()]], context=[FIT_16K],
                    backend=[[knob("num_parallel", 4, 23 * GiB, old=8)], [knob("kv_cache_type", "q8_0", 18 * GiB)]],
                    stability=[passed()])
    adv, trace, steps = drive([symptom("concurrent"), target(want_ctx=16384, want_parallel=4, keep_context=True,
                                                             keep_concurrency=True), DEV, server(num_parallel=8)],
                              script)
    assert trace[3:] == ["probe:backend:num_parallel=4", "probe:backend:kv_cache_type=q8_0", "change:kv_cache=q8_0",
                         "done"]


def test_a_setup_that_runs_fine_is_not_reproduced_and_the_method_still_runs():
    fine = reproduction(num_ctx=16384, num_parallel=1, requests=1, peak=11 * GiB)
    script = Script(reproduce=[[fine]], baseline=[[load()]], context=[FIT_16K], stability=[passed()])
    adv, trace, steps = drive([symptom("long_input"), target(want_ctx=16384), DEV, server()], script)
    assert trace == ["probe:reproduce", "probe:baseline", "probe:context", "probe:stability", "done"]
    assert steps[-1]["reproduced"]["verdict"] == "none" and steps[-1]["cause"] is None


def test_a_failure_at_the_servers_default_context_is_the_kv_cache():
    spilled = reproduction(num_ctx=32768, num_parallel=1, placement="partial", peak=20 * GiB)
    script = Script(reproduce=[[spilled]], baseline=[[load()]],
                    context=[[tier("short", 2048, 9 * GiB), tier("long", 8192, 11 * GiB)]], stability=[passed()])
    adv, trace, steps = drive([symptom("slow"), target(want_ctx=8192, ctx_unset=True), DEV, server()], script)
    assert steps[0]["args"]["num_ctx"] is None  # the app sends none: neither does its reproduction
    # ...and the step's sentence names the server's default as read, never "context None"
    said = adv.why()[0]["reason"]
    assert "None" not in said and f"at context {server()['default_ctx']} " in said
    assert steps[-1]["cause"] == "kv_cache" and steps[-1]["advice"] == "default_ctx_overflows"
    assert steps[-1]["config"]["max_context_len"] == 8192 and steps[-1]["verified"] is True


def test_a_reproduction_that_broke_off_leaves_the_method_to_run_from_the_baseline():
    adv = Advisor()
    step = adv.post_many([symptom("long_input"), target(want_ctx=16384), DEV, server()])
    assert step["probe"] == "reproduce"
    step = adv.post({"kind": "probe_done", "probe": "reproduce", "ok": False, "error": "skipped by the user"})
    assert step["action"] == "probe" and step["probe"] == "baseline"


# ---------------------------------------------------------------- the intake

def test_an_app_that_sends_no_context_is_read_in_both_languages():
    assert parse("our front end never passes num_ctx, and we need 8k").ctx_unset is True
    assert parse("前端调用时没有设置 num_ctx，要 8k 上下文").ctx_unset is True
    assert parse("I put num_ctx at 8192 in the request").ctx_unset is None
    assert parse("把 num_ctx 设成 8192 了").ctx_unset is None


# ---------------------------------------------------------------- the probe, on the simulator

def test_the_probe_runs_the_server_as_it_is_and_says_the_slots_were_not_read_when_they_were_not():
    with sim.start(make(server={"num_parallel": 2})) as handle:
        env = ProbeEnv(api=Ollama(handle.host), reader=None, control=ForeignServer(why="not ours to read"))
        result = reproduce.run(env, "neohorse-1:q4_K_M", 4096, requests=2, phase="concurrent")
        calls = [line for line in handle.log() if "starting llama-server" in line or "llama runner started" in line]
    (fact,) = [f for f in result.facts if f["kind"] == "reproduction"]
    assert fact["num_parallel"] is None and fact["parallel_from"] == "unknown"
    assert fact["answered"] is True and fact["requests"] == 2 and fact["prompt_tokens"] > 2000
    assert calls and all("parallel=2" in line or "-np 2" in line for line in calls)  # nothing was restarted


def test_without_a_context_the_probe_sends_none_and_reads_what_the_server_gave():
    with sim.start(make(server={"version": "0.34.4"})) as handle:
        env = ProbeEnv(api=Ollama(handle.host), reader=None, control=handle.control)
        result = reproduce.run(env, "neohorse-1:q4_K_M", None, requests=1)
    (fact,) = [f for f in result.facts if f["kind"] == "reproduction"]
    assert fact["num_ctx"] == 4096  # an 8 GiB card's tier, as /api/ps reported it
    assert fact["num_parallel"] == 1 and fact["parallel_from"] == "oomvet"  # the settings it started with


def test_a_verified_config_that_leaves_the_concurrency_unmet_is_written_as_fitting_with_the_wish_unmet():
    # it once ended a diagnose with a traceback: "verified is true but fits is false"
    from assistant.config import build_config
    from tests.test_config_roundtrip import sample_result

    over = 23 * GiB
    script = Script(answers={"keep_concurrency": True}, baseline=[[load()]],
                    context=[[tier("short", 1024, 11 * GiB), tier("medium", 2048, 12 * GiB)]],
                    backend=[[knob("num_parallel", 4, over)]] + [[knob("num_batch", 0, over)]] * 4,
                    stability=[passed()])
    _, _, steps = drive([symptom("concurrent"), target(want_ctx=2048, want_parallel=4), DEV], script)
    done = steps[-1]
    assert done["advice"] == "concurrency_unmet" and done["verified"] is True and done["fits"] is True
    doc = build_config(dict(sample_result(), config=done["config"], verified=True, fits=done["fits"],
                            unmet=done["unmet"]))
    assert doc["max_concurrency"] == 1 and doc["unmet"]


def test_a_failure_at_load_is_said_as_the_load_alone_not_as_requests():
    from assistant.session.loop import _reproduction

    seen = {"verdict": "over", "num_ctx": 4096, "num_parallel": 1, "requests": 0, "peak": 383 << 20}
    assert "(4096 tokens, slots: 1, the load alone) peaked at 383.00 MiB" in _reproduction(seen, "en")
    assert "仅加载" in _reproduction(seen, "zh") and "同时 0" not in _reproduction(seen, "zh")


def test_the_rules_reading_of_a_failure_at_load_says_the_load_alone_in_both_languages():
    over = reproduction(num_ctx=4096, num_parallel=1, requests=0, peak=30 * GiB)
    adv, _, _ = drive([symptom("load"), target(want_ctx=4096), DEV, server()],
                      Script(reproduce=[[over]], baseline=[[load()]], stability=[passed()],
                             context=[[tier("short", 2048, 11 * GiB), tier("long", 4096, 12 * GiB)]]))
    (note,) = [r for r in adv.readings().values() if r["rule"].startswith("repro_")]
    assert "(4096 tokens, slots: 1, the load alone) peaked at 30.0 GiB" in note["note"]
    assert "仅加载" in note["note_zh"] and "同时 0" not in note["note_zh"]
