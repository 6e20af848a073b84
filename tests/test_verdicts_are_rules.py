"""Every verdict is a rule: probes post what they measured, never what it means.

Each shipped scenario below is diagnosed in this process on the simulator
(every probe runs: baseline, context, quant, backend, stability), and every
probe result is kept as the session receives it. No measurement fact and no
table row may hold a boolean other than an observation (the server answered,
the readings were measurements, a setting was applied, a trial was skipped),
nor any field named for a verdict; and every measurement the rules read got
its reading from a rule, which the report shows.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from assistant import cli
from assistant.session import loop as session_mod
from rules.facts import MEASUREMENTS
from rules.kb import RULES

# one worker runs this module (scripts/test.sh distributes by --dist loadgroup): its fixture
# diagnoses three scenarios, 36 s, which a second worker would run again. The fixture is
# session-scoped: a worker runs other modules' tests between this module's, and pytest tears
# a module fixture down at each switch (four setups, 145 s, before the scope was widened)
pytestmark = pytest.mark.xdist_group("verdicts_are_rules")
ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"

#: booleans a probe may post: what happened, not what it means
OBSERVATIONS = {"answered", "measured", "applied", "skipped", "loaded"}
#: the fields the probes used to judge with (issue 16)
VERDICT_FIELDS = {"ok", "truncated", "over_limit", "oom", "coherent", "regression", "back_to_baseline", "issues",
                  "fits", "over", "incoherent"}
#: between them, these scenarios make every probe run at least once
CASES = ("weights", "concurrency", "not_memory")


@pytest.fixture(scope="session")
def diagnosed(tmp_path_factory):
    """scenario -> (probe results as the session got them, the session's result, the report's text)."""
    post, finish = session_mod.Session._post_result, session_mod.Session._finish
    out = {}
    for name in CASES:
        results, outcomes = [], []

        def capture(self, advisor, step, probe, result):
            results.append(result)
            return post(self, advisor, step, probe, result)

        def keep(self, advisor, step):
            outcomes.append(finish(self, advisor, step))
            return outcomes[-1]

        session_mod.Session._post_result, session_mod.Session._finish = capture, keep
        try:
            folder = tmp_path_factory.mktemp(name)
            code = cli.main(["diagnose", "--simulate", str(SCENARIOS / f"{name}.yaml"),
                             "--answers", str(SCENARIOS / f"{name}.answers.yaml"), "--auto", "--json",
                             "--out", str(folder), "--lang", "en"])
        finally:
            session_mod.Session._post_result, session_mod.Session._finish = post, finish
        assert code in (0, 1), f"{name}: exit {code}"
        out[name] = (results, outcomes[-1].result, (folder / "report.md").read_text(encoding="utf-8"))
    return out


def test_the_scenarios_run_every_probe(diagnosed):
    probes = {r.name for results, _, _ in diagnosed.values() for r in results}
    assert probes == {"reproduce", "baseline", "context", "quant", "backend", "stability"}


@pytest.mark.parametrize("name", CASES)
def test_no_measurement_holds_a_verdict(diagnosed, name):
    results, _, _ = diagnosed[name]
    bad = []
    for result in results:
        for where, items in (("fact", [f for f in result.facts if f["kind"] in MEASUREMENTS]), ("row", result.rows)):
            for item in items:
                for key, value in item.items():
                    if key in VERDICT_FIELDS or (isinstance(value, bool) and key not in OBSERVATIONS):
                        bad.append(f"{result.name} {where} {item.get('kind', '')} {key}={value!r}")
    assert bad == []


@pytest.mark.parametrize("name", CASES)
def test_every_measurement_is_read_by_a_reading_rule_and_the_report_shows_it(diagnosed, name):
    _, result, report = diagnosed[name]
    readings = {r["seq"]: r for r in result["readings"]}
    measured = [f for f in result["facts"] if f["kind"] in MEASUREMENTS]
    assert measured
    for fact in measured:
        reading = readings.get(fact["_seq"])
        assert reading is not None, f"no rule read {fact['kind']} #{fact['_seq']}"
        assert RULES[reading["rule"]].layer == "read"
        if reading["rule"] != "fact_out_of_turn" and fact["kind"] != "stability":
            assert reading["note"] in report, reading
    last_retest = [f for f in measured if f["kind"] == "stability"][-1]
    assert readings[last_retest["_seq"]]["note"] in report


def test_a_probe_run_alone_is_read_by_the_same_rules():
    from rules.engine import read_measurements
    from tests.test_rules_script import GiB, load, oom_tier, tier

    rules = [r["rule"] for r in read_measurements("context", [
        tier("short", 2048, 3 * GiB), tier("long", 8192, 9 * GiB), oom_tier("longer", 16384),
        tier("cut", 4096, 2 * GiB, truncated=True), tier("edge", 4096, int(7.9 * GiB))], limit=8 * GiB, gpu=True)]
    assert rules == ["tier_fits", "tier_out_of_memory", "tier_error_says_out_of_memory", "tier_truncated",
                     "tier_above_limit"]
    assert read_measurements("baseline", [load(placement="partial")], limit=32 * GiB, gpu=True)[0]["rule"] \
        == "load_spilled_to_cpu"
    assert read_measurements("baseline", [load(placement="partial")], limit=32 * GiB, gpu=False)[0]["rule"] \
        == "load_fits"  # on a CPU, "partial" is no shortage


def test_the_coherence_rules_and_their_table_never_disagree():
    """rules/coherence.py's table applied in Python (the report, the tests)
    and the reading rules built from it read every answer alike."""
    import random

    from rules.coherence import CHECKS, failed_checks
    from rules.engine import read_measurements
    from tests.test_rules_script import GiB, SOUND

    rng = random.Random(16)
    trials = []
    for i in range(120):
        figures = dict(SOUND, answer_chars=rng.choice([0, 3, 400]), repeat_share=rng.choice([0.0, 0.34, 0.36, 0.9]),
                       garbled_share=rng.choice([0.0, 0.08, 0.09]), done_reason=rng.choice(["stop", "length"]),
                       last_char=rng.choice([".", "e", "。", "|", "9"]), numbers_checked=rng.choice([0, 2, 5]),
                       numbers_lost=rng.choice([0, 1, 3]), numbers_in_task=rng.choice([0, 4, 7]),
                       numbers_invented=rng.choice([0, 2, 3, 4]), code_spans=rng.choice([0, 1, 2]),
                       code_spans_kept=rng.choice([0, 1]))
        trials.append({"kind": "quant_trial", "tag": f"m:q{i}", "level": "Q4_K_M", "answered": True,
                       "weights": GiB, "peak": 2 * GiB, **figures})
    read = read_measurements("quant", trials, limit=8 * GiB)
    for trial, reading in zip(trials, read):
        failed = failed_checks(trial)
        assert reading["rule"] == (failed[0] if failed else "quant_usable"), (trial, failed)
    assert {r["rule"] for r in read} >= {c.rule for c in CHECKS} | {"quant_usable"}


def test_a_probe_run_alone_prints_the_rules_reading_in_both_languages(capsys):
    argv = ["probe", "baseline", "--simulate", str(SCENARIOS / "weights.yaml"), "--model", "neohorse-1:f16",
            "--settle", "0.2"]
    assert cli.main(argv + ["--json"]) == 0  # it ran; that it spilled is the reading's
    import json

    payload = json.loads(capsys.readouterr().out)
    assert [r["rule"] for r in payload["readings"]] == ["load_spilled_to_cpu"]
    assert "over_limit" not in payload["facts"][0] and "ok" not in payload["facts"][0]
    assert cli.main(argv + ["--lang", "zh"]) == 0
    assert "判读：neohorse-1:f16 溢出到 CPU（部分在 CPU）" in capsys.readouterr().out
