"""The search on fakes: a machine whose peaks follow their own law (not the
memory model's), and a calibration that must learn it from the trials."""
from __future__ import annotations

import pytest

from probes.calibrate import Calibration
from probes.memmodel import MIB, Footprint
from probes.search import Trial, context_guess, search_largest, search_parallel

TRAINED = 8192


def model(num_ctx: int, num_parallel: int = 1) -> Footprint:
    """The memory model as the probe knows it: 250 MiB weights, 22.5 KiB/token."""
    return Footprint("llama-server", num_ctx, num_parallel, 512, "f16", 250 * MIB,
                     int(num_ctx * num_parallel * 23040), 16 * MIB)


class Machine:
    """What a real load would measure: more overhead and a steeper slope than
    the model says (runtime pages, allocator rounding), optional noise, and an
    out-of-memory failure above ``oom_above`` bytes."""

    def __init__(self, intercept=285 * MIB, per_token=25_000, noise=0, oom_above=None, unmeasured_at=()):
        self.intercept, self.per_token, self.noise = intercept, per_token, noise
        self.oom_above, self.unmeasured_at = oom_above, set(unmeasured_at)
        self.history: list[int] = []

    def peak(self, ctx: int, parallel: int = 1) -> int:
        wobble = ((ctx * 7919 + parallel * 104729) % 11 - 5) / 5 * self.noise  # fixed, not tuned: -1..1 x noise
        return int(self.intercept + self.per_token * ctx * parallel + wobble)

    def measure(self, ctx: int, parallel: int = 1) -> Trial:
        self.history.append(ctx)
        peak = self.peak(ctx, parallel)
        if ctx in self.unmeasured_at:
            return Trial(ctx, True, None, unmeasured="the memory source could not see the runner")
        if self.oom_above is not None and peak > self.oom_above:
            return Trial(ctx, False, None, error="out of memory", oom=True)
        return Trial(ctx, True, peak)


def sweep(machine: Machine, fit_limit: int, cap: int = TRAINED) -> int | None:
    """The true answer: every multiple of 256 measured."""
    fits = [c for c in range(256, cap + 1, 256) if machine.peak(c) <= fit_limit]
    return max(fits) if fits else None


def run_search(machine: Machine, fit_limit: int, start: int = 2048, cap: int = TRAINED, **kw):
    cal = Calibration(model)

    def measure(ctx: int) -> Trial:
        trial = machine.measure(ctx)
        cal.add(ctx, trial.peak)
        return trial

    return search_largest(measure, context_guess(cal, fit_limit), fit_limit, start, cap, **kw), cal


@pytest.mark.parametrize("limit_mib", [400, 430, 455, 470, 490])
def test_monotone_peaks_find_the_sweeps_answer_in_four_loads(limit_mib):
    machine = Machine()
    fit_limit = limit_mib * MIB
    result, _ = run_search(machine, fit_limit)
    assert result.best == sweep(machine, fit_limit)
    assert result.loads <= 4
    assert all(machine.peak(c) <= fit_limit for c in [result.best])


def test_noisy_peaks_stay_within_one_step_of_the_sweep_and_never_above_the_limit():
    machine = Machine(noise=3 * MIB)
    for limit_mib in (380, 410, 445, 480):
        fit_limit = limit_mib * MIB
        result, _ = run_search(machine, fit_limit)
        truth = sweep(machine, fit_limit)
        assert truth - 256 <= result.best <= truth
        assert machine.peak(result.best) <= fit_limit
        assert result.loads <= 6


def test_a_failure_at_the_first_rung_recommends_nothing():
    machine = Machine()
    result, _ = run_search(machine, fit_limit=300 * MIB)
    assert (result.best, result.first_fail, result.stop, result.loads) == (None, 2048, "first_failed", 1)


def test_out_of_memory_loads_bound_the_search_like_an_over_limit_peak():
    # an out-of-memory load has no peak to learn from: the search bisects
    machine = Machine(oom_above=420 * MIB)
    result, _ = run_search(machine, fit_limit=600 * MIB, max_trials=8)
    assert result.best == sweep(machine, 420 * MIB)
    assert result.first_fail == result.best + 256


def test_a_limit_above_the_trained_context_stops_at_the_trained_context():
    machine = Machine()
    result, _ = run_search(machine, fit_limit=2000 * MIB, cap=TRAINED)
    assert (result.best, result.stop) == (TRAINED, "cap")
    assert max(machine.history) == TRAINED and result.loads == 2


def test_the_margin_is_the_callers_fit_limit_not_the_raw_limit():
    machine = Machine()
    limit = 470 * MIB
    with_margin = int(limit * (1 - 0.05))
    raw, _ = run_search(machine, limit)
    kept, _ = run_search(Machine(), with_margin)
    assert kept.best < raw.best
    assert machine.peak(kept.best) <= with_margin < machine.peak(raw.best)


def test_an_unmeasured_peak_stops_the_search_with_the_best_verified_value():
    machine = Machine(unmeasured_at=range(2304, TRAINED + 1))
    result, _ = run_search(machine, fit_limit=470 * MIB)
    assert (result.best, result.stop) == (2048, "unmeasured")


def test_a_crash_is_not_a_memory_boundary():
    def measure(ctx):
        return Trial(ctx, ctx <= 4096, 300 * MIB if ctx <= 4096 else None, error="segfault")

    result = search_largest(measure, lambda lo, hi: hi, 500 * MIB, 2048, 8192)
    assert result.stop == "error" and result.best == 2048 and result.first_fail is None


def test_a_prediction_that_keeps_missing_falls_back_to_bisection():
    machine = Machine()
    fit_limit = 420 * MIB
    # a guess that always says "the top fits" (a broken model)
    result = search_largest(machine.measure, lambda lo, hi: hi, fit_limit, 2048, 65536, max_trials=12)
    truth = sweep(machine, fit_limit, 65536)
    assert result.best == truth and result.stop == "converged"
    assert result.loads <= 12


def test_a_cap_that_is_not_a_multiple_of_256_is_tried_as_it_is():
    machine = Machine()
    result, _ = run_search(machine, fit_limit=2000 * MIB, cap=5000)
    assert result.best == 5000 and result.stop == "cap"


def test_concurrency_search_finds_the_most_slots_that_fit():
    machine = Machine()
    cal = Calibration(model)
    fit_limit = 600 * MIB

    def measure(p):
        peak = machine.peak(4096, p)
        cal.add(4096, peak, p)
        return Trial(p, True, peak)

    result = search_parallel(measure, cal, fit_limit, 4096, want=8)
    truth = max(p for p in range(1, 9) if machine.peak(4096, p) <= fit_limit)
    assert result.best == truth and result.loads <= 4


def test_a_trial_fits_by_the_rules_own_test_at_the_margin_line():
    # the search and the *_above_limit reading rules compare the same way:
    # at the line fits, one byte over does not, a failed load never, unmeasured says nothing
    from rules.thresholds import peak_fits
    assert Trial(4096, ok=True, peak=1000).fits(1000) is True
    assert Trial(4096, ok=True, peak=1001).fits(1000) is False
    assert Trial(4096, ok=False, peak=10).fits(1000) is False
    assert Trial(4096, ok=True, peak=None).fits(1000) is None
    assert peak_fits(True, 1000, 1000) and not peak_fits(True, 1001, 1000)
