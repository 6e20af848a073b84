"""A model named as most people type it, without a tag, on the real rig.

`neohorse-1` is listed by the server as `neohorse-1:latest` (a copy of the
F16 tag). Every comparison with /api/ps and the process list must treat the
two as one model, or unloads return early and later readings include the old
process. The diagnosis under the README's budget must measure tiers that grow
with the context, peaks above the weights, and the same load as the tag
measured alone (Ollama's size exactly, the peak within 10%).

The user says it worked on Ollama 0.11.4: on the current engine the
diagnosis names what changed for memory since (and what the user's own
setup, run first, showed of it); on 0.11.4 itself, that nothing did."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.journal.store import DB_NAME, Journal
from probes import baseline
from probes.ollama_api import Ollama
from tests.integration.helpers import rig_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
ANSWERS = {"symptom": "NeoHorse-1 worked on Ollama 0.11.4; since the upgrade it runs out of memory as soon as it "
                      "loads; 4k context is enough", "want_ctx": 4096,
           "want_parallel": 1, "keep_context": False, "budget": "340MiB", "lang": "en"}


def _diagnose(rig, model: str, work: Path) -> tuple[dict, list[dict]]:
    work.mkdir()
    answers = work / "answers.yaml"
    answers.write_text(json.dumps(ANSWERS))
    proc = subprocess.run(
        [sys.executable, "-m", "assistant", "diagnose", "--host", rig.host, "--model", model, "--auto",
         "--answers", str(answers), "--settle", "1", "--json", "--out", str(work / "out")],
        capture_output=True, text=True, cwd=ROOT, timeout=1500, env=dict(os.environ, OOMVET_STATE_DIR=str(work)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Journal(work / DB_NAME) as journal:
        (row,) = journal.sessions()
        facts = [e.body["fact"] for e in journal.session(row["id"]).entries(["fact"])]
    return json.loads(proc.stdout), facts


def test_a_bare_name_measures_the_same_model_as_its_tag(rig, tmp_path):
    api = Ollama(rig.host)
    assert api.same_model("neohorse-1", "neohorse-1:f16")
    bare, facts = _diagnose(rig, "neohorse-1", tmp_path / "bare")
    assert bare["diagnosis"]["cause"] == "weights" and bare["verified"] is True, bare
    # the findings, in the session's language (English here)
    (upgrade,) = [f for f in bare["diagnosis"]["findings"] if "0.11.4" in f]
    if api.version().startswith("0.3"):  # v0.34.4: three changes since 0.11.4, each with its version
        assert "worked on Ollama 0.11.4; this server runs 0.34.4" in upgrade, upgrade
        assert all(f"(since {v})" in upgrade for v in ("0.12.4", "0.15.5", "0.30.0")), upgrade
    else:
        assert "none of the changes oomvet knows of" in upgrade, upgrade
    tiers = sorted((f for f in facts if f["kind"] == "tier" and f.get("peak") is not None),
                   key=lambda f: f["num_ctx"])
    assert len(tiers) >= 2 and all(f["measured"] for f in tiers)
    peaks = [f["peak"] for f in tiers]
    assert peaks == sorted(peaks), [(f["num_ctx"], f["peak"]) for f in tiers]
    weights = api.file_size(bare["config"]["model"])
    assert weights and min(peaks) > weights, (weights, peaks)
    stability = [f for f in facts if f["kind"] == "stability"]
    assert stability[-1]["measured"] and stability[-1]["peak"] > weights

    # the session's own load of the bare name against the tag's, loaded alone the same way
    # (a whole second diagnosis would take 50 s on 2 cores to compare the same readings)
    load = next(f for f in facts if f["kind"] == "load")
    options = load["options"]
    tagged = baseline.run(rig_env(rig), "neohorse-1:f16", num_ctx=options["num_ctx"],
                          num_batch=options["num_batch"], num_parallel=options["num_parallel"]).facts[0]
    assert tagged["measured"] and load["measured"], (tagged, load)
    assert load["size"] == tagged["size"], (load["size"], tagged["size"])
    assert abs(load["peak"] - tagged["peak"]) <= 0.10 * tagged["peak"], (load["peak"], tagged["peak"])


def test_the_chat_reads_a_name_in_the_message_as_the_tag_the_real_server_lists(rig):
    """The parser alone can only guess "NeoHorse-1" is a model (weak); with the
    rig's /api/tags the chat reads it as the server spells it, ``neohorse-1:latest``,
    and a follow-up answer naming another of its tags is read the same way."""
    import io

    from rich.console import Console

    from assistant.commands import chat as cmd_chat
    from assistant.session.answers import parse_answer
    from assistant.cli import build_parser
    from assistant.intake import confidence, parse
    from assistant.session.ui import ChatUI
    from assistant.session.world import WorldOptions, open_world

    first = "用 Ollama 跑 NeoHorse-1，一加载就爆显存"
    guessed = parse(first)
    assert guessed.model == "neohorse-1" and "model" in guessed.weak
    args = build_parser().parse_args(["chat", "--host", rig.host, "--budget", "340MiB"])
    ui = ChatUI(Console(file=io.StringIO()), stream=io.StringIO(""), lang="zh")
    with open_world(WorldOptions.from_args(args), log=lambda m: None) as world:
        read = cmd_chat._with_server_names(guessed, first, world, ui)
        tags = ui.tags(world)
    assert "neohorse-1:latest" in tags  # as the real server lists it
    assert read.model == "neohorse-1:latest" and "model" not in read.weak
    assert "model" not in confidence.unsure(read)  # a name the server lists: not asked (issue 33)
    assert parse_answer("model", "我跑的是 neohorse-1:q4_1 那个", tags=tags) == "neohorse-1:q4_1"
