"""Predictions corrected by what was measured on this machine.

The memory model (``probes/memmodel.py``) says what a load should allocate;
a real load says what it did, seen by this machine's memory source (runner
RSS, NVML), which adds what no formula knows: the runtime's own overhead,
pages a request touches or not, allocator rounding. Every measured load is a
point. The fit is least squares of the measured peak against the model's
context-dependent bytes (KV cache + compute buffer): an intercept (weights
and overhead as this source sees them) and a slope (measured bytes per
predicted byte, so the per-token cost is the slope x the model's KV per
token). With one point only the intercept moves; from two on both do, and
the residual says how well a straight line explains the points. The
uncalibrated prediction is kept beside it, so a bench can show what the
calibration bought.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from probes.memmodel import Footprint, largest_fitting_ctx

#: a fitted slope outside this range means the points disagree with the model
#: (a noisy reading, a reload that kept an old buffer); the fit then keeps the
#: model's slope and moves only the intercept
SLOPE_RANGE = (0.25, 4.0)


@dataclass(frozen=True)
class Point:
    """One measured load: its per-slot context and slots, and the peak (bytes)."""

    num_ctx: int
    num_parallel: int
    peak: int


@dataclass
class Calibration:
    """``footprint(num_ctx, num_parallel) -> Footprint`` is the memory model
    bound to one model and engine; :meth:`add` takes measured points."""

    footprint: Callable[[int, int], Footprint]
    points: list[Point] = field(default_factory=list)

    def add(self, num_ctx: int, peak: int | None, num_parallel: int = 1) -> None:
        """Record a measured peak; an unmeasured one (None) is no point."""
        if peak is None:
            return
        self.points.append(Point(int(num_ctx), int(num_parallel), int(peak)))

    # -- the fit ---------------------------------------------------------------
    def _x(self, num_ctx: int, num_parallel: int) -> tuple[int, int]:
        f = self.footprint(num_ctx, num_parallel)
        return f.weights + f.output, f.kv + f.compute

    def fit(self) -> tuple[float, float, float | None]:
        """``(intercept, slope, residual)``: peak ~ intercept + slope x (KV +
        compute). Residual is the root-mean-square error in bytes (None with
        fewer than three points: two points fit exactly)."""
        if not self.points:
            f = self.footprint(2048, 1)
            return float(f.weights + f.output), 1.0, None
        xs = [self._x(p.num_ctx, p.num_parallel)[1] for p in self.points]
        ys = [p.peak for p in self.points]
        slope = 1.0
        distinct = len(set(xs)) >= 2
        if distinct:
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            sxx = sum((x - mx) ** 2 for x in xs)
            fitted = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
            if SLOPE_RANGE[0] <= fitted <= SLOPE_RANGE[1]:
                slope = fitted
        intercept = sum(y - slope * x for x, y in zip(xs, ys)) / len(xs)
        residual = None
        if len(xs) >= 3:
            residual = math.sqrt(sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys)) / len(xs))
        return intercept, slope, residual

    def per_token_bytes(self, kv_per_token: float) -> float:
        """Measured bytes per token of context: the fitted slope x the model's KV per token."""
        return self.fit()[1] * kv_per_token

    # -- predicting --------------------------------------------------------------
    def uncalibrated(self, num_ctx: int, num_parallel: int = 1) -> int:
        """The memory model's own total, no measurement involved."""
        return self.footprint(num_ctx, num_parallel).total

    def predict(self, num_ctx: int, num_parallel: int = 1) -> int:
        """The peak this machine should measure: from the fit once there is a
        point, the memory model before."""
        if not self.points:
            return self.uncalibrated(num_ctx, num_parallel)
        intercept, slope, _ = self.fit()
        return int(intercept + slope * self._x(num_ctx, num_parallel)[1])

    def largest_ctx(self, limit_bytes: int, lo: int, hi: int, num_parallel: int = 1,
                    step: int = 256) -> int | None:
        """The largest multiple of ``step`` in [lo, hi] predicted to peak under ``limit_bytes``."""
        return largest_fitting_ctx(lambda c: self.predict(c, num_parallel), limit_bytes, lo, hi, step)

    def largest_parallel(self, limit_bytes: int, num_ctx: int, hi: int) -> int | None:
        """The most slots (1..hi) predicted to fit at ``num_ctx``."""
        best = None
        for p in range(1, int(hi) + 1):
            if self.predict(num_ctx, p) > limit_bytes:
                break
            best = p
        return best

    def to_dict(self) -> dict:
        intercept, slope, residual = self.fit()
        return {"points": [[p.num_ctx, p.num_parallel, p.peak] for p in self.points],
                "intercept": int(intercept), "slope": round(slope, 4),
                "residual": None if residual is None else int(residual)}
