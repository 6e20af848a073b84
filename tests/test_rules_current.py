"""Rules for the current engine (rules/current_engine.py): the server's default
context as a cause, Ollama's own context back-off, KV quantization needing
flash attention, the fit target as the margin knob, a runtime OOM expiring
every loaded model, and a missing engine as a setup problem. Each finding is
in both languages and does not change the tree's next step."""
from __future__ import annotations

from rules.engine import Advisor
from rules.facts import validate
from tests.test_rules_script import GiB, Script, device, drive, load, oom_tier, passed, symptom, target, tier


def server(**over):
    fact = {"kind": "server", "version": "0.34.4", "engine": "llama-server", "default_ctx": 32768,
            "default_ctx_why": "vram_tier", "vram_total": 24 * GiB, "flash_attention": "auto", "kv_cache_type": "f16",
            "num_parallel": 1, "fit_target": 1 << 30, "local": True}
    fact.update(over)
    return validate(fact)


def log(**over):
    return validate({"kind": "log", "source": "test", **over})


KV_AT_32K = [tier("short", 2048, 12 * GiB), tier("medium", 8192, 14 * GiB), oom_tier("long", 32768)]


def keys(adv: Advisor) -> list[str]:
    return [f["key"] for f in adv.diagnosis["findings"]] if adv.diagnosis else []


def test_the_vram_tier_default_is_a_cause_when_its_context_was_measured_not_to_fit():
    script = Script(answers={"want_ctx": None}, baseline=[[load()]], context=[KV_AT_32K], stability=[passed()])
    adv, trace, _ = drive([symptom("slow"), target(), device(), server()], script)
    assert trace == ["ask:want_ctx", "probe:reproduce", "probe:baseline", "probe:context", "change:max_context_len=8192", "done"]
    assert keys(adv) == ["default_ctx"]
    finding = adv.diagnosis["findings"][0]
    assert "32768 tokens" in finding["en"] and "24 GiB" in finding["en"] and "OLLAMA_CONTEXT_LENGTH=8192" in finding["en"]
    assert "32768" in finding["zh"] and "显存" in finding["zh"]
    assert adv.diagnosis["cause"] == "kv_cache"


def test_a_default_below_the_first_failure_is_no_finding():
    script = Script(answers={"want_ctx": None}, baseline=[[load()]], context=[KV_AT_32K], stability=[passed()])
    adv, trace, _ = drive([symptom("slow"), target(), device(), server(default_ctx=4096)], script)
    assert keys(adv) == [] and trace[-2] == "change:max_context_len=8192"


def test_without_a_server_fact_the_tree_is_unchanged():
    script = Script(answers={"want_ctx": None}, baseline=[[load()]], context=[KV_AT_32K], stability=[passed()])
    adv, trace, _ = drive([symptom("slow"), target(), device()], script)
    assert keys(adv) == [] and trace == ["ask:want_ctx", "probe:baseline", "probe:context",
                                         "change:max_context_len=8192", "done"]


def test_ollamas_back_off_is_reported():
    script = Script(answers={"want_ctx": 8192}, baseline=[[load(), log(auto_backoff={"old_num_ctx": 32768,
                                                                                        "new_num_ctx": 4096})]],
                    context=[[tier("short", 2048, 12 * GiB), tier("long", 8192, 13 * GiB)]], stability=[passed()])
    adv, trace, _ = drive([symptom("slow"), target(want_ctx=8192), device(), server()], script)
    assert "backoff" in keys(adv)
    text = next(f for f in adv.diagnosis["findings"] if f["key"] == "backoff")
    assert "32768" in text["en"] and "4096" in text["en"] and "4096" in text["zh"]
    assert trace[-1] == "done"


def test_kv_quantization_without_flash_attention_is_a_finding_on_current_only():
    adv = Advisor()
    adv.post_many([symptom(), target(), device(), server(kv_cache_type="q8_0", flash_attention="off")])
    assert keys(adv) == []  # no diagnosis yet: findings are read at the end
    assert "kv_needs_fa" in [f["key"] for f in adv._state["findings"]]
    legacy = Advisor()
    legacy.post_many([symptom(), target(), device(), server(version="0.11.4", engine="runner",
                                                           kv_cache_type="q8_0", flash_attention="off")])
    assert "findings" not in legacy._state
    adv.close()
    legacy.close()


def test_the_refusal_in_the_log_is_the_same_finding():
    adv = Advisor()
    adv.post_many([symptom(), target(), device(), log(kv_needs_fa=True)])
    assert [f["key"] for f in adv._state["findings"]] == ["kv_needs_fa"]
    adv.close()


def test_gpu_overhead_points_to_the_fit_target():
    adv = Advisor()
    adv.post_many([symptom(), target(), device(), server(gpu_overhead=512 << 20)])
    finding = adv._state["findings"][0]
    assert finding["key"] == "overhead_ignored" and "LLAMA_ARG_FIT_TARGET" in finding["en"]
    assert "LLAMA_ARG_FIT_TARGET" in finding["zh"]
    adv.close()


def test_a_runtime_oom_explains_the_models_that_disappeared():
    adv = Advisor()
    adv.post_many([symptom(), target(), device(), server(), log(runtime_oom=True)])
    finding = adv._state["findings"][0]
    assert finding["key"] == "runtime_oom" and "every loaded model" in finding["en"]
    assert "LLAMA_ARG_FIT_TARGET" in finding["en"] and "卸载" in finding["zh"]
    adv.close()


def test_a_missing_engine_ends_as_a_setup_problem_not_weights():
    missing = load(ok=False, error="error starting llama-server: llama-server binary not found (checked: x)",
                   failure="engine_missing")
    adv, trace, steps = drive([symptom(), target(want_ctx=4096), device(), server()],
                              Script(baseline=[[missing]]))
    assert trace == ["probe:reproduce", "probe:baseline", "done"]
    assert steps[-1]["advice"] == "engine_missing" and "llama-server" in steps[-1]["advice_en"]
    assert steps[-1]["advice_zh"] and steps[-1]["cause"] is None and not steps[-1]["fits"]


def test_a_refused_setting_at_load_is_not_read_as_weights():
    refused = load(ok=False, failure="config",
                   error="llama-server process has terminated: exit status 1: llama_init_from_model: failed to "
                         "initialize the context: quantized V cache requires flash_attn to be enabled")
    adv, trace, steps = drive([symptom(), target(want_ctx=4096), device(),
                               server(kv_cache_type="q8_0", flash_attention="off")], Script(baseline=[[refused]]))
    assert trace == ["probe:reproduce", "probe:baseline", "done"] and steps[-1]["advice"] == "setting_refused"
    assert adv.diagnosis["cause"] is None and "kv_needs_fa" in keys(adv)
