"""``oomvet plan`` on the simulator: predictions per tag, no loads."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "kv_cache.yaml"


def plan(*extra):
    proc = subprocess.run([sys.executable, "-m", "assistant", "plan", "--simulate", str(SCENARIO),
                           "--model", "neohorse-1:q4_K_M", *extra], capture_output=True, text=True, timeout=300)
    return proc


@pytest.fixture(scope="session")
def planned():
    proc = plan("--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_plan_lists_every_tag_with_weights_kv_compute_and_max_ctx(planned):
    tags = {row["model"]: row for row in planned["tags"]}
    assert set(tags) == {"neohorse-1:q4_K_M", "neohorse-1:q3_K_M"}
    for row in tags.values():
        assert row["weights"] > 0 and row["compute"] > 0 and row["max_ctx"] % 256 == 0
        assert row["kv_per_token"] == 32 * 2 * 128 * 8 * 2      # llama 8B-class: 128 KiB per token, f16
    assert tags["neohorse-1:q3_K_M"]["max_ctx"] > tags["neohorse-1:q4_K_M"]["max_ctx"]
    assert planned["predicted"] is True and planned["server_default_ctx"] == 4096


def test_plans_max_ctx_is_near_what_the_scenario_really_fits(planned):
    # docs/scenarios.md: the simulator fits 11520 fully on this GPU for the Q4_K_M tag
    row = next(r for r in planned["tags"] if r["model"] == "neohorse-1:q4_K_M")
    assert row["max_ctx"] == pytest.approx(11520, rel=0.10)


def test_a_bigger_planned_card_fits_the_trained_context():
    proc = plan("--json", "--vram", "24GiB")
    row = json.loads(proc.stdout)["tags"][0]
    assert row["max_ctx"] == row["trained_ctx"] == 32768


@pytest.mark.parametrize("flags", [["--ctx", "0"], ["--parallel", "two"], ["--kv", "q3"], ["--vram", "lots"]])
def test_bad_plan_input_is_one_line_and_exit_2(flags):
    proc = plan(*flags)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") <= 1


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_table_shows_every_tag_whole_in_80_columns(planned, lang):
    # issue 31: an 80-column terminal showed "neohors…" in every row, the one column a user needs
    import os

    from rich.cells import cell_len

    proc = subprocess.run([sys.executable, "-m", "assistant", "plan", "--simulate", str(SCENARIO), "--model",
                           "neohorse-1:q4_K_M", "--vram", "8GiB"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80", "OOMVET_LANG": lang})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 80 and "…" not in proc.stdout
    for tag in ("neohorse-1:q4_K_M", "neohorse-1:q3_K_M"):
        row = next(line for line in lines if tag in line and "KiB" in line)  # whole, on one line with its figures
        assert row.split()[-2].isdigit() and row.split()[-1] == "4096", row


CURRENT = Path(__file__).resolve().parents[1] / "scenarios" / "kv_cache_current.yaml"


def plan_current(*extra):
    proc = subprocess.run([sys.executable, "-m", "assistant", "plan", "--simulate", str(CURRENT),
                           "--model", "neohorse-1:q4_K_M", "--json", *extra], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def current_default():
    return plan_current("--ctx", "16384")


def test_flash_attention_follows_the_servers_settings_and_off_costs_compute_and_context(current_default):
    # without flash attention llama.cpp keeps every head's scores against every cell: the plan must know
    off = plan_current("--fa", "off", "--ctx", "16384")
    assert current_default["flash_attention_source"] == "server" and current_default["flash_attention"] is True
    assert off["flash_attention_source"] == "given" and off["flash_attention"] is False
    row_on, row_off = current_default["tags"][0], off["tags"][0]
    assert row_off["compute"] > 4 * row_on["compute"]
    assert row_off["max_ctx"] < row_on["max_ctx"]
    assert current_default["expected_error"] == {"buffers": 0.01, "peak": 0.016}


def test_the_legacy_engine_states_its_measured_error_and_runs_without_flash_attention():
    proc = plan()
    assert proc.returncode == 0
    flat = " ".join(proc.stdout.split())
    assert "totals within 2.5% of the peak measured with the context filled" in flat, proc.stdout
    assert "buffers within 0.5% of what this engine logged" in flat
    assert "Flash attention: off" in proc.stdout


def test_an_architecture_never_measured_gets_no_prediction_said_plainly(tmp_path):
    scenario = tmp_path / "phi3.yaml"
    scenario.write_text(CURRENT.read_text().replace("arch: llama", "arch: phi3"))
    proc = subprocess.run([sys.executable, "-m", "assistant", "plan", "--simulate", str(scenario),
                           "--model", "neohorse-1:q4_K_M"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "no prediction for architecture phi3" in proc.stdout
    assert "Traceback" not in proc.stderr and "MiB" not in proc.stdout   # no figure shown for it
