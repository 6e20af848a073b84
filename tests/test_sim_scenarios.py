"""The shipped scenarios behave as docs/scenarios.md says, measured on the
simulator itself (no diagnosis involved)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from probes import coherence, memmodel
from rules.coherence import failed_checks
from oomsim.scenario import load_scenario
from oomsim.messages import RUNTIME_OOM
from oomsim.settings import SimError
from oomsim.state import SimState
from probes.texts import coherence_task

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
NAMES = ("weights", "kv_cache", "kv_cache_keep_context", "concurrency", "not_released", "not_memory")
ANSWER_KEYS = {"symptom", "want_ctx", "want_parallel", "keep_context", "budget", "lang", "model"}
MiB = 1 << 20


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def state_of(name: str, clock=None) -> SimState:
    scn = load_scenario(SCENARIOS / f"{name}.yaml").with_timing(0, 0)
    return SimState(scn, clock=clock) if clock else SimState(scn)


def where(state: SimState, tag: str, num_ctx: int, **options) -> str:
    runner, _ = state.schedule(tag, dict(options, num_ctx=num_ctx), None)
    return runner.placement.where


def largest_fitting_ctx(state: SimState, tag: str, step: int = 256) -> int:
    ctx = step
    while where(state, tag, ctx + step) == "gpu" and ctx + step <= 32768:
        ctx += step
    return ctx


@pytest.mark.parametrize("name", NAMES)
def test_every_scenario_has_an_answers_file_and_a_doc_entry(name):
    scn = load_scenario(SCENARIOS / f"{name}.yaml")
    answers = yaml.safe_load((SCENARIOS / f"{name}.answers.yaml").read_text())
    assert set(answers) == ANSWER_KEYS
    assert scn.find(answers["model"]) is not None
    assert answers["lang"] in ("en", "zh") and answers["symptom"].strip()
    assert f"`{name}`" in (ROOT / "docs" / "scenarios.md").read_text()


def test_weights_f16_and_q8_spill_and_q4_fits_the_wanted_context():
    s = state_of("weights")
    assert where(s, "neohorse-1:f16", 2048) == "partial"
    assert where(s, "neohorse-1:q8_0", 2048) == "partial"
    assert where(s, "neohorse-1:q4_K_M", 8192) == "gpu"


def test_kv_cache_short_fits_long_spills_and_the_limit_is_between_8k_and_12k():
    s = state_of("kv_cache")
    assert [where(s, "neohorse-1:q4_K_M", c) for c in (2048, 8192, 32768)] == ["gpu", "gpu", "partial"]
    assert 8192 <= largest_fitting_ctx(s, "neohorse-1:q4_K_M") < 12288


def test_keep_context_needs_q3_and_q2_is_garbled():
    s = state_of("kv_cache_keep_context")
    assert where(s, "neohorse-1:q8_0", 8192) == "gpu"
    assert where(s, "neohorse-1:q8_0", 32768) == "partial"
    assert where(s, "neohorse-1:q4_K_M", 32768) == "partial"
    assert where(s, "neohorse-1:q3_K_M", 32768) == "gpu"
    assert where(s, "neohorse-1:q2_K", 32768) == "gpu"
    task = coherence_task()
    answers = {}
    for tag in ("neohorse-1:q8_0", "neohorse-1:q3_K_M", "neohorse-1:q2_K"):
        runner, _ = s.schedule(tag, {"num_ctx": 2048}, None)
        ticket = s.begin(runner, task, {"seed": 11, "num_predict": 160})
        s.finish(ticket)
        answers[tag] = ("".join(ticket.pieces), ticket.done_reason)
    ref = answers["neohorse-1:q8_0"][0]
    assert not failed_checks(coherence.measure(answers["neohorse-1:q3_K_M"][0], task, ref,
                                               answers["neohorse-1:q3_K_M"][1]))
    assert failed_checks(coherence.measure(answers["neohorse-1:q2_K"][0], task, ref, answers["neohorse-1:q2_K"][1]))


def test_concurrency_four_slots_never_fit_two_do():
    s = state_of("concurrency")
    assert s.settings().num_parallel == 4
    for batch in (512, 256, 128, 64, 32):
        assert where(s, "neohorse-1:q4_K_M", 4096, num_batch=batch) == "partial"
    fits = {}
    for parallel in (1, 2, 3):
        s.restart({"OLLAMA_NUM_PARALLEL": str(parallel)})
        fits[parallel] = where(s, "neohorse-1:q4_K_M", 4096)
    assert fits == {1: "gpu", 2: "gpu", 3: "partial"}


def test_not_released_leaks_per_request_creeps_while_idle_and_then_crashes():
    clock = Clock()
    s = state_of("not_released", clock)
    assert where(s, "neohorse-1:q4_K_M", 4096) == "gpu"
    before = s.used_bytes()
    clock.now += 60
    assert s.used_bytes() - before == 120 * MiB
    runner = s.loaded()[0]
    seen = [s.used_bytes()]
    with pytest.raises(SimError) as err:
        for _ in range(10):
            s.finish(s.begin(runner, "hello", {}))
            seen.append(s.used_bytes())
    assert seen[1] - seen[0] == 400 * MiB and err.value.text == RUNTIME_OOM
    assert 2 <= len(seen) - 1 <= 5  # a handful of requests, then the crash


def test_not_memory_default_context_truncates_and_the_wanted_one_fits():
    s = state_of("not_memory")
    long_doc = "The quarterly report covers sales, staffing and the new warehouse. " * 400
    runner, _ = s.schedule("neohorse-1:q4_K_M", {}, None)
    ticket = s.begin(runner, long_doc, {"num_predict": 8})
    s.finish(ticket)
    assert runner.num_ctx == 2048 and ticket.truncated and ticket.prompt_tokens == 2048
    assert where(s, "neohorse-1:q4_K_M", 8192) == "gpu"
    runner, _ = s.schedule("neohorse-1:q4_K_M", {"num_ctx": 8192}, None)
    ticket = s.begin(runner, long_doc, {"num_predict": 8})
    s.finish(ticket)
    assert not ticket.truncated


@pytest.mark.parametrize("name", NAMES)
def test_scenario_predictions_match_the_memory_model(name):
    """Nothing in a scenario bypasses memmodel: every load is its placement."""
    s = state_of(name)
    for model in s.scenario.models.values():
        runner, _ = s.schedule(model.tag, {"num_ctx": 4096}, None)
        settings = s.settings()
        free = s.scenario.device.total_bytes - s.scenario.device.used_by_others_bytes
        expect = memmodel.place(model.arch, model.weights_bytes, 4096, settings.num_parallel, 512, "f16", free)
        assert runner.placement == expect
        s.unload(model.tag)
