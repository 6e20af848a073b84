"""The sanity invariants every measurement must hold, checked in one place.

A reading that breaks physics is a broken measurement, not a finding: an
"after load" below the idle reading means the idle reading still counted
something that went away (an old runner), a peak below the weights means the
source did not see the model's memory. Each check returns the reasons a
figure cannot be trusted (an empty list: it can); the probes re-measure once
and mark the step unmeasured if the second try fails too
(:func:`probes.step.measure_checked`). The checks are not verdicts about the
model (fits, over the limit): those stay with the rules.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from probes.units import fmt_size

#: Readings are differences of two noisy readings: a negative "after load" of
#: up to this much is noise (host RSS of other threads, NVML rounding to MiB).
NOISE_BYTES = 4 << 20
#: A model whose weights are all on the device holds at least this share of
#: the weights' file size once a request has run (the rest is the file's
#: metadata, the vocabulary kept on the host, and tensors mapped lazily).
WEIGHTS_SHARE = 0.80
#: Peaks of growing contexts may wobble by allocator rounding; a drop larger
#: than this share of the smaller context's peak (or NOISE_BYTES) is a fault.
MONOTONE_TOLERANCE = 0.05


def load_problems(after_load: int | None, peak: int | None, weights_bytes: int | None = None,
                  weights_on_device: bool = False) -> list[str]:
    """after-load >= 0, peak >= after-load, peak >= the weights held on the device."""
    problems = []
    if after_load is not None and after_load < -NOISE_BYTES:
        problems.append(f"the after-load reading is {fmt_size(after_load)} below idle")
    if peak is not None and after_load is not None and peak + NOISE_BYTES < after_load:
        problems.append(f"the peak ({fmt_size(peak)}) is below the after-load reading ({fmt_size(after_load)})")
    if weights_on_device and weights_bytes and peak is not None and peak < weights_bytes * WEIGHTS_SHARE:
        problems.append(f"the peak ({fmt_size(peak)}) is below the model's weights ({fmt_size(weights_bytes)})")
    return problems


def monotone_problems(points: Iterable[tuple[int, int | None]]) -> list[tuple[int, str]]:
    """Peaks must not fall as ``num_ctx`` grows: ``points`` are (num_ctx, peak)
    in the order measured; returns (num_ctx, reason) for each point whose
    peak is clearly below that of a smaller context."""
    seen: list[tuple[int, int]] = []
    problems = []
    for num_ctx, peak in points:
        if peak is None:
            continue
        below = [(c, p) for c, p in seen if c < num_ctx and peak + max(NOISE_BYTES, p * MONOTONE_TOLERANCE) < p]
        if below:
            ctx, other = max(below, key=lambda cp: cp[1])
            problems.append((num_ctx, f"the peak at num_ctx {num_ctx} ({fmt_size(peak)}) is below the peak at "
                                      f"num_ctx {ctx} ({fmt_size(other)})"))
        seen.append((num_ctx, peak))
    return problems


def summarize(problems: Sequence[str]) -> str:
    return "sanity check failed twice: " + "; ".join(problems)
