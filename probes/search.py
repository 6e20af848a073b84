"""Search, then prove: the largest value that fits, in few real loads.

A pure procedure over two callbacks, so the context step, the concurrency
step and the tests share one implementation: ``measure(value)`` loads and
fills for real and returns a :class:`Trial`; ``guess(lo, hi)`` is the
calibrated prediction of the largest value in ``[lo, hi]`` that fits. The
search measures the start (the conservative rung), then verifies the
prediction, then closes the gap between the best verified pass and the first
verified failure, with the prediction while it keeps landing and by plain
bisection once it has missed twice. Only measured values come out as
``best``: a prediction picks what to measure, never what to recommend. A
trial whose peak could not be measured stops the search (nothing more can be
proved with that source).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from rules.thresholds import peak_fits

#: loads one search may spend (the start included) before it settles for the
#: best verified pass
MAX_TRIALS = 6


@dataclass(frozen=True)
class Trial:
    """One real measurement at ``value``: did the load and the filling request
    succeed, and the measured peak (None: unmeasured, with ``unmeasured`` the
    reason)."""

    value: int
    ok: bool
    peak: int | None
    predicted: int | None = None
    error: str | None = None
    oom: bool = False
    unmeasured: str | None = None

    def fits(self, fit_limit: int) -> bool | None:
        """True/False when measured, None when the peak is unmeasured: the
        rules' own test (:func:`rules.thresholds.peak_fits`), not a copy."""
        return peak_fits(self.ok, self.peak, fit_limit)


@dataclass
class SearchResult:
    """``best``: the largest value measured to fit (None if none did);
    ``first_fail``: the smallest measured not to; ``stop``: why the search
    ended (``cap`` reached the cap, ``converged`` best and first_fail are one
    step apart, ``first_failed`` the start did not fit, ``trials`` the load
    budget ran out, ``unmeasured`` a peak could not be read, ``error`` a trial
    failed for a reason other than memory)."""

    best: int | None
    first_fail: int | None
    cap: int
    step: int
    stop: str
    trials: list[Trial] = field(default_factory=list)

    @property
    def loads(self) -> int:
        return len(self.trials)

    def to_dict(self) -> dict:
        return {"best": self.best, "first_fail": self.first_fail, "cap": self.cap, "step": self.step,
                "stop": self.stop, "loads": self.loads,
                "trials": [{"value": t.value, "ok": t.ok, "peak": t.peak, "predicted": t.predicted,
                            "error": t.error, "unmeasured": t.unmeasured} for t in self.trials]}


def search_largest(measure: Callable[[int], Trial], guess: Callable[[int, int], int | None], fit_limit: int,
                   start: int, cap: int, step: int = 256, max_trials: int = MAX_TRIALS,
                   stop_on_error: bool = True) -> SearchResult:
    """The largest multiple of ``step`` in ``[start, cap]`` (``start`` itself
    need not be a multiple) whose measured peak is at most ``fit_limit``.

    ``fit_limit`` is the caller's limit with its safety margin already taken
    off (the thresholds live in the rules; probes get the number). A trial
    that is not ``ok`` counts as a failure when it ran out of memory (``oom``)
    and stops the search otherwise (with ``stop_on_error``): a crash is not a
    memory boundary to bisect on.
    """
    cap = max(int(cap), 1)
    start = min(max(int(start), 1), cap)
    trials: list[Trial] = []
    passes: list[int] = []
    fails: list[int] = []
    misses = 0

    def bounds() -> tuple[int | None, int | None]:
        fail = min(fails) if fails else None
        below = [v for v in passes if fail is None or v < fail]
        return (max(below) if below else None), fail

    def result(stop: str) -> SearchResult:
        best, fail = bounds()
        return SearchResult(best, fail, cap, step, stop, trials)

    def run(value: int) -> bool | None:
        trial = measure(value)
        trials.append(trial)
        verdict = trial.fits(fit_limit)
        if verdict is None:
            return None
        if verdict:
            passes.append(value)
        elif trial.ok or trial.oom or not stop_on_error:
            fails.append(value)
        else:
            return None  # not a memory outcome
        return verdict

    first = run(start)
    if first is None:
        return result("unmeasured" if trials[-1].ok else "error")
    if not first:
        return result("first_failed")
    while True:
        best, fail = bounds()
        hi = cap if fail is None else min(cap, _floor(fail - 1, step))
        lo = min(_ceil(best + 1, step), cap)
        if best >= cap:
            return result("cap")
        if lo > hi:
            return result("converged")
        if len(trials) >= max_trials:
            return result("trials")
        # an out-of-memory load has no peak, so the fit learns nothing from it;
        # a prediction that missed three times has stopped learning: bisect then
        blind = any(t.peak is None and not t.ok for t in trials)
        if (misses >= 3 or blind) and fail is not None:
            guessed = False
            candidate = min(max(_floor((best + fail) // 2, step), lo), hi)
        else:
            predicted = guess(lo, hi)
            guessed = predicted is not None
            # nothing more predicted to fit: prove the boundary next to best
            candidate = lo if predicted is None else min(max(int(predicted), lo), hi)
        verdict = run(candidate)
        if verdict is None:
            return result("unmeasured" if trials[-1].ok else "error")
        if guessed and not verdict:
            misses += 1


def _floor(value: int, step: int) -> int:
    return int(value) // step * step


def _ceil(value: int, step: int) -> int:
    return -(-int(value) // step) * step


def context_guess(calibration, fit_limit: int, num_parallel: int = 1, step: int = 256):
    """``guess`` for :func:`search_largest` over ``num_ctx``: the top of the
    range when it is predicted to fit (so a cap that is not a multiple of the
    step is tried as it is), else the largest predicted multiple of ``step``."""
    def guess(lo: int, hi: int) -> int | None:
        if calibration.predict(hi, num_parallel) <= fit_limit:
            return hi
        return calibration.largest_ctx(fit_limit, lo, hi, num_parallel, step)
    return guess


def parallel_guess(calibration, fit_limit: int, num_ctx: int):
    """``guess`` for :func:`search_largest` over ``num_parallel`` at ``num_ctx``."""
    def guess(lo: int, hi: int) -> int | None:
        best = None
        for p in range(lo, hi + 1):
            if calibration.predict(num_ctx, p) > fit_limit:
                break
            best = p
        return best
    return guess


def search_parallel(measure: Callable[[int], Trial], calibration, fit_limit: int, num_ctx: int, want: int,
                    max_trials: int = MAX_TRIALS) -> SearchResult:
    """The most concurrent slots (1..``want``) whose measured peak at
    ``num_ctx`` fits: the same search with a step of one slot. ``measure(p)``
    must restart the server with ``OLLAMA_NUM_PARALLEL=p`` (or say it could
    not) and run ``p`` filling requests at once."""
    return search_largest(measure, parallel_guess(calibration, fit_limit, num_ctx), fit_limit, 1, want,
                          step=1, max_trials=max_trials)
