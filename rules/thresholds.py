"""Every number the decision tree compares against, in one documented place.

The rules read these when they classify a measurement (does this load creep,
does this tier fit under the limit with a safety margin); the probes are handed
the same values by the assistant when they compute a flag themselves
(``back_to_baseline``, ``coherent``), so a reading and the rule that judges it
never disagree about a threshold. Sizes are bytes, rates bytes per minute,
ratios plain fractions. Change a value here and the tests say which branches
move.
"""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024

# --- reading the baseline ---------------------------------------------------

#: Idle growth after the load has settled, in bytes per minute, above which the
#: memory is "creeping" (not released between requests). A settled Ollama
#: runner holds its weights and KV cache flat; 16 MiB/min over a settle window
#: of a minute or two is well above sampler noise on NVML and host RSS alike.
SETTLE_DRIFT_BYTES_PER_MIN = 16 * MiB

# --- reading a context tier -------------------------------------------------

#: After a tier's request, usage counts as "back to baseline" when it is within
#: this many bytes of the reading taken before the request ...
BACK_TO_BASELINE_TOLERANCE_BYTES = 64 * MiB
#: ... or within this fraction of the rise the request caused, whichever is
#: larger (a 20 GiB rise leaves more allocator slack than a 200 MiB one).
BACK_TO_BASELINE_TOLERANCE_FRACTION = 0.05

# --- judging any measured peak ----------------------------------------------

#: A measured peak fits only if it stays below ``limit * (1 - margin)``: the
#: headroom absorbs what a sampler taking readings many times a second can
#: miss between two readings and the allocator's jitter from run to run. The
#: peaks are the model's share (reading minus the idle reading) and the limit
#: is what the device can give it, so Ollama's own reserve (one spare layer) is
#: already outside the peak; 5 % keeps real fits such as the shipped
#: scenarios' (89-94 % of the limit) and refuses a peak at the edge.
#: A config above it is never recommended.
SAFETY_MARGIN_FRACTION = 0.05

# --- judging a stability retest against the previous one (method step 6) ---

#: A retest that generates fewer than this share of the previous run's tokens
#: has shorter output: the change cut the answer (truncation, a crash).
REGRESSION_SHORTER_FRACTION = 0.8
#: The share of repeated 4-grams may rise this much before the output counts
#: as looping more than before (greedy decoding of the same task wobbles).
REGRESSION_REPEAT_RISE = 0.15

# --- the conservative starting point (method step 2) ------------------------

CONSERVATIVE_NUM_CTX = 2048
CONSERVATIVE_NUM_BATCH = 512
CONSERVATIVE_NUM_PARALLEL = 1
DEFAULT_KV_CACHE = "f16"

# --- backend ladder (method step 5) ------------------------------------------
# When concurrency overflows: KV cache type, then batch (both keep the wished
# concurrency), and only then fewer concurrent requests, if the user allows it.

#: Batch sizes tried, in order, one trial each, when concurrency overflows.
BATCH_LADDER = (256, 128)
#: KV cache types tried, in order. They come first: a smaller KV cache keeps
#: every concurrent slot, while fewer slots drop the user's wish.
KV_CACHE_LADDER = ("q8_0", "q4_0")

# --- coherence of a lower-bit quantization (method step 4) ------------------


@dataclass(frozen=True)
class CoherenceLimits:
    """Limits the quant probe applies to the fixed task's output before it
    reports ``coherent``; the rules then only read the flag."""

    #: share of repeated word 4-grams above which the text is "repetitive"
    max_repeated_4gram_ratio: float = 0.30
    #: share of sentences that end without terminal punctuation or break off
    max_broken_sentence_ratio: float = 0.20
    #: numbers in the input that must appear unchanged in the output
    numbers_must_match: bool = True
    #: fenced code in the input must come back byte-identical
    code_must_match: bool = True
    #: output shorter than this share of the reference tag's output is cut short
    min_length_ratio: float = 0.50


COHERENCE = CoherenceLimits()

# --- session guard -----------------------------------------------------------

#: Steps after which a session stops with what it has; the tree always ends
#: much sooner, so reaching it means facts kept arriving that changed nothing.
MAX_STEPS = 60


def fit_limit(limit_bytes: int, margin: float = SAFETY_MARGIN_FRACTION) -> int:
    """The highest peak that still fits under ``limit_bytes`` with the margin."""
    return int(limit_bytes * (1.0 - margin))


def back_to_baseline(before_bytes: int, after_bytes: int, peak_bytes: int) -> bool:
    """Whether usage after a request fell back near the reading before it."""
    rise = max(0, peak_bytes - before_bytes)
    slack = max(BACK_TO_BASELINE_TOLERANCE_BYTES, BACK_TO_BASELINE_TOLERANCE_FRACTION * rise)
    return after_bytes - before_bytes <= slack


def utilization(peak_bytes: int | None, total_bytes: int | None) -> float | None:
    """``gpu_memory_utilization``: measured peak over device total, rounded up
    to the next 0.01 so the value written never understates the need."""
    if not peak_bytes or not total_bytes:
        return None
    percent = -(-peak_bytes * 100 // total_bytes)  # integer ceiling: no float rounding
    return min(1.0, percent / 100)
