"""Exit codes and one-line errors of the command line (no server needed)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def oomvet(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assistant", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def test_help_and_version():
    assert oomvet("--help").returncode == 0
    out = oomvet("--version")
    assert out.returncode == 0 and out.stdout.startswith("oomvet ")
    for cmd in ("chat", "diagnose", "probe", "intake", "devices", "check", "apply", "simulate"):
        assert oomvet(cmd, "--help").returncode == 0, cmd


def test_unreachable_server_exits_3_with_one_line():
    proc = oomvet("diagnose", "--host", "http://127.0.0.1:9", "--model", "m", "--auto", "--json")
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.startswith("oomvet: no Ollama server answers at http://127.0.0.1:9")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("budget", ["lots", "0", "-1G", "150%", "12XB", ""])
def test_bad_budget_exits_2_with_one_line(budget):
    proc = oomvet("probe", "baseline", "--model", "m", "--host", "http://127.0.0.1:9", f"--budget={budget}")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("oomvet: --budget")


@pytest.mark.parametrize("content,message", [
    ("symptom: [unclosed", "is not valid YAML"),
    ("- a\n- b\n", "must be a mapping"),
    ("colour: blue\n", "unknown key 'colour'"),
    ("want_ctx: lots\n", "want_ctx = 'lots' is not a number"),
    ("keep_context: maybe\n", "keep_context = 'maybe' is not yes or no"),
    ("budget: 12 apples\n", "budget = '12 apples' is not a size like 8GiB or 80%"),
    ("lang: fr\n", "lang = 'fr'"),
])
def test_bad_answers_file_exits_2_with_one_line(tmp_path, content, message):
    answers = tmp_path / "answers.yaml"
    answers.write_text(content)
    proc = oomvet("diagnose", "--model", "m", "--answers", str(answers), "--host", "http://127.0.0.1:9")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_model_is_a_usage_error():
    proc = oomvet("diagnose", "--host", "http://127.0.0.1:9")
    assert proc.returncode == 2 and "--model" in proc.stderr


def test_simulated_weights_problem_exits_0_with_a_verified_config(tmp_path):
    proc = oomvet("diagnose", "--simulate", "scenarios/weights.yaml", "--answers", "scenarios/weights.answers.yaml",
                  "--auto", "--out", str(tmp_path), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_nothing_fits_exits_1(tmp_path):
    # 4 GiB card: not even the lowest tag of this scenario fits
    scenario = (ROOT / "scenarios" / "weights.yaml").read_text().replace("total: 8GiB", "total: 3GiB")
    path = tmp_path / "tiny.yaml"
    path.write_text(scenario)
    proc = oomvet("diagnose", "--simulate", str(path), "--model", "neohorse-1:f16", "--auto",
                  "--out", str(tmp_path / "out"), "--json", timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]


def test_a_bad_backend_value_is_refused_before_reaching_the_server():
    proc = oomvet("probe", "backend", "--model", "m", "--host", "http://127.0.0.1:9", "--knob", "num_batch",
                  "--value", "lots")
    assert proc.returncode == 2
    assert proc.stderr.startswith("oomvet: --value must be a whole number above 0")
