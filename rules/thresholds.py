"""Every number the decision tree compares against, in one documented place.

The rules read these when they classify a measurement (does this load creep,
does this tier fit under the limit with a safety margin, was the prompt cut,
is a lower-bit answer still sound); the probes post raw figures and judge
nothing, so a reading and the rule that judges it can never disagree about a
threshold. Sizes are bytes, rates bytes per minute, ratios plain fractions.
Change a value here and the tests say which branches move.
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

#: A prompt counts as truncated when the server evaluated fewer than
#: ``1 - TRUNCATION_SLACK`` of the tokens sent (a tier's fill, the stability
#: task), less ``TRUNCATION_SLACK_TOKENS``: the slack absorbs the tokens a count
#: can differ by. Those are a few tokens whatever the prompt's length: each
#: prompt's nonce (8 hex digits) tokenizes to 3-6 tokens, and the fill's cost
#: is estimated from two short prompts with nonces of their own. A 188-token
#: tier read as cut with 2% alone (3.8 tokens); a real cut at num_ctx loses
#: hundreds.
TRUNCATION_SLACK = 0.02
TRUNCATION_SLACK_TOKENS = 16


def truncated(evaluated: int | None, sent: int | None) -> bool:
    """The server evaluated clearly fewer tokens than were sent (the readings' *_CUT test)."""
    return bool(evaluated and sent and evaluated < sent * (1 - TRUNCATION_SLACK) - TRUNCATION_SLACK_TOKENS)


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
#: A retest whose output repeats more than this share of its word 4-grams
#: fails outright (stricter than a quant trial's limit: the verified config's
#: own answer to the longer stability task).
RETEST_MAX_REPEAT_SHARE = 0.30
#: The retest is the user's load: for a long-input complaint its prompt fills
#: this share of the config's context (records of long paragraphs, then the
#: fixed task), as a context tier's does, so the KV cache the config promises
#: is actually filled; the rest is room for the answer.
RETEST_FILL = 0.85
#: For memory that creeps, the retest sends the task this many times in a row
#: (a leak grows per request; one request cannot show it).
RETEST_REPEATS = 3

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
    """The limits rules/coherence.py's checks hold a lower-bit tag's answer to
    the fixed task against (one reading rule per check)."""

    #: share of repeated word 4-grams above which the answer "loops"
    max_repeat_share: float = 0.35
    #: share of characters that are neither letters, digits, CJK, punctuation
    #: nor space above which the text is garbled
    max_garbled_share: float = 0.08
    #: share of the numbers the higher-bit tag kept that the answer may lose;
    #: more is a rewrite
    max_lost_numbers_share: float = 0.5
    #: numbers in the answer that are in neither the task nor the reference
    #: count as invented only above this many ...
    min_invented_numbers: int = 2
    #: ... and above this share of the task's own numbers
    max_invented_numbers_share: float = 0.5


COHERENCE = CoherenceLimits()

# --- session guard -----------------------------------------------------------

#: Steps after which a session stops with what it has; the tree always ends
#: much sooner, so reaching it means facts kept arriving that changed nothing.
MAX_STEPS = 60


def fit_limit(limit_bytes: int, margin: float = SAFETY_MARGIN_FRACTION) -> int:
    """The highest peak that still fits under ``limit_bytes`` with the margin."""
    return int(limit_bytes * (1.0 - margin))


def peak_fits(loaded: bool, peak_bytes: int | None, fit_limit_bytes: int) -> bool | None:
    """The fit test of one measured trial, the same one the ``*_above_limit``
    reading rules apply: a load that failed does not fit, an unmeasured peak
    says nothing (None), a measured one fits at or under the limit with margin.

    The context and concurrency searches (``probes/search.py``) call it
    between two loads, where posting to the engine and waiting for a deciding
    rule would be a round trip per bisection step; the number and the
    comparison live here so the rules and the search cannot disagree."""
    if not loaded:
        return False
    if peak_bytes is None:
        return None
    return peak_bytes <= fit_limit_bytes


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

# --- coherence from token log-probabilities (servers that return them) ------

#: A lower-bit tag is coherent by its distribution when, on the fixed task
#: with greedy decoding, it keeps at least this share of the higher-bit
#: reference's tokens before the two first choose differently ...
MIN_TOP_TOKEN_AGREEMENT = 0.5
#: ... and the mean KL divergence of its top-5 distributions from the
#: reference's over the compared positions stays below this (nats). Q8_0 vs
#: F16 is typically far below 0.05; a broken quantization is well above 0.5.
MAX_TOP_LOGPROB_KL = 0.3

#: a lower-bit level is not even loaded when its uncalibrated prediction, taken
#: this much too high, is still over the fit limit: the memory model's worst
#: error seen is 24% high (v0.11.4 on a CPU, Q4_1 at 8192: 490.6 MiB predicted,
#: 394.9 measured) and 20.5% low (bench/README.md), so a level skipped would
#: have peaked at least 7% over the line
QUANT_SKIP_SLACK = 0.25
