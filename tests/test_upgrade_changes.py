""""It worked on 0.11.4, now it runs out of memory": oomvet names what changed
for memory between the version the user ran and the running server's, each
change with the version it starts at, and says for each what it read or
measured on the running server (the user's own setup, run first)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from assistant.intake import parse
from common.versions import parse_version
from rules.versions import CHANGES, changes_between
from tests.test_rules_current import server
from tests.test_rules_script import GiB, Script, device, drive, load, passed, reproduction, symptom, target, tier

ROOT = Path(__file__).resolve().parents[1]


def test_the_changes_between_two_versions_are_those_that_start_after_the_first_and_by_the_second():
    assert [c.key for c in changes_between("0.11.4", "0.34.4")] == [
        "flash_attention_auto", "vram_tier_context", "llama_server_engine"]
    assert [c.key for c in changes_between("0.20.1", "0.34.4")] == ["llama_server_engine"]
    assert [c.key for c in changes_between("0.15.5", "0.29.0")] == []  # the tier came with 0.15.5 itself
    assert [c.key for c in changes_between("", "0.14.0")] == ["flash_attention_auto"]  # "an earlier version"
    assert changes_between("0.11.4", "not a version") == []
    assert parse_version("v0.30.11") == (0, 30, 11) and all(len(c.since) == 3 for c in CHANGES)


def test_an_upgrade_is_read_from_the_users_words_with_the_version_they_name():
    assert parse("neohorse-1 ran without trouble on 0.11.4; on the new version it spills").upgraded_from == "0.11.4"
    assert parse("ever since we upgraded ollama the model crawls").upgraded_from == ""
    assert parse("ollama 从 0.12.0 升级上来以后就爆显存了").upgraded_from == "0.12.0"
    assert parse("换了新版本之后就慢得不行").upgraded_from == ""
    assert parse("neohorse-1 runs out of memory at 32k").upgraded_from is None


def _upgrade_session(before: str, version: str = "0.34.4"):
    spilled = reproduction(num_ctx=32768, num_parallel=1, placement="partial", peak=20 * GiB, size=21 * GiB,
                           size_vram=19 * GiB)
    script = Script(reproduce=[[spilled]], baseline=[[load()]],
                    context=[[tier("short", 2048, 9 * GiB), tier("long", 8192, 11 * GiB)]], stability=[passed()])
    return drive([symptom("slow"), target(want_ctx=8192, ctx_unset=True, upgraded_from=before), device(),
                  server(version=version)], script)


def test_worked_on_0_11_4_names_the_three_changes_and_what_was_measured_of_them():
    adv, trace, steps = _upgrade_session("0.11.4")
    (finding,) = [f for f in adv.diagnosis["findings"] if f["key"] == "upgrade"]
    en, zh = finding["en"], finding["zh"]
    assert "worked on Ollama 0.11.4; this server runs 0.34.4" in en
    assert "(since 0.12.4)" in en and "(since 0.15.5)" in en and "(since 0.30.0)" in en
    assert "32768 tokens for 24.0 GiB of VRAM" in en and "your setup ran at that default" in en
    assert "kept only 19.0 GiB of 21.0 GiB on the GPU" in en  # the reproduction is the proof
    assert "0.11.4" in zh and "自 0.15.5 起" in zh
    assert steps[-1]["cause"] == "kv_cache" and steps[-1]["verified"] is True


def test_an_upgrade_within_one_era_names_no_change_and_says_so():
    adv, _, _ = _upgrade_session("0.31.0")
    (finding,) = [f for f in adv.diagnosis["findings"] if f["key"] == "upgrade"]
    assert "none of the changes oomvet knows of" in finding["en"]


def test_without_an_upgrade_said_there_is_no_such_finding():
    spilled = reproduction(num_ctx=32768, placement="partial", peak=20 * GiB)
    script = Script(reproduce=[[spilled]], baseline=[[load()]],
                    context=[[tier("short", 2048, 9 * GiB), tier("long", 8192, 11 * GiB)]], stability=[passed()])
    adv, _, _ = drive([symptom("slow"), target(want_ctx=8192), device(), server()], script)
    assert all(f["key"] != "upgrade" for f in adv.diagnosis["findings"])


def test_in_the_simulator_the_upgrade_is_named_in_the_files_and_on_screen(tmp_path):
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump({
        "symptom": "neohorse-1:q8_0 was fine on Ollama 0.11.4; on the new one it crawls and ollama ps shows part "
                   "of it on the CPU. Our client never passes num_ctx; we need 8192.",
        "model": "neohorse-1:q8_0", "want_ctx": 8192, "want_parallel": 1, "keep_context": False, "budget": None,
        "lang": "en"}))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "assistant", "diagnose", "--simulate",
                           str(ROOT / "scenarios" / "vram_tier.yaml"), "--answers", str(answers), "--auto",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = yaml.safe_load((out / "oomvet.yaml").read_text())
    (finding,) = [f for f in doc["diagnosis"]["findings"] if "0.11.4" in f]
    assert "(since 0.15.5)" in finding and "(since 0.30.0)" in finding and "reproduced first" in finding
    assert "You say it worked on Ollama 0.11.4" in " ".join(proc.stderr.split())  # the session talks on stderr
    assert "0.11.4" in (out / "report.md").read_text()
