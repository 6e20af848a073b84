"""The decision tree, one scripted session per branch: each case feeds facts in
reply to every step and asserts the whole sequence of steps, the cause, and
the final config's key values. No server, no GPU, no terminal.

Device in every case unless said otherwise: 24 GiB, limit 24 GiB, so a peak
fits up to ``limit * (1 - SAFETY_MARGIN_FRACTION)``; ``OVER`` is a peak under
the device's total but above that margin. Step labels: ``ask:Q``, ``probe:P``,
``probe:backend:KNOB=V``, ``change:KEY=V``, ``done`` (a ``change`` is answered
by the stability retest, so no separate stability step follows it).
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from rules import thresholds as T
from tests.test_rules_script import (
    GiB, MODEL, MiB, Script, crashed, device, drive, knob, load, oom_tier, passed, regressed, symptom,
    unmeasured_retest,
    target, tier, trial,
)

Q6 = "neohorse:8b-q6_K"
Q4 = "neohorse:8b-q4_K_M"
DEV = device()
OVER = 23 * GiB  # under the 24 GiB limit, above it less the margin
assert T.fit_limit(24 * GiB) < OVER < 24 * GiB

FIT_TO_8K = [tier("short", 2048, 12 * GiB), tier("medium", 4096, 14 * GiB), tier("long", 8192, 17 * GiB)]
KV_AT_8K = [tier("short", 2048, 12 * GiB), tier("medium", 4096, 14 * GiB), oom_tier("long", 8192)]
FIT_TO_2K = [tier("short", 1024, 11 * GiB), tier("medium", 2048, 12 * GiB)]


@dataclass
class Case:
    name: str
    first: list
    script: dict
    steps: list
    cause: str | None
    config: dict | None  # the key values the final config must have; None: no config
    verified: bool
    fits: bool
    advice: str | None = None


CASES = [
    # --- start: ask what is missing and matters, each question once --------
    Case("asks_only_what_is_missing_then_measures",
         [symptom("load"), device()], dict(answers={"model": MODEL, "want_ctx": 4096},
                                            baseline=[[load()]], context=[FIT_TO_8K[:2]], stability=[passed()]),
         ["ask:model", "ask:want_ctx", "probe:baseline", "probe:context", "probe:stability", "done"],
         None, {"model": MODEL, "max_context_len": 4096}, True, True, "no_oom"),
    Case("unanswered_questions_are_asked_once_then_the_session_stops",
         [], dict(answers={"model": MODEL}),
         ["ask:symptom", "ask:model", "ask:want_ctx", "ask:budget", "done"],
         None, None, False, False, "need_limit"),
    Case("no_model_means_nothing_to_measure",
         [symptom("load")], dict(answers={"model": None}),
         ["ask:model", "done"], None, None, False, False, "need_model"),
    Case("concurrent_phase_asks_the_wanted_concurrency",
         [symptom("concurrent"), target(want_ctx=2048), DEV],
         dict(answers={"want_parallel": 4}, baseline=[[load()]], context=[FIT_TO_2K],
              backend=[[knob("num_parallel", 4, 18 * GiB)]], stability=[passed()]),
         ["ask:want_parallel", "probe:baseline", "probe:context", "probe:backend:num_parallel=4",
          "change:max_concurrency=4", "done"],
         None, {"max_concurrency": 4, "gpu_memory_utilization": 0.75}, True, True, "no_oom"),
    Case("without_a_device_the_budget_is_the_limit",
         [symptom("long_input"), target(want_ctx=4096)],
         dict(answers={"budget": 16 * GiB}, baseline=[[load(used=10 * GiB)]],
              context=[[tier("short", 2048, 12 * GiB), tier("medium", 4096, 15 * GiB + 512 * MiB)]],
              stability=[passed()], quant=[[]]),
         # the context was shortened: a lower-bit tag at the wanted 4096 is looked for beside it (none here)
         ["ask:budget", "probe:baseline", "probe:context", "ask:keep_context", "change:max_context_len=2048",
          "probe:quant", "done"],
         "kv_cache", {"max_context_len": 2048, "gpu_memory_utilization": None}, True, True),
    Case("on_a_cpu_device_a_cpu_placement_is_not_a_spill_and_no_gpu_share_is_written",
         [symptom("slow"), target(want_ctx=4096), device(total=64 * GiB, vendor="cpu", limit=8 * GiB)],
         dict(baseline=[[load(used=3 * GiB, placement="cpu")]],
              context=[[tier("short", 2048, 3 * GiB), tier("medium", 4096, 4 * GiB)]], stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:stability", "done"],
         None, {"max_context_len": 4096, "gpu_memory_utilization": None}, True, True, "no_oom"),

    # --- baseline fails or spills at load => weights => quantization ladder --
    Case("load_fails_means_weights_then_a_lower_bit_tag_and_its_context",
         [symptom("load"), target(want_ctx=8192), DEV],
         dict(baseline=[[load(ok=False, error="CUDA error: out of memory")]],
              quant=[[trial(Q6, "Q6_K", ok=False), trial(Q4, "Q4_K_M", peak=9 * GiB)]],
              context=[[tier("short", 2048, 9 * GiB), tier("medium", 4096, 10 * GiB), tier("long", 8192, 12 * GiB)]],
              stability=[passed(), passed()]),
         ["probe:baseline", "probe:quant", "change:quant_type=Q4_K_M", "probe:context", "probe:stability", "done"],
         "weights", {"model": Q4, "quant_type": "Q4_K_M", "max_context_len": 8192, "gpu_memory_utilization": 0.5},
         True, True),
    Case("spilled_to_cpu_on_a_gpu_means_weights_and_incoherent_levels_mean_another_device",
         [symptom("slow"), target(want_ctx=4096), DEV],
         dict(baseline=[[load(placement="partial", used=20 * GiB)]],
              quant=[[trial(Q6, "Q6_K", peak=15 * GiB, coherent=False, issues=["repetition"]),
                      trial(Q4, "Q4_K_M", peak=11 * GiB, coherent=False, issues=["numbers changed"])]]),
         ["probe:baseline", "probe:quant", "done"],
         "weights", None, False, False, "another_device"),
    Case("over_the_limit_at_load_with_no_lower_level_means_another_device",
         [symptom("load"), target(want_ctx=4096), DEV],
         dict(baseline=[[load(over_limit=True)]], quant=[[]]),
         ["probe:baseline", "probe:quant", "done"], "weights", None, False, False, "another_device"),
    Case("settled_usage_above_the_margin_means_weights",
         [symptom("load"), target(want_ctx=2048), DEV],
         dict(baseline=[[load(used=OVER)]], quant=[[trial(Q4, "Q4_K_M", peak=OVER)]]),
         ["probe:baseline", "probe:quant", "done"], "weights", None, False, False, "another_device"),
    Case("the_highest_usable_level_is_tried_first_and_skipped_ones_say_why",
         [symptom("load"), target(want_ctx=2048), DEV],
         dict(baseline=[[load(ok=False, error="out of memory")]],
              quant=[[trial(Q6, "Q6_K", peak=15 * GiB, coherent=False), trial("neohorse:8b-q5_K_M", "Q5_K_M", OVER),
                      trial(Q4, "Q4_K_M", peak=12 * GiB)]],
              context=[FIT_TO_2K], stability=[passed()]),
         ["probe:baseline", "probe:quant", "change:quant_type=Q4_K_M", "probe:context", "done"],
         "weights", {"model": Q4, "max_context_len": 2048}, True, True),
    Case("a_quant_change_that_regresses_is_reverted_and_the_next_level_tried",
         [symptom("load"), target(want_ctx=2048), DEV],
         dict(baseline=[[load(ok=False, error="out of memory")]],
              quant=[[trial(Q6, "Q6_K", peak=18 * GiB), trial(Q4, "Q4_K_M", peak=12 * GiB)]],
              context=[FIT_TO_2K], stability=[regressed(), passed()]),
         ["probe:baseline", "probe:quant", "change:quant_type=Q6_K", "change:quant_type=Q4_K_M", "probe:context",
          "done"],
         "weights", {"model": Q4, "quant_type": "Q4_K_M", "max_context_len": 2048}, True, True),
    Case("refusing_quantization_for_weights_says_it_was_declined_not_that_none_fits",
         [symptom("load"), target(want_ctx=4096), DEV],
         dict(refuse=["quant"], baseline=[[load(ok=False, error="x")]], quant=[[trial(Q4, "Q4_K_M", peak=12 * GiB)]]),
         ["probe:baseline", "probe:quant", "change:quant_type=Q4_K_M", "done"],
         "weights", None, False, False, "quant_declined"),
    Case("skipping_the_quant_probe_for_weights_rules_no_level_out",
         [symptom("load"), target(want_ctx=4096), DEV],
         dict(skip=["quant"], baseline=[[load(ok=False, error="x")]]),
         ["probe:baseline", "probe:quant", "done"],
         "weights", None, False, False, "quant_declined"),
    Case("short_tier_fails_means_weights",
         [symptom("long_input"), target(want_ctx=4096), DEV],
         dict(baseline=[[load(used=20 * GiB)]],
              context=[[oom_tier("short", 2048)], [tier("short", 2048, 13 * GiB), tier("medium", 4096, 15 * GiB)]],
              quant=[[trial(Q4, "Q4_K_M", peak=12 * GiB)]], stability=[passed(), passed()]),
         ["probe:baseline", "probe:context", "probe:quant", "change:quant_type=Q4_K_M", "probe:context",
          "probe:stability", "done"],
         "weights", {"model": Q4, "max_context_len": 4096}, True, True),

    # --- memory creeping after settle => not released ---------------------
    Case("creeping_after_settle_means_not_released",
         [symptom("creeping"), target(want_ctx=4096), DEV],
         dict(baseline=[[load(drift=100 * MiB)]], context=[FIT_TO_8K[:2]], stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:stability", "done"],
         "not_released", {"max_context_len": 4096, "gpu_memory_utilization": 0.59}, True, True, "not_released"),
    Case("drift_below_the_threshold_is_not_creeping",
         [symptom("creeping"), target(want_ctx=2048), DEV],
         dict(baseline=[[load(drift=4 * MiB)]], context=[FIT_TO_2K], stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:stability", "done"],
         None, {"max_context_len": 2048}, True, True, "no_oom"),
    Case("usage_not_back_to_baseline_after_a_tier_means_not_released",
         [symptom("creeping"), target(want_ctx=4096), DEV],
         dict(baseline=[[load()]],
              context=[[tier("short", 2048, 12 * GiB), tier("medium", 4096, 14 * GiB, back=False)]],
              stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:stability", "done"],
         "not_released", {"max_context_len": 4096}, True, True, "not_released"),

    # --- loaded => context tiers; short ok, long fails => KV cache ----------
    Case("short_ok_long_fails_means_kv_cache",
         [symptom("long_input"), target(), DEV],
         dict(answers={"want_ctx": None}, baseline=[[load()]], context=[KV_AT_8K], stability=[passed()]),
         ["ask:want_ctx", "probe:baseline", "probe:context", "change:max_context_len=4096", "done"],
         "kv_cache", {"model": MODEL, "max_context_len": 4096, "max_batch_size": 512, "max_concurrency": 1,
                      "quant_type": "Q8_0", "kv_cache": "f16", "gpu_memory_utilization": 0.59}, True, True),
    Case("kv_cache_short_of_the_wish_asks_and_gives_up_context",
         [symptom("long_input"), target(want_ctx=8192), DEV],
         dict(answers={"keep_context": False}, baseline=[[load()]], context=[KV_AT_8K],
              quant=[[trial(Q4, "Q4_K_M", peak=7 * GiB)]], stability=[passed(), passed()]),
         # the alternative: the lower-bit tag at the wanted 8192, retested beside the chosen config
         ["probe:baseline", "probe:context", "ask:keep_context", "change:max_context_len=4096",
          "probe:quant", "probe:stability", "done"],
         "kv_cache", {"max_context_len": 4096}, True, True),
    Case("keeping_context_goes_to_quantization_then_rechecks_context_on_the_lower_bit_tag",
         [symptom("long_input"), target(want_ctx=8192), DEV],
         dict(answers={"keep_context": True}, baseline=[[load()]],
              context=[KV_AT_8K, [tier("short", 2048, 8 * GiB), tier("medium", 4096, 10 * GiB),
                                  tier("long", 8192, 14 * GiB)]],
              quant=[[trial(Q4, "Q4_K_M", peak=7 * GiB)]], stability=[passed(), passed(), passed()]),
         # the alternative: the first tag at its largest fitting 4096, retested beside the chosen config
         ["probe:baseline", "probe:context", "ask:keep_context", "probe:quant", "change:quant_type=Q4_K_M",
          "probe:context", "probe:stability", "done"],
         "kv_cache", {"model": Q4, "max_context_len": 8192, "gpu_memory_utilization": 0.3}, True, True),
    Case("the_context_recheck_on_the_lower_bit_tag_decides_not_the_quant_trial",
         [symptom("long_input"), target(want_ctx=8192, keep_context=True), DEV],
         dict(baseline=[[load()]],
              context=[KV_AT_8K, [tier("short", 2048, 8 * GiB), tier("medium", 4096, 10 * GiB),
                                  oom_tier("long", 8192)]],
              quant=[[trial(Q4, "Q4_K_M", peak=7 * GiB)], []], stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:quant", "change:quant_type=Q4_K_M", "probe:context",
          "probe:quant", "done"],
         "kv_cache", {"model": Q4, "max_context_len": 4096, "gpu_memory_utilization": 0.42}, False, False,
         "context_unmet"),
    Case("lower_bit_levels_are_tried_at_the_wanted_context_where_the_kv_cache_still_overflows",
         [symptom("long_input"), target(want_ctx=8192, keep_context=True), DEV],
         dict(baseline=[[load()]], context=[KV_AT_8K],
              quant=[[trial(Q6, "Q6_K", peak=OVER), trial(Q4, "Q4_K_M", peak=OVER)]]),
         ["probe:baseline", "probe:context", "probe:quant", "done"],
         "kv_cache", {"model": MODEL, "max_context_len": 4096}, False, False, "context_unmet"),
    Case("refusing_the_context_change_moves_on_to_quantization",
         [symptom("long_input"), target(), DEV],
         dict(answers={"want_ctx": None}, refuse=["context"], baseline=[[load()]], context=[KV_AT_8K], quant=[[]]),
         ["ask:want_ctx", "probe:baseline", "probe:context", "change:max_context_len=4096", "probe:quant", "done"],
         "kv_cache", {"max_context_len": 4096}, False, False, "context_unmet"),
    Case("a_context_change_that_regresses_is_reverted_and_quantization_tried",
         [symptom("long_input"), target(want_ctx=4096), DEV],
         dict(answers={"keep_context": False}, baseline=[[load()]],
              context=[[tier("short", 2048, 12 * GiB), tier("medium", 3072, 14 * GiB), oom_tier("long", 4096)],
                       [tier("short", 2048, 8 * GiB), tier("medium", 3072, 9 * GiB), tier("long", 4096, 10 * GiB)]],
              quant=[[trial(Q4, "Q4_K_M", peak=7 * GiB)]], stability=[regressed(), passed(), passed()]),
         ["probe:baseline", "probe:context", "ask:keep_context", "change:max_context_len=3072", "probe:quant",
          "change:quant_type=Q4_K_M", "probe:context", "done"],
         "kv_cache", {"model": Q4, "max_context_len": 4096}, True, True),
    Case("a_tier_above_the_margin_counts_as_not_fitting",
         [symptom("long_input"), target(), DEV],
         dict(answers={"want_ctx": None}, baseline=[[load()]],
              context=[[tier("short", 2048, 12 * GiB), tier("medium", 4096, 18 * GiB), tier("long", 8192, OVER)]],
              stability=[passed()]),
         ["ask:want_ctx", "probe:baseline", "probe:context", "change:max_context_len=4096", "done"],
         "kv_cache", {"max_context_len": 4096, "gpu_memory_utilization": 0.75}, True, True),
    Case("when_only_the_conservative_context_fits_it_is_the_context_change",
         [symptom("long_input"), target(), DEV],
         dict(answers={"want_ctx": None}, baseline=[[load()]],
              context=[[tier("short", 2048, 12 * GiB), oom_tier("medium", 4096)]], stability=[passed()]),
         ["ask:want_ctx", "probe:baseline", "probe:context", "change:max_context_len=2048", "done"],
         "kv_cache", {"max_context_len": 2048}, True, True),
    # the probes classify the text (probes/oomtext.py) and post the kind: the rules read `failure`
    Case("an_oom_failure_without_the_flag_is_still_memory",
         [symptom("long_input"), target(), DEV],
         dict(answers={"want_ctx": None}, baseline=[[load()]],
              context=[[tier("short", 2048, 12 * GiB), tier("medium", 4096, 14 * GiB),
                        tier("long", 8192, ok=False, error="cudaMalloc failed: out of memory",
                             failure="startup_oom", oom_marker="cudamalloc failed")]],
              stability=[passed()]),
         ["ask:want_ctx", "probe:baseline", "probe:context", "change:max_context_len=4096", "done"],
         "kv_cache", {"max_context_len": 4096}, True, True),
    Case("a_failure_above_the_wanted_context_is_no_problem",
         [symptom("long_input"), target(want_ctx=4096), DEV],
         dict(baseline=[[load()]], context=[KV_AT_8K], stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:stability", "done"],
         None, {"max_context_len": 4096}, True, True, "no_oom"),

    # --- truncation or a crash unrelated to memory => not_memory -----------
    Case("a_crash_without_oom_markers_is_not_memory",
         [symptom("crash"), target(want_ctx=8192), DEV],
         dict(baseline=[[load()]],
              context=[[tier("short", 2048, 12 * GiB),
                        tier("medium", 4096, ok=False, error="llama runner process has terminated: exit status 2")]],
              stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:stability", "done"],
         "not_memory", {"max_context_len": 2048}, True, True, "crash"),
    Case("truncation_is_not_memory_and_the_config_gets_the_measured_context",
         [symptom("long_input"), target(), DEV],
         dict(answers={"want_ctx": None}, baseline=[[load()]],
              context=[[tier("short", 2048, 12 * GiB), tier("medium", 4096, 14 * GiB),
                        tier("long", 8192, 15 * GiB, truncated=True)]],
              stability=[passed()]),
         ["ask:want_ctx", "probe:baseline", "probe:context", "probe:stability", "done"],
         "not_memory", {"max_context_len": 4096}, True, True, "truncation"),

    # --- single request fine, concurrency overflows => backend knobs -------
    Case("concurrency_overflow_tries_the_kv_cache_type_first",
         [symptom("concurrent"), target(want_ctx=2048, want_parallel=4), DEV],
         dict(baseline=[[load()]], context=[FIT_TO_2K],
              backend=[[knob("num_parallel", 4, OVER)], [knob("kv_cache_type", "q8_0", 20 * GiB)]],
              stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:backend:num_parallel=4", "ask:keep_concurrency",
          "probe:backend:kv_cache_type=q8_0", "change:kv_cache=q8_0", "done"],
         "concurrency", {"max_batch_size": 512, "max_concurrency": 4, "kv_cache": "q8_0",
                         "gpu_memory_utilization": 0.84}, True, True),
    Case("backend_knobs_go_kv_cache_then_batch_then_fewer_requests",
         [symptom("concurrent"), target(want_ctx=2048, want_parallel=4), DEV],
         dict(answers={"keep_concurrency": False}, baseline=[[load()]], context=[FIT_TO_2K],
              backend=[[knob("num_parallel", 4, ok=False, error="out of memory")],
                       [knob("kv_cache_type", "q8_0", OVER)], [knob("kv_cache_type", "q4_0", OVER)],
                       [knob("num_batch", 256, OVER)], [knob("num_batch", 128, OVER)],
                       [knob("num_parallel", 2, 19 * GiB)]],
              stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:backend:num_parallel=4", "ask:keep_concurrency",
          "probe:backend:kv_cache_type=q8_0", "probe:backend:kv_cache_type=q4_0", "probe:backend:num_batch=256",
          "probe:backend:num_batch=128", "probe:backend:num_parallel=2", "change:max_concurrency=2", "done"],
         "concurrency", {"max_batch_size": 512, "max_concurrency": 2, "kv_cache": "f16"}, True, True,
         "concurrency_reduced"),
    Case("a_backend_change_that_regresses_is_reverted_and_the_next_knob_tried",
         [symptom("concurrent"), target(want_ctx=2048, want_parallel=4), DEV],
         dict(baseline=[[load()]], context=[FIT_TO_2K],
              backend=[[knob("num_parallel", 4, OVER)], [knob("kv_cache_type", "q8_0", 20 * GiB)],
                       [knob("kv_cache_type", "q4_0", 19 * GiB)]],
              stability=[crashed(), passed()]),
         ["probe:baseline", "probe:context", "probe:backend:num_parallel=4", "ask:keep_concurrency",
          "probe:backend:kv_cache_type=q8_0", "change:kv_cache=q8_0", "probe:backend:kv_cache_type=q4_0",
          "change:kv_cache=q4_0", "done"],
         "concurrency", {"kv_cache": "q4_0", "max_concurrency": 4}, True, True),
    Case("when_the_concurrency_must_stay_fewer_requests_are_never_tried",
         [symptom("concurrent"), target(want_ctx=2048, want_parallel=4), DEV],
         dict(answers={"keep_concurrency": True}, baseline=[[load()]], context=[FIT_TO_2K],
              backend=[[knob("num_parallel", 4, OVER)]] + [[knob("num_batch", 0, OVER)]] * 4,
              stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:backend:num_parallel=4", "ask:keep_concurrency",
          "probe:backend:kv_cache_type=q8_0", "probe:backend:kv_cache_type=q4_0", "probe:backend:num_batch=256",
          "probe:backend:num_batch=128", "probe:stability", "done"],
         # verified at one request: it fits, and the unmet concurrency is said (unmet, advice)
         "concurrency", {"max_concurrency": 1, "max_batch_size": 512}, True, True, "concurrency_unmet"),
    Case("a_concurrency_knob_the_probe_cannot_set_ends_with_what_to_restart",
         [symptom("concurrent"), target(want_ctx=2048, want_parallel=4), DEV],
         dict(baseline=[[load()]], context=[FIT_TO_2K],
              backend=[[knob("num_parallel", 4, None, applied=False)]], stability=[passed()]),
         ["probe:baseline", "probe:context", "probe:backend:num_parallel=4", "probe:stability", "done"],
         None, {"max_concurrency": 1}, True, True, "concurrency_unmeasured"),

    # --- a probe that gives nothing ----------------------------------------
    Case("a_baseline_probe_without_a_reading_ends_without_a_config",
         [symptom("load"), target(want_ctx=2048), DEV],
         dict(baseline=[[]]),
         ["probe:baseline", "done"], None, None, False, False, "probe_failed"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_branch(case: Case):
    adv, trace, steps = drive(case.first, Script(**case.script))
    try:
        final = steps[-1]
        assert trace == case.steps
        assert final["cause"] == case.cause
        assert final["verified"] is case.verified
        assert final["fits"] is case.fits
        assert final["advice"] == case.advice
        if case.config is None:
            assert final["config"] is None
        else:
            assert {k: final["config"][k] for k in case.config} == case.config
        assert (adv.diagnosis or {}).get("cause") == case.cause
    finally:
        adv.close()


def test_there_is_a_case_per_branch():
    assert len(CASES) >= 25
    assert len({c.name for c in CASES}) == len(CASES)


# --- verified means measured -------------------------------------------------

def _final(first, script):
    _, trace, steps = drive(first, script)
    return trace, steps[-1]


def test_a_retest_whose_memory_failed_to_read_never_verifies_the_config():
    trace, final = _final([symptom("load"), target(want_ctx=2048), DEV],
                          Script(baseline=[[load()]], context=[FIT_TO_2K],
                                 stability=[unmeasured_retest("3 of 40 memory readings failed")]))
    assert trace == ["probe:baseline", "probe:context", "probe:stability", "done"]
    assert final["verified"] is False
    assert final["config"]["max_context_len"] == 2048
    assert "3 of 40 memory readings failed" in final["unverified"]


def test_figures_a_remote_server_reports_are_used_but_never_verify():
    reported = dict(passed(), measured=False, unmeasured="reported by the server (/api/ps), not measured")
    trace, final = _final([symptom("load"), target(want_ctx=2048), DEV],
                          Script(baseline=[[load(measured=False, unmeasured="reported by the server")]],
                                 context=[[dict(t, measured=False, unmeasured="reported") for t in FIT_TO_2K]],
                                 stability=[reported]))
    assert trace == ["probe:baseline", "probe:context", "probe:stability", "done"]
    assert final["fits"] is True and final["verified"] is False
    assert "reported by the server" in final["unverified"]


def test_a_measured_pass_verifies_and_says_no_reason():
    _, final = _final([symptom("load"), target(want_ctx=2048), DEV],
                      Script(baseline=[[load()]], context=[FIT_TO_2K], stability=[passed()]))
    assert final["verified"] is True and final["unverified"] is None and final["unmet"] == []


def test_a_wished_concurrency_that_was_reduced_is_reported_unmet():
    _, final = _final([symptom("concurrent"), target(want_ctx=2048, want_parallel=4), DEV],
                      Script(answers={"keep_concurrency": False}, baseline=[[load()]], context=[FIT_TO_2K],
                             backend=[[knob("num_parallel", 4, OVER)], [knob("kv_cache_type", "q8_0", OVER)],
                                      [knob("kv_cache_type", "q4_0", OVER)], [knob("num_batch", 256, OVER)],
                                      [knob("num_batch", 128, OVER)], [knob("num_parallel", 2, 19 * GiB)]],
                             stability=[passed()]))
    assert final["config"]["max_concurrency"] == 2
    assert final["unmet"] == ["max_concurrency"] and final["advice"] == "concurrency_reduced"


def test_a_retest_that_regresses_against_the_previous_one_does_not_verify():
    weights = [load(ok=False, used=None, error="CUDA error: out of memory")]
    shorter = dict(passed(), eval_count=20)  # the second retest generates far less than the first
    trace, final = _final([symptom("load"), target(want_ctx=4096), DEV],
                          Script(baseline=[weights], quant=[[trial(Q4, "Q4_K_M", peak=7 * GiB)]],
                                 context=[[tier("short", 2048, 7 * GiB), tier("medium", 4096, 8 * GiB)]],
                                 stability=[passed(), shorter]))
    assert trace[-3:] == ["probe:context", "probe:stability", "done"]
    assert final["config"]["max_context_len"] == 4096
    assert final["verified"] is False
    assert final["unverified"] == "the stability retest failed: shorter output: 20 tokens, previous run 256"
    assert final["unverified_zh"] == "稳定性复测失败：输出变短：20 个 token，上一次 256 个"  # issue 30: said in Chinese too


def test_a_retest_whose_output_repeats_itself_says_so_in_the_final_step():
    # a 135M stand-in on a q8_0 KV cache: half its 4-grams repeat (none on f16)
    repeats = dict(passed(), repeat_share=0.52)
    trace, final = _final([symptom("long_input"), target(want_ctx=2048), DEV],
                          Script(baseline=[[load()]], context=[FIT_TO_2K], stability=[repeats] * 3))
    assert final["verified"] is False
    assert final["unverified"] == "the stability retest failed: the output repeats itself (52% of its 4-grams)"
    assert final["unverified_zh"] == "稳定性复测失败：输出在自我重复（四词组中 52% 重复）"


def test_a_wish_beyond_the_trained_context_is_not_a_memory_problem():
    fits = [dict(tier("short", 2048, 3 * GiB), trained_ctx=8192), dict(tier("long", 8192, 5 * GiB), trained_ctx=8192)]
    trace, final = _final([symptom("long_input"), target(want_ctx=16384), DEV],
                          Script(answers={"keep_context": False}, baseline=[[load()]], context=[fits],
                                 stability=[passed()]))
    assert final["cause"] == "not_memory" and final["advice"] == "trained_clamp"
    assert final["config"]["max_context_len"] == 8192 and final["verified"] is True
    assert final["unmet"] == ["max_context_len"]
