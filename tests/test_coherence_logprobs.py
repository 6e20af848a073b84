"""The measured coherence signal: top-token agreement and a KL estimate."""
from __future__ import annotations

import math

import pytest

from probes.coherence import compare_logprobs


def step(token, dist):
    """One generated position: the chosen token and its top log-probabilities."""
    return {"token": token, "logprob": math.log(dist[token]), "top": {t: math.log(p) for t, p in dist.items()}}


REF = [step("The", {"The": 0.9, "A": 0.1}), step(" sky", {" sky": 0.8, " sea": 0.2}),
       step(" is", {" is": 0.95, " was": 0.05}), step(" blue", {" blue": 0.7, " grey": 0.3})]


def test_the_same_distribution_agrees_fully_with_no_divergence():
    out = compare_logprobs(REF, REF)
    assert out["agreement"] == 1.0 and out["kl"] == pytest.approx(0.0, abs=1e-12) and out["positions"] == 4


def test_a_candidate_that_parts_early_agrees_on_the_prefix_only():
    cand = REF[:1] + [step(" sea", {" sea": 0.6, " sky": 0.4})] + REF[2:]
    out = compare_logprobs(REF, cand)
    assert out["agreement"] == 0.25 and out["positions"] == 2
    # position 2: KL(0.8/0.2 || 0.4/0.6) = 0.8 ln 2 + 0.2 ln(1/3)
    assert out["kl"] == pytest.approx((0.0 + 0.8 * math.log(2) + 0.2 * math.log(1 / 3)) / 2)


def test_a_flattened_distribution_shows_in_kl_though_the_text_is_the_same():
    flat = [step(s["token"], {t: (0.55 if t == s["token"] else 0.45) for t in s["top"]}) for s in REF]
    out = compare_logprobs(REF, flat)
    assert out["agreement"] == 1.0
    assert out["kl"] > 0.1


def test_a_token_missing_from_the_candidates_top_list_gets_its_lowest_logprob():
    cand = [step("The", {"The": 0.97, "An": 0.03})]
    out = compare_logprobs(REF[:1], cand)
    p, q = 0.9, 0.97 / (0.97 + 0.03)
    expected = p * math.log(p / q) + 0.1 * math.log(0.1 / (0.03 / (0.97 + 0.03)))
    assert out["kl"] == pytest.approx(expected)
