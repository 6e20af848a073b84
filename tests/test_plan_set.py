"""``oomvet plan`` for a set of models (``--also``) and several cards (``--vram``
repeated), on the simulator's one-GPU scenarios: the set's peaks against the
cards, the contexts that fit when they do not, ``OLLAMA_MAX_LOADED_MODELS``
and where each model's layers go."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from assistant.commands.plan import plan_set, render_set
from rules.setplan import fit_contexts as set_contexts
from common.catalog import get_lang, set_lang
from probes import memmodel, predict
from rules.thresholds import fit_limit

ROOT = Path(__file__).resolve().parents[1]
LEGACY = ROOT / "scenarios" / "kv_cache.yaml"
CURRENT = ROOT / "scenarios" / "kv_cache_current.yaml"
Q4, Q3 = "neohorse-1:q4_K_M", "neohorse-1:q3_K_M"


def run_plan(scenario: Path, *extra, lang: str = "en") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assistant", "plan", "--simulate", str(scenario), "--model", Q4,
                           *extra], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80", "OOMVET_LANG": lang})


def as_json(scenario: Path, *extra) -> dict:
    proc = run_plan(scenario, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def over():
    """Two models at 16k on one 12 GiB card: over, with contexts that fit."""
    return as_json(LEGACY, "--also", Q3, "--vram", "12GiB", "--ctx", "16384")


def test_json_carries_the_set_the_devices_and_each_models_cards():
    result = as_json(CURRENT, "--also", Q3, "--vram", "24GiB", "--vram", "12GiB")
    assert result["devices"] == [{"card": 0, "vram": 24 << 30}, {"card": 1, "vram": 12 << 30}]
    assert [m["model"] for m in result["models"]] == [Q4, Q3]
    for m in result["models"]:
        assert m["total"] > m["weights"] and m["placement"]["cards"]
        assert set(m["placement"]["cards"][0]) == {"card", "layers", "bytes", "output"}
        assert {"slow", "slow_reason", "cpu_layers", "output_on_cpu", "mode"} <= set(m["placement"])
    group = result["set"]
    assert group["size"] == 2 and group["fits"] is True and group["proposal"] is None
    assert group["total"] == sum(m["total"] for m in result["models"]) <= group["fit_limit"]
    assert group["fit_limit"] == fit_limit(36 << 30)
    # the current engine's default context is chosen by the cards' total: 36 GiB -> 32768
    assert result["server_default_ctx"] == 32768 == result["models"][0]["num_ctx"]
    # the simulator's environment is whole: unset is Ollama's default, 3 per GPU
    assert group["max_loaded_models"] == {"value": 6, "source": "default", "wanted": 2, "enough": True}
    assert group["sched_spread"] is False


def test_a_set_that_does_not_fit_gets_contexts_that_do(over):
    group = over["set"]
    assert group["fits"] is False and group["total"] > group["fit_limit"]
    assert group["proposed_total"] <= group["fit_limit"]
    for m, ctx in zip(over["models"], group["proposal"]):
        assert m["proposed_ctx"] == ctx and 2048 <= ctx < m["num_ctx"] == 16384 and ctx % 256 == 0
    # the proposal is what the single-model plan predicts at that context, not a guess
    for m in over["models"]:
        alone = as_json(LEGACY, "--vram", "12GiB", "--ctx", str(m["proposed_ctx"]))
        row = next(r for r in alone["tags"] if r["model"] == m["model"])
        assert row["total"] == m["proposed_total"]
    # as large as it can be: one more step (256) for the first model would go over
    first, second = over["models"]
    more = as_json(LEGACY, "--vram", "12GiB", "--ctx", str(first["proposed_ctx"] + 256))
    assert more["tags"][0]["total"] + second["proposed_total"] > group["fit_limit"]


def test_a_set_that_fits_nowhere_says_so_with_its_floor_total():
    result = as_json(LEGACY, "--also", Q3)
    group = result["set"]
    assert group["fits"] is False and group["proposal"] is None
    assert group["floor_total"] > group["fit_limit"]


@pytest.mark.parametrize("lang, words", [
    ("en", ["Predicted together on 12.0 GiB", "predicted NOT to fit", "gives up", "OLLAMA_MAX_LOADED_MODELS: 3",
            "card 1:", "num_ctx 16384 ->"]),
    ("zh", ["同时加载的预测", "预测这组模型放不下", "让出", "OLLAMA_MAX_LOADED_MODELS：3", "第 1 张卡",
            "num_ctx 16384 ->"]),
])
def test_the_set_reads_whole_in_80_columns_in_both_languages(lang, words):
    proc = run_plan(LEGACY, "--also", Q3, "--vram", "12GiB", "--ctx", "16384", lang=lang)
    assert proc.returncode == 0, proc.stderr
    assert max(cell_len(line) for line in proc.stdout.splitlines()) <= 80 and "…" not in proc.stdout
    flat = " ".join(proc.stdout.split())
    for word in words:
        assert word in flat, (word, proc.stdout)
    for tag in (Q4, Q3):   # each model whole, on one line with its figures
        assert any(tag in line and "GiB" in line for line in proc.stdout.splitlines())


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_two_cards_show_which_card_holds_what_and_layers_on_the_cpu_as_slower(lang):
    proc = run_plan(LEGACY, "--vram", "4GiB", "--vram", "3GiB", lang=lang)
    assert proc.returncode == 0, proc.stderr
    assert max(cell_len(line) for line in proc.stdout.splitlines()) <= 80 and "…" not in proc.stdout
    flat = " ".join(proc.stdout.split())
    wanted = {"en": ["4.0 GiB + 3.0 GiB", "card 1:", "card 2:", "CPU:", "slower:"],
              "zh": ["4.0 GiB + 3.0 GiB", "第 1 张卡", "第 2 张卡", "CPU：", "会变慢"]}[lang]
    for word in wanted:
        assert word in flat, (word, proc.stdout)


def test_two_cards_in_json_split_the_layers_and_flag_the_cpu():
    split = as_json(LEGACY, "--vram", "4GiB", "--vram", "3GiB")["models"][0]["placement"]
    assert split["mode"] == "spread" and [c["card"] for c in split["cards"]] == [0, 1]
    assert split["slow"] is True and split["cpu_layers"] > 0 and split["output_on_cpu"]
    assert sum(c["layers"] for c in split["cards"]) + split["cpu_layers"] + 1 == split["layers_total"] == 33


def test_one_model_on_one_card_keeps_its_old_table():
    proc = run_plan(LEGACY, "--vram", "8GiB")
    assert proc.returncode == 0 and "Predicted for neohorse-1:q4_K_M" in proc.stdout
    assert "together" not in proc.stdout


@pytest.mark.parametrize("flags", [["--also", "nope:1"], ["--also", Q4], ["--also", Q3, "--also", Q3],
                                   ["--vram", "8GiB", "--vram", "lots"], ["--vram", "8GiB", "--vram", "0"]])
def test_bad_set_input_is_one_line_and_exit_2(flags):
    proc = run_plan(LEGACY, *flags)
    assert proc.returncode == 2, proc.stdout
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr


def test_an_also_the_server_lacks_names_what_it_has():
    proc = run_plan(LEGACY, "--also", "nope:1")
    assert "nope:1" in proc.stderr and Q3 in proc.stderr


# --- in process: what the simulator cannot set -----------------------------------------------------------


def _members(ctx: int = 4096):
    out = []
    for tag, weights in ((Q4, int(4.58 * 2**30)), (Q3, int(3.74 * 2**30))):
        arch = memmodel.Arch(arch="llama", block_count=32, head_count=32, head_count_kv=8, embedding_length=4096,
                             context_length=32768, vocab_size=128256)
        shape = predict.ModelShape(tag, arch, weights, "file", None)
        footprint = predict.predictor(shape, memmodel.ENGINE_RUNNER, "f16", flash_attention=False)
        row = {"model": tag, "predicted": True, "num_ctx": ctx, "total": footprint(ctx, 1).peak}
        out.append((row, footprint, shape))
    return out


def _render(result: dict, lang: str) -> str:
    before = get_lang()
    set_lang(lang)
    try:
        buffer = io.StringIO()
        render_set(Console(file=buffer, width=80), result)
        return buffer.getvalue()
    finally:
        set_lang(before)


def _result(env, known=None, cards=(24 << 30,)):
    limit = fit_limit(sum(cards))
    got = plan_set(_members(), memmodel.ENGINE_RUNNER, list(cards), limit, 1, env, known, True)
    return {**got, "engine": "runner", "version": "0.11.4", "vram": sum(cards),
            "devices": [{"card": i, "vram": c} for i, c in enumerate(cards)]}


@pytest.mark.parametrize("lang, wanted", [("en", "set OLLAMA_MAX_LOADED_MODELS=2"),
                                          ("zh", "请设置 OLLAMA_MAX_LOADED_MODELS=2")])
def test_a_server_that_keeps_fewer_models_than_the_set_is_told_to_keep_more(lang, wanted):
    result = _result({"OLLAMA_MAX_LOADED_MODELS": "1"})
    assert result["set"]["max_loaded_models"] == {"value": 1, "source": "set", "wanted": 2, "enough": False}
    assert wanted in " ".join(_render(result, lang).split())


def test_an_unread_max_loaded_models_is_unknown_never_assumed():
    for env, known in ((None, None), ({"OLLAMA_NUM_PARALLEL": "1"}, frozenset({"OLLAMA_NUM_PARALLEL"}))):
        result = _result(env, known)
        assert result["set"]["max_loaded_models"] == {"value": None, "source": "unknown", "wanted": 2,
                                                      "enough": None}
        assert result["set"]["sched_spread"] is None
        text = " ".join(_render(result, "en").split())
        assert "OLLAMA_MAX_LOADED_MODELS: unknown" in text and "must be 2 or more" in text
        assert "OLLAMA_SCHED_SPREAD: unknown" in text


def test_sched_spread_on_the_server_spreads_every_model():
    result = _result({"OLLAMA_SCHED_SPREAD": "1"}, cards=(24 << 30, 24 << 30))
    assert result["set"]["sched_spread"] is True
    assert all(m["placement"]["mode"] == "spread" for m in result["models"])
    assert "OLLAMA_SCHED_SPREAD is on" in _render(result, "en")


def test_set_contexts_never_go_under_2048_or_a_models_own_shorter_context():
    grows = [lambda c: 1000 + c, lambda c: 1000 + 2 * c]
    assert set_contexts(grows, [8192, 1024], 1000 + 2048 + 1000 + 2048) == [2048, 1024]
    assert set_contexts(grows, [8192, 8192], 2000 + 2048 + 4096 - 1) is None
    chosen = set_contexts(grows, [8192, 8192], 2000 + 3 * 4096)
    assert all(c >= 2048 for c in chosen) and sum(p(c) for p, c in zip(grows, chosen)) <= 2000 + 3 * 4096
