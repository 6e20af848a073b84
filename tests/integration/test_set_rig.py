"""Two models that must stay loaded together, on the real rig (both engines).

The user's server runs with ``OLLAMA_MAX_LOADED_MODELS=1`` and serves every
model at ``OLLAMA_CONTEXT_LENGTH=1024``; the budget (the card being planned
for, on this CPU) holds NeoHorse-1 or Gemma 3 270M alone, not both. oomvet
must see the eviction itself (loading gemma3 unloads neohorse-1 in
``/api/ps``), name the setting that causes it (read from the server, not
assumed), find settings under which both fit (the setting raised to 2, and
NeoHorse-1's lower-bit tag checked for coherence: at 1024 the contexts cannot
shrink under the plan's floor), and verify them: both stay loaded through a
retest that sends the fixed task to both at once, under the limit. The
budgets differ per engine because v0.11.4 runs Gemma 3 on its own Go engine,
which holds about 170 MiB more than llama-server for the same model.
"""
from __future__ import annotations

import json

import pytest
import yaml

from assistant.cli import main
from rules.thresholds import fit_limit

pytestmark = pytest.mark.integration
MiB = 1 << 20

CHAT, EMBED = "neohorse-1", "gemma3-270m:q4_k_m"
#: holds one but not both at 1024 (measured on this rig: alone 332 + 354 MiB on
#: v0.34.4, 372 + 525 MiB on v0.11.4)
BUDGET = {"llama-server": "680MiB", "runner": "850MiB"}


def test_an_eviction_is_seen_named_and_a_set_that_stays_loaded_is_verified(rig, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["diagnose", "--rig", "--rig-version", rig.version,
                 "--rig-env", "OLLAMA_MAX_LOADED_MODELS=1", "--rig-env", "OLLAMA_CONTEXT_LENGTH=1024",
                 "--model", CHAT, "--also", EMBED, "--budget", BUDGET[rig.engine], "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    payload = json.loads(captured.out)
    found = payload["set"]
    assert payload["verified"] is True and found["why"] == "set_retest_held"
    limit = fit_limit(found["limit"])

    # the setup as it is: each model at the context the server gives it, read from /api/ps
    assert [m["num_ctx"] for m in found["models"]] == [1024, 1024]
    assert found["max_loaded"] == {"value": 1, "from": "set"}
    alone = {a["model"]: a["points"][0]["peak"] for a in found["measured"]["alone"]}
    assert all(peak < limit for peak in alone.values()), alone          # each fits alone
    assert sum(alone.values()) > limit, alone                            # not both
    # the eviction, seen in /api/ps, and its cause
    assert found["measured"]["evicted"] == [{"model": CHAT, "by": EMBED}]
    assert found["measured"]["together"]["all_loaded"] is False
    assert found["causes"][0] == "evicted_by_setting"
    assert "EVICTION" in captured.err and "OLLAMA_MAX_LOADED_MODELS" in captured.err

    # the settings found, and the retest that verified exactly them
    plan = {m["model"]: m for m in found["plan"]["members"]}
    assert found["server_env"] == {"OLLAMA_MAX_LOADED_MODELS": "2"}
    assert plan[CHAT]["tag"] in ("neohorse-1:q8_0", "neohorse-1:q4_1") and plan[EMBED]["tag"] == EMBED
    assert found["plan"]["total"] <= limit
    doc = yaml.safe_load((out / "oomvet-set.yaml").read_text())
    assert doc["verified"] is True and doc["measured"]["retest_dropped"] == []
    assert 0 < doc["measured"]["retest_peak_bytes"] <= limit
    # both models really were held at once: more than either alone
    assert doc["measured"]["retest_peak_bytes"] > max(alone[EMBED], plan[CHAT]["predicted_peak"])
    modelfile = (out / "Modelfile.neohorse-1").read_text()
    assert f"FROM {plan[CHAT]['tag']}\n" in modelfile and "PARAMETER num_ctx 1024\n" in modelfile
    assert "OLLAMA_MAX_LOADED_MODELS=2\n" in (out / "ollama.env").read_text()
    assert (out / "report.html").read_text().count("data:image/png;base64,") >= 3
