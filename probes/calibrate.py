"""Predictions corrected by what was measured on this machine.

The memory model (``probes/memmodel/``) says what a load should allocate;
a real load says what it did, seen by this machine's memory source (runner
RSS, NVML), which adds what no formula knows: the runtime's own overhead,
pages a request touches or not, allocator rounding. Every measured load is a
point.

With one point the model's own growth is kept and only the intercept moves:
``peak(c) = peak_1 + model(c) - model(c_1)``. From two points at different
contexts on, the fit is least squares of the measured peak against the KV
cache's bytes (linear in tokens x slots): an intercept (weights, overhead and
the fixed part of the compute buffer, as this source sees them) and a slope
(measured bytes per KV byte, so the per-token cost is the slope x the model's
KV per token), with the residual saying how well a straight line explains
the points. The regressor is the KV cache, not the model's KV + compute,
because the compute buffer the model knows is the server's *estimate*: on
the legacy engine a conservative maximum of two formulas that jumps between
4096 and 8192 while the measured peak grows in a straight line (bench/README.md,
``bench_predict.py`` at an 85 % fill: a 2-point fit on the estimate missed by
up to 7.8 %, on the KV cache by 1.4 %). The uncalibrated prediction is kept beside it, so a bench can
show what the calibration bought.
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
    def _kv(self, num_ctx: int, num_parallel: int) -> int:
        return self.footprint(num_ctx, num_parallel).kv

    def _growing(self, num_ctx: int, num_parallel: int) -> int:
        f = self.footprint(num_ctx, num_parallel)
        return f.peak - f.weights - f.output - f.overhead

    def _line(self) -> bool:
        """Whether the points span two KV sizes: then a line is fitted."""
        return len({self._kv(p.num_ctx, p.num_parallel) for p in self.points}) >= 2

    def fit(self) -> tuple[float, float, float | None]:
        """``(intercept, slope, residual)``. From two KV sizes on: peak ~
        intercept + slope x KV bytes, the residual the root-mean-square error
        in bytes (None with two points: they fit exactly). With fewer, the
        model's own line, peak ~ intercept + 1 x (KV + compute), through the
        point if there is one. A fitted slope outside :data:`SLOPE_RANGE`
        is refused: the model's line through the points' mean instead."""
        return self._fit()[:3]

    def _fit(self) -> tuple[float, float, float | None, Callable[[int, int], int]]:
        if not self.points:
            f = self.footprint(2048, 1)
            return float(f.weights + f.output + f.overhead), 1.0, None, self._growing
        ys = [p.peak for p in self.points]
        if self._line():
            xs = [self._kv(p.num_ctx, p.num_parallel) for p in self.points]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            sxx = sum((x - mx) ** 2 for x in xs)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
            if SLOPE_RANGE[0] <= slope <= SLOPE_RANGE[1]:
                intercept = my - slope * mx
                residual = None
                if len(xs) >= 3:
                    residual = math.sqrt(sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys)) / len(xs))
                return intercept, slope, residual, self._kv
        xs = [self._growing(p.num_ctx, p.num_parallel) for p in self.points]
        return sum(y - x for x, y in zip(xs, ys)) / len(xs), 1.0, None, self._growing

    def per_token_bytes(self, kv_per_token: float) -> float:
        """Measured bytes per token of context: the fitted slope x the model's KV per token."""
        return self.fit()[1] * kv_per_token

    # -- predicting --------------------------------------------------------------
    def uncalibrated(self, num_ctx: int, num_parallel: int = 1) -> int:
        """The memory model's own total, no measurement involved."""
        return self.footprint(num_ctx, num_parallel).peak

    def predict(self, num_ctx: int, num_parallel: int = 1) -> int:
        """The peak this machine should measure: from the fit once there is a
        point, the memory model before."""
        if not self.points:
            return self.uncalibrated(num_ctx, num_parallel)
        intercept, slope, _, regressor = self._fit()
        return int(intercept + slope * regressor(num_ctx, num_parallel))

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
        intercept, slope, residual, regressor = self._fit()
        return {"points": [[p.num_ctx, p.num_parallel, p.peak] for p in self.points],
                "intercept": int(intercept), "slope": round(slope, 4),
                "residual": None if residual is None else int(residual),
                # what the slope multiplies: the KV cache (a fitted line) or the model's KV + compute
                "basis": "kv" if regressor == self._kv else "kv+compute"}
