"""Settings under which a set of models stays loaded together: the arithmetic.

The set's rules (:mod:`rules.together`) decide *what* to try; this module
works out the numbers from what was measured, and nothing else. Each model
of the set has one or more *levels* (its own tag, and lower-bit tags the
rules had measured and found coherent), each with measured peaks at one or
more contexts, each peak measured alone with the context filled. A level's
peak grows in a straight line with its context (the KV cache and the
attention scores grow with the cells; the weights do not), fitted through its
points; a level measured at one context borrows the slope of the model's
own tag, since a lower-bit tag of the same model has the same KV cache.

:func:`plan` keeps the method's order of remedies: the user's contexts as
they are; else shorter contexts, all models shortened by the same share so
that none gives up everything, never below :data:`MIN_SET_CTX` (or the
user's own context when that is shorter); else a lower-bit level for the
model with the heaviest weights, then shorter contexts again. The first
arrangement whose predicted peaks add up under the limit wins. It is a
prediction built from measurements; only the set's retest verifies it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

#: the shortest context the plan shortens a model to (unless the user's own is shorter)
MIN_SET_CTX = 2048
#: contexts are multiples of this many cells (the KV cache's padding on both engines)
CTX_STEP = 256


@dataclass(frozen=True)
class Level:
    """One tag of a model with its measured ``(num_ctx, peak bytes)`` points."""

    tag: str
    points: tuple[tuple[int, int], ...]
    bits: float | None = None

    def line(self, slope: float | None = None) -> tuple[float, float] | None:
        """``(intercept, bytes per cell)`` through the points (least squares),
        or through the one point with ``slope``; None when it cannot be drawn."""
        pts = [(c, p) for c, p in self.points if p is not None]
        if len({c for c, _ in pts}) >= 2:
            n = len(pts)
            mx = sum(c for c, _ in pts) / n
            my = sum(p for _, p in pts) / n
            b = sum((c - mx) * (p - my) for c, p in pts) / sum((c - mx) ** 2 for c, _ in pts)
            return my - max(0.0, b) * mx, max(0.0, b)
        if pts and slope is not None:
            c, p = pts[0]
            return p - slope * c, slope
        return None


@dataclass(frozen=True)
class Model:
    """One model of the set: the context the user serves it with, its levels
    (its own tag first, then lower-bit ones, highest bits first)."""

    model: str
    num_ctx: int
    levels: tuple[Level, ...]

    def slope(self) -> float:
        """Bytes per context cell, from the model's own tag; 0 when it was
        measured at one context only (then shortening it is predicted to save
        nothing: the plan shortens the others instead, never on a guess)."""
        first = self.levels[0].line() if self.levels else None
        return first[1] if first else 0.0

    def peak(self, level: int, num_ctx: int) -> int | None:
        line = self.levels[level].line(self.slope())
        return None if line is None else int(round(line[0] + line[1] * num_ctx))

    def floor(self) -> int:
        return min(self.num_ctx, MIN_SET_CTX)


@dataclass
class Plan:
    """The arrangement found: per model its tag, context and predicted peak."""

    fits: bool
    members: list[dict] = field(default_factory=list)
    total: int | None = None
    limit: int | None = None
    #: "as_is" (the user's settings), "context" (shorter contexts), "quant" (a lower-bit tag, maybe shorter contexts)
    remedy: str | None = None

    def to_dict(self) -> dict:
        return {"fits": self.fits, "members": list(self.members), "total": self.total, "limit": self.limit,
                "remedy": self.remedy}


def fit_contexts(peaks: Sequence[Callable[[int], int | None]], wanted: Sequence[int], limit: int,
                 floor: int = MIN_SET_CTX) -> list[int] | None:
    """The largest contexts, none under ``floor`` (or its own wanted context
    when shorter), whose peaks (``peaks[i](num_ctx)``) add up under ``limit``:
    every model cut by the same share first, so that none gives up
    everything, then each in turn, the first first, given back what still
    fits. None when even the floors do not fit (or a peak cannot be drawn)."""
    floors = [min(floor, w) for w in wanted]

    def at(share: float) -> list[int]:
        return [max(f, int(w * share) // CTX_STEP * CTX_STEP) for w, f in zip(wanted, floors)]

    def total(ctxs: Sequence[int]) -> int | None:
        values = [p(c) for p, c in zip(peaks, ctxs)]
        return None if None in values else sum(values)

    chosen = None
    for share in [1.0] + [i / 64 for i in range(63, 0, -1)]:
        ctxs = at(share)
        got = total(ctxs)
        if got is None:
            return None
        if got <= limit:
            chosen = ctxs
            break
        if ctxs == floors:
            return None
    if chosen is None:
        return None
    for i, peak in enumerate(peaks):
        others = total(chosen) - peak(chosen[i])
        c = wanted[i]
        while c > chosen[i] and others + peak(c) > limit:
            c -= CTX_STEP
        chosen[i] = max(chosen[i], c)
    return chosen


def _arrange(models: Sequence[Model], levels: Sequence[int], limit: int) -> tuple[list[int], int] | None:
    """The contexts (:func:`fit_contexts`) at these levels and their predicted
    total; None when even the floors do not fit."""
    peaks = [lambda c, m=m, lv=lv: m.peak(lv, c) for m, lv in zip(models, levels)]
    ctxs = fit_contexts(peaks, [m.num_ctx for m in models], limit)
    if ctxs is None:
        return None
    return ctxs, sum(p(c) for p, c in zip(peaks, ctxs))


def plan(models: Sequence[Model], limit: int, shrink: float = 1.0) -> Plan:
    """The first arrangement, in the method's order, whose predicted peaks add
    up under ``limit`` × ``shrink`` (the rules lower ``shrink`` after a retest
    that went over)."""
    budget = int(limit * shrink)
    levels = [0] * len(models)
    while True:
        found = _arrange(models, levels, budget)
        if found is not None:
            ctxs, total = found
            as_is = all(c == m.num_ctx for m, c in zip(models, ctxs))
            remedy = "quant" if any(levels) else ("as_is" if as_is else "context")
            members = [{"model": m.model, "tag": m.levels[lv].tag, "num_ctx": c, "was_ctx": m.num_ctx,
                        "predicted_peak": m.peak(lv, c)} for m, lv, c in zip(models, levels, ctxs)]
            return Plan(True, members, total, budget, remedy)
        # the heaviest model that still has a lower level measured goes down one
        heaviest = sorted((i for i, m in enumerate(models) if levels[i] + 1 < len(m.levels)),
                          key=lambda i: models[i].peak(levels[i], models[i].floor()) or 0, reverse=True)
        if not heaviest:
            return Plan(False, [], None, budget, None)
        levels[heaviest[0]] += 1
