"""The context search on the rig's real Ollama: the largest num_ctx it proves
is within one step (256) of the true answer, checked by independent loads."""
from __future__ import annotations

import pytest

from probes import context
from probes.base import ProbeEnv
from probes.memory.select import select_reader
from probes.ollama_api import Ollama
from rules.thresholds import fit_limit
from tests.integration.helpers import read

pytestmark = pytest.mark.integration

TAG = "neohorse-1:f16"
FILL = 0.02   # the KV cache is allocated at load; a short request keeps the test to a minute on 2 cores


def peaks(env, tiers):
    result = context.run(env, TAG, tiers=tiers, fill=FILL)
    return {f["num_ctx"]: f["peak"] for f in result.facts}


def test_search_lands_within_one_step_of_the_true_largest_context(rig):
    api = Ollama(rig.host)
    reader = select_reader(server_pid=lambda: rig.server_pid).reader
    env = ProbeEnv(api=api, reader=reader, device=reader.info(), control=rig.server)
    ends = peaks(env, [2048, 8192])
    assert ends[2048] is not None and ends[8192] > ends[2048]
    budget = int((ends[2048] + 0.6 * (ends[8192] - ends[2048])) / 0.95)
    limit = fit_limit(budget)
    env.limit_bytes = budget
    result = context.run(env, TAG, want_ctx=8192, fit_limit_bytes=limit, fill=FILL)
    found = max(f["num_ctx"] for f, rule in zip(result.facts, read("context", result.facts, budget))
                if rule == "tier_fits")
    assert 2048 < found < 8192
    assert len(result.facts) <= 5
    # independent check, measured again: the answer fits, and 512 more does not,
    # so the true largest multiple of 256 is found or one step above it
    env.limit_bytes = None
    again = peaks(env, [found, found + 512])
    assert again[found] <= limit * 1.01      # run-to-run jitter of host RSS
    assert again[found + 512] > limit
