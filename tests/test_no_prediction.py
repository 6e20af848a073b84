"""An architecture whose compute buffer was never measured on the server's
engine is never guessed at: the context step searches on its loads alone and
says why, and the diagnosis still ends with a measured config (issue 31)."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from assistant.cli import main

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_an_unmeasured_architecture_is_searched_on_measurements_alone_and_said(tmp_path, monkeypatch):
    scenario = tmp_path / "phi3.yaml"
    scenario.write_text((SCENARIOS / "kv_cache_current.yaml").read_text().replace("arch: llama", "arch: phi3"))
    monkeypatch.setenv("OOMVET_STATE_DIR", str(tmp_path / "state"))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["diagnose", "--simulate", str(scenario), "--answers",
                     str(SCENARIOS / "kv_cache_current.answers.yaml"), "--settle", "0.2", "--out",
                     str(tmp_path / "out"), "--json", "--lang", "en"])
    report = json.loads(printed.getvalue())
    assert code == 0 and report["verified"] is True, report.get("diagnosis")
    assert report["diagnosis"]["cause"] == "kv_cache"
    notes = json.dumps(report)
    assert "architecture phi3 was never measured on this engine" in notes
    assert (tmp_path / "out" / "report.md").is_file()
