"""The numbers the tree compares against, and the fact kinds the rules added."""
from __future__ import annotations

import pytest

from rules import thresholds as T
from rules.facts import FactError, validate

GiB = 1 << 30
MiB = 1 << 20


def test_the_fit_limit_leaves_the_safety_margin():
    assert T.fit_limit(10 * GiB) == int(10 * GiB * (1 - T.SAFETY_MARGIN_FRACTION))
    assert T.fit_limit(10 * GiB, margin=0.0) == 10 * GiB


def test_utilization_rounds_up_so_it_never_understates_the_need():
    assert T.utilization(10 * GiB, 24 * GiB) == 0.42  # 0.4167 -> 0.42
    assert T.utilization(12 * GiB, 24 * GiB) == 0.5  # exact stays exact
    assert T.utilization(30 * GiB, 24 * GiB) == 1.0
    assert T.utilization(None, 24 * GiB) is None and T.utilization(GiB, None) is None


@pytest.mark.parametrize("before, after, peak, back", [
    (4 * GiB, 4 * GiB + 10 * MiB, 8 * GiB, True),     # within the absolute tolerance
    (4 * GiB, 4 * GiB + 150 * MiB, 8 * GiB, True),    # within 5 % of a 4 GiB rise
    (4 * GiB, 4 * GiB + 300 * MiB, 8 * GiB, False),   # beyond both
    (4 * GiB, 4 * GiB + 100 * MiB, 4 * GiB + 200 * MiB, False),
])
def test_back_to_baseline_uses_the_larger_of_the_two_tolerances(before, after, peak, back):
    assert T.back_to_baseline(before, after, peak) is back


def test_the_backend_ladder_goes_down_from_the_conservative_batch():
    assert all(b < T.CONSERVATIVE_NUM_BATCH for b in T.BATCH_LADDER)
    assert list(T.BATCH_LADDER) == sorted(T.BATCH_LADDER, reverse=True)
    assert T.KV_CACHE_LADDER[0] == "q8_0"


def test_coherence_limits_are_fractions():
    limits = T.COHERENCE
    assert 0 < limits.max_repeat_share < 1 and 0 < limits.max_garbled_share < 1
    assert 0 < limits.max_lost_numbers_share <= 1 and 0 < limits.max_invented_numbers_share <= 1


def test_probe_done_and_refusal_are_facts():
    assert validate({"kind": "probe_done", "probe": "quant", "ok": False, "error": "pull failed"})["ok"] is False
    assert validate({"kind": "refusal", "remedy": "context"})["remedy"] == "context"
    with pytest.raises(FactError, match="refusal.remedy"):
        validate({"kind": "refusal", "remedy": "device"})


def test_a_load_may_name_its_quantization_level():
    fact = {"kind": "load", "model": "m", "options": {}, "answered": True, "error": None, "size": 1, "size_vram": 1,
            "used_after": 1, "used_settled": 1, "drift_per_min": 0.0, "level": "Q4_K_M"}
    assert validate(fact)["level"] == "Q4_K_M"
    with pytest.raises(FactError, match="load.level"):
        validate(dict(fact, level=4))


def test_a_numbered_middle_tier_is_said_in_chinese_with_its_number():
    # five points the search measured: the middle three are "medium 1..3" (probes/context.py)
    from rules.rulebook import tier_word
    assert [tier_word(n, "zh") for n in ("short", "medium", "medium 2", "long")] == ["短", "中", "中 2", "长"]
    assert tier_word("medium 2", "en") == "medium 2" and tier_word("odd", "zh") == "odd"


def _tier_read(evaluated: int, sent: int, num_ctx: int = 2048) -> str:
    from rules.engine import read_measurements
    fact = {"kind": "tier", "name": "short", "num_ctx": num_ctx, "model": "m", "prompt_tokens": evaluated,
            "sent_tokens": sent, "peak": 300 << 20, "answered": True, "error": None, "measured": True}
    (reading,) = read_measurements("context", [fact], limit=1 << 40)
    return reading["rule"]


def test_a_short_prompt_a_few_tokens_under_its_estimate_is_not_read_as_cut():
    # a rig run: a 188-token tier came back 5 tokens short (each prompt's nonce tokenizes to 3-6
    # tokens, and the cost was estimated from two prompts with nonces of their own)
    assert not T.truncated(183, 188) and _tier_read(183, 188) == "tier_fits"
    # a prompt the server cut at num_ctx loses far more than the slack
    assert T.truncated(2048, 4869) and _tier_read(2048, 4869) == "tier_truncated"
    assert T.truncated(1700, 1760) and not T.truncated(None, 1760)
