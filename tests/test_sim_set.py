"""Several models and several cards on the simulated GPU + Ollama (issue 34).

The simulator places models as Ollama does, ported from Ollama's source on
its own (oomsim/spread.py, oomsim/evict.py); oomvet's set diagnosis and its
planner must agree with it:

* an embedding model evicting the chat model on one 8 GiB card: the cause is
  the server making room (its OLLAMA_MAX_LOADED_MODELS allows both), the set
  fits at shorter contexts, and the retest keeps both wholly on the card;
* the same card with more memory used by others: nothing fits, said so, and
  no Modelfile is written;
* OLLAMA_MAX_LOADED_MODELS=1 on the server: the setting is the cause, raised
  to the set's size by a restart, and verified;
* two cards of 24 and 12 GiB and a model that needs both: the plan's layer
  split is the one the simulated scheduler logs;
* a MIG slice: the limit is the slice's memory, not the card's.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
import pytest

from assistant.cli import main
from probes.memory.nvml import NvmlReader
from probes.ollama_api import Ollama

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
CHAT, EMBED = "neohorse-1:q4_K_M", "neoembed-m3:f16"
GiB = 1 << 30



def _diagnose(capsys, scenario: Path, out: Path, *models: str, lang: str = "en") -> tuple[int, dict, str]:
    argv = ["diagnose", "--simulate", str(scenario), "--model", models[0], "--out", str(out), "--json",
            "--lang", lang]
    for other in models[1:]:
        argv += ["--also", other]
    code = main(argv)
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def _scenario(tmp_path: Path, name: str, **server) -> Path:
    data = yaml.safe_load((SCENARIOS / name).read_text())
    data["server"].update(server)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_an_embedder_evicting_the_chat_model_is_the_server_making_room_and_shorter_contexts_fix_it(
        capsys, tmp_path):
    code, payload, err = _diagnose(capsys, SCENARIOS / "embedder_evicts.yaml", tmp_path, CHAT, EMBED)
    found = payload["set"]
    assert code == 0 and payload["verified"] is True, err[-3000:]
    assert found["measured"]["evicted"] == [{"model": CHAT, "by": EMBED}]
    assert found["causes"] == ["evicted_for_room"]
    assert found["max_loaded"] == {"value": 3, "from": "default"} and found["server_env"] == {}
    embedder = next(m for m in found["models"] if m["model"] == EMBED)
    assert embedder["embedding"] is True
    plan = {m["model"]: m for m in found["plan"]["members"]}
    # shorter contexts, never under 2048, the tags unchanged (the embedder is never quantized)
    assert found["plan"]["remedy"] == "context"
    assert all(2048 <= m["num_ctx"] < 8192 and m["tag"] == m["model"] for m in plan.values())
    doc = yaml.safe_load((tmp_path / "oomvet-set.yaml").read_text())
    assert doc["verified"] is True and doc["measured"]["retest_dropped"] == []
    assert doc["measured"]["retest_peak_bytes"] <= found["fit_limit"]
    # which card holds what: the one card holds the whole set, as the simulated scheduler put it
    held = doc["measured"]["retest_devices"]
    assert len(held) == 1 and held[0]["held_bytes"] > 6 * GiB
    for model, member in plan.items():
        text = (tmp_path / f"Modelfile.{model.replace(':', '-')}").read_text()
        assert f"FROM {member['tag']}\n" in text and f"PARAMETER num_ctx {member['num_ctx']}\n" in text
    # no server setting needed changing: the file only suggests, commented out, keeping the set loaded
    env_lines = (tmp_path / "ollama.env").read_text().splitlines()
    assert [line for line in env_lines if not line.startswith("#")] == []
    assert "# OLLAMA_KEEP_ALIVE=-1" in env_lines and found["keep_alive"] == "5m"
    assert "EVICTION" in err and "verified" in err


def test_the_retest_keeps_both_models_wholly_on_the_card_in_api_ps(capsys, tmp_path):
    code, payload, _ = _diagnose(capsys, SCENARIOS / "embedder_evicts.yaml", tmp_path, CHAT, EMBED)
    assert code == 0
    plan = {m["model"]: m for m in payload["set"]["plan"]["members"]}
    # the plan's contexts, loaded on a fresh simulated server, both fully in VRAM, neither evicted
    import oomsim as sim

    with sim.start(str(SCENARIOS / "embedder_evicts.yaml")) as handle:
        api = Ollama(handle.host)
        api.generate(CHAT, "hello", {"num_ctx": plan[CHAT]["num_ctx"], "num_predict": 2})
        api.embed(EMBED, "hello", {"num_ctx": plan[EMBED]["num_ctx"]})
        rows = {r.name: r for r in api.ps()}
    assert set(rows) == {CHAT, EMBED}
    assert all(r.size_vram_bytes == r.size_bytes for r in rows.values())


def test_when_nothing_fits_the_set_says_so_and_writes_no_modelfile(capsys, tmp_path):
    data = yaml.safe_load((SCENARIOS / "embedder_evicts.yaml").read_text())
    data["device"]["used_by_others"] = "900MiB"
    scenario = tmp_path / "crowded.yaml"
    scenario.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    code, payload, err = _diagnose(capsys, scenario, out, CHAT, EMBED)
    assert code == 1 and payload["verified"] is False
    assert payload["set"]["why"] == "set_no_arrangement"
    assert not list(out.glob("Modelfile.*")) and (out / "report.html").exists()
    assert "no arrangement" in err


def test_max_loaded_models_1_is_named_as_the_cause_and_raised_to_the_sets_size(capsys, tmp_path):
    scenario = _scenario(tmp_path, "embedder_evicts.yaml", max_loaded_models=1)
    data = yaml.safe_load(scenario.read_text())
    data["device"]["total"] = "16GiB"   # room for both: only the setting evicts
    scenario.write_text(yaml.safe_dump(data))
    code, payload, err = _diagnose(capsys, scenario, tmp_path / "out", CHAT, EMBED)
    found = payload["set"]
    assert code == 0 and payload["verified"] is True, err[-2000:]
    assert found["max_loaded"] == {"value": 1, "from": "set"}
    assert found["causes"] == ["evicted_by_setting"]
    assert found["server_env"] == {"OLLAMA_MAX_LOADED_MODELS": "2"}
    assert found["plan"]["remedy"] == "as_is"
    assert "OLLAMA_MAX_LOADED_MODELS=2\n" in (tmp_path / "out" / "ollama.env").read_text()


def test_a_set_diagnosis_in_chinese_says_nothing_in_english(capsys, tmp_path):
    from common.catalog import keys, templates

    code, payload, err = _diagnose(capsys, SCENARIOS / "embedder_evicts.yaml", tmp_path, CHAT, EMBED, lang="zh")
    assert code == 0
    flat = " ".join(err.split())   # the terminal wraps at 80 columns; the words are what count
    for key in ("驱逐", "整组已验证", "模型组"):
        assert key in flat
    # no English sentence of the set's catalog shows up: its first words never appear
    for key in keys("set.") + keys("setrule."):
        en = templates(key)[0]
        head = " ".join(en.replace("{", " {").split()[:3])
        if "{" not in head and len(head) > 8:
            assert head not in flat, (key, head)
    report = (tmp_path / "report.md").read_text()
    assert "推理链" in report and "整组占用" in report
    assert all(re.search(r"[\u4e00-\u9fff]", c["note_zh"]) for c in payload["set"]["why_chain"])


def test_bad_set_input_is_one_line_and_exit_2(capsys, tmp_path):
    spellings = ("neohorse-1:q4_K_M", "NeoHorse-1:q4_K_M")   # one model however it is written
    for models, word in ((spellings, "same model"), ((CHAT, "nothing:here"), "does not have")):
        argv = ["diagnose", "--simulate", str(SCENARIOS / "embedder_evicts.yaml"), "--model", models[0],
                "--also", models[1], "--out", str(tmp_path / "x")]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert word in err and "Traceback" not in err
    assert main(["diagnose", "--rig-env", "OLLAMA_X=1", "--simulate", str(SCENARIOS / "embedder_evicts.yaml"),
                 "--model", CHAT, "--out", str(tmp_path / "y")]) == 2
    assert "--rig" in capsys.readouterr().err
    assert main(["diagnose", "--rig", "--rig-env", "PATH=/x", "--model", CHAT]) == 2
    assert "OLLAMA_" in capsys.readouterr().err


# --- several cards: the plan's placement against the simulated scheduler's ------------------

def test_the_plans_split_over_24_and_12_gib_is_the_one_the_simulated_scheduler_logs(capsys):
    import oomsim as sim

    model = "neohorse-32b:q6_K"
    assert main(["plan", "--simulate", str(SCENARIOS / "two_cards.yaml"), "--model", model,
                 "--vram", "24GiB", "--vram", "12GiB", "--ctx", "4096", "--json"]) == 0
    placement = json.loads(capsys.readouterr().out)["models"][0]["placement"]
    planned = [c["layers"] for c in placement["cards"]]
    assert placement["cpu_layers"] == 0 and placement["slow"] is False and len(planned) == 2
    with sim.start(str(SCENARIOS / "two_cards.yaml")) as handle:
        api = Ollama(handle.host)
        assert api.generate(model, "hello", {"num_ctx": 4096, "num_predict": 2}).ok
        logged = [line for line in handle.state.log if "layers.split=" in line][-1]
        row = api.loaded(model)
        per_card = [d.used_bytes for d in NvmlReader(lib=handle.nvml, env={}).devices()]
    split = [int(x) for x in re.search(r"layers\.split=([\d,]+)", logged).group(1).split(",")]
    assert planned == split
    assert row.size_vram_bytes == row.size_bytes  # all on the two cards, none on the CPU
    # and each card holds about what the plan puts there (the planned bytes include the graph each reserves;
    # the layer split above is the independent check: the simulator takes the graph's and the output
    # layer's sizes from probes.memmodel, as the plan does)
    for used, card in zip(per_card, placement["cards"]):
        assert abs(used - card["bytes"]) / card["bytes"] < 0.05, (used, card)


def test_a_mig_slice_is_the_device_and_its_limit(capsys):
    assert main(["devices", "--simulate", str(SCENARIOS / "mig_slice.yaml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # the 80 GiB card in MIG mode is the 40 GiB instance Ollama was given, in the sum too
    assert report["device"]["total_bytes"] == 40 * GiB and "MIG 3g.40gb" in report["device"]["name"]
    assert [d["total_bytes"] for d in report["devices"]] == [40 * GiB]
    assert report["limit"]["bytes"] == 40 * GiB


# --- the chat: "what else must stay loaded?" -----------------------------------------

def _chat(tmp_path, first: str, answers: list[str], lang_hint: str = "en") -> tuple[int, str]:
    from tests.chat_driver import run_chat

    return run_chat(["--simulate", str(SCENARIOS / "embedder_evicts.yaml"), "--model", CHAT, "--out",
                     str(tmp_path), "--budget", "7.7GiB", "--auto"], [first, *answers], width=80)


@pytest.mark.parametrize("first, answer, words", [
    ("My RAG app: the chat model keeps reloading every time the embedder runs", "neoembed-m3:f16, nonsense",
     ("What else must stay loaded", "not on the server, left out: nonsense", "the set is verified")),
    ("做 RAG 的时候，嵌入模型一跑，聊天模型就被卸载重新加载", "neoembed-m3",
     ("还有哪些模型必须同时保持加载", "整组已验证")),
])
def test_the_chat_asks_what_else_must_stay_loaded_when_the_words_say_so(tmp_path, first, answer, words):
    rc, screen = _chat(tmp_path, first, [answer, *[""] * 6])
    assert rc == 0, screen[-3000:]
    for word in words:
        assert word in screen, screen[-3000:]
    assert (tmp_path / "oomvet-set.yaml").exists() and (tmp_path / "Modelfile.neoembed-m3-f16").exists()


def test_the_chat_does_not_ask_about_other_models_when_nothing_says_there_are_any(tmp_path):
    from assistant.intake.others import mentions_other_models

    assert not mentions_other_models("NeoHorse-1 一加载就爆显存，上下文 2k 就够用了")
    assert not mentions_other_models("Short prompts work, but with 8k context it runs out of memory")
    assert mentions_other_models("loading the embedding model evicts my chat model")
    assert mentions_other_models("my RAG pipeline") and mentions_other_models("rag 检索时")
    assert not mentions_other_models("long paragraphs of average storage logs")   # "rag" inside a word


def test_names_in_an_answer_are_matched_to_the_servers_tags():
    from assistant.intake.others import names_in

    tags = ["neohorse-1:q4_K_M", "neoembed-m3:f16", "neohorse-1:q8_0"]
    assert names_in("neoembed-m3，neohorse-1:q8_0、x", tags) == (["neoembed-m3:f16", "neohorse-1:q8_0"], ["x"])
    assert names_in("neohorse-1", tags) == ([], ["neohorse-1"])  # two tags of that name: not a guess
    assert names_in("", tags) == ([], [])
    for nothing in ("nothing else", "None.", "没有", "no"):
        assert names_in(nothing, tags) == ([], []), nothing


def test_the_ledger_of_a_model_on_two_cards_has_a_row_per_card():
    from assistant.report.ledger import ledger_rows
    from assistant.session.world import WorldOptions, open_world
    from probes import ledger

    model = "neohorse-32b:q6_K"
    with open_world(WorldOptions(simulate=str(SCENARIOS / "two_cards.yaml")), log=lambda m: None) as world:
        assert world.env.api.load(model, {"num_ctx": 4096}).ok
        fact = ledger.read(world.env, model)
    cards = fact["devices"]
    assert [c["label"] for c in cards] == ["0", "1"] and [c["total"] for c in cards] == [24 * GiB, 12 * GiB]
    assert all(c["used"] > 10 * GiB for c in cards)   # the model needs both
    assert sum(c["used"] for c in cards) == fact["in_use"]
    rows = dict(ledger_rows(fact, "zh"))
    assert any(k.startswith("设备 1（NVIDIA GeForce RTX 3060）") for k in rows)


def test_a_model_the_user_has_loaded_beside_the_set_is_left_loaded(tmp_path):
    from assistant.session.together import SetSession
    from assistant.session.world import WorldOptions, open_world

    data = yaml.safe_load((SCENARIOS / "embedder_evicts.yaml").read_text())
    data["device"]["total"] = "24GiB"
    data["models"]["other:q4_K_M"] = dict(data["models"][CHAT])
    scenario = tmp_path / "three.yaml"
    scenario.write_text(yaml.safe_dump(data))
    with open_world(WorldOptions(simulate=str(scenario)), log=lambda m: None) as world:
        api = world.env.api
        assert api.load("other:q4_K_M", {"num_ctx": 4096}).ok
        result, code = SetSession(world, [CHAT, EMBED], "en", lambda line: None).run()
        after = {r.name: r.context_length for r in api.ps()}
    assert code == 0 and result["verified"] is True
    assert after == {"other:q4_K_M": 4096}   # put back as it was; the set's own models unloaded



def test_a_model_that_does_not_load_alone_is_said_with_the_servers_reason(capsys, tmp_path):
    data = yaml.safe_load((SCENARIOS / "embedder_evicts.yaml").read_text())
    data["models"]["huge:q8_0"] = {**data["models"][CHAT], "weights": "60GiB", "quantization": "Q8_0"}
    scenario = tmp_path / "huge.yaml"
    scenario.write_text(yaml.safe_dump(data))
    argv = ["diagnose", "--simulate", str(scenario), "--model", CHAT, "--also", "huge:q8_0", "--out",
            str(tmp_path / "out")]
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0 and "huge:q8_0 did not load even alone" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_plan_with_no_vram_on_two_cards_plans_each_card(capsys):
    assert main(["plan", "--simulate", str(SCENARIOS / "two_cards.yaml"), "--model", "neohorse-32b:q6_K",
                 "--also", "neohorse-1:q4_K_M", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [d["vram"] for d in result["devices"]] == [24 * GiB, 12 * GiB]
    big = result["models"][0]["placement"]
    assert len(big["cards"]) == 2 and big["cpu_layers"] == 0
    assert result["set"]["max_loaded_models"]["value"] == 6   # unset: 3 per GPU, two GPUs


def test_a_set_on_a_server_whose_memory_cannot_be_measured_is_refused_in_one_line():
    from types import SimpleNamespace

    from assistant.session.together import SetSession
    from common.errors import ProbeError

    env = SimpleNamespace(limit_bytes=8 * GiB, blind="no Ollama process of this machine serves http://gpu-box:11434")
    with pytest.raises(ProbeError, match="cannot be measured from here: no Ollama process"):
        SetSession(SimpleNamespace(env=env), [CHAT, EMBED], "en", lambda line: None).run()


def test_ctrl_c_in_a_set_diagnosis_exits_130_and_writes_nothing(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "assistant", "diagnose", "--simulate",
                             str(SCENARIOS / "embedder_evicts.yaml"), "--model", CHAT, "--also", EMBED,
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(5)   # the simulator is up and the set's measurements are running (the whole run takes ~10 s)
    assert proc.poll() is None, "the diagnosis ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and not out.exists()
