"""The `server` fact: engine, default context and why, and the knobs that
exist on each version; unknown is None with a reason, never a guess."""
from __future__ import annotations

from pathlib import Path

from common.errors import ServerUnreachable
from probes.serverinfo import engine_of, knobs_for, read_server, server_fact, vram_tier
from probes.serverlog import parse
from rules.facts import validate

GiB = 1 << 30
MiB = 1 << 20
DATA = Path(__file__).parent / "data"


def test_engine_follows_the_version():
    assert engine_of("0.34.4") == "llama-server" and engine_of("0.30.0") == "llama-server"
    assert engine_of("0.11.4") == "runner" and engine_of("0.24.0") == "runner"
    assert engine_of("0.0.0") is None and engine_of(None) is None


def test_vram_tiers():
    assert [vram_tier(n * GiB) for n in (0, 16, 23, 24, 46, 47, 80)] == [4096, 4096, 32768, 32768, 32768,
                                                                         262144, 262144]


def test_a_24_gib_card_gets_32k_on_the_current_engine_when_nothing_is_set():
    fact = validate(server_fact("0.34.4", env={}, vram_total=24 * GiB, local=True))
    assert (fact["engine"], fact["default_ctx"], fact["default_ctx_why"]) == ("llama-server", 32768, "vram_tier")
    assert (fact["flash_attention"], fact["kv_cache_type"], fact["num_parallel"]) == ("auto", "f16", 1)
    assert fact["fit_target"] == 1024 * MiB and fact["sizes"] == "measured"


def test_gpu_overhead_lowers_the_tier_input_only():
    fact = server_fact("0.34.4", env={"OLLAMA_GPU_OVERHEAD": str(2 * GiB)}, vram_total=24 * GiB)
    assert fact["default_ctx"] == 4096 and fact["knobs"]["OLLAMA_GPU_OVERHEAD"]["effect"] == "none"


def test_env_and_modelfile_win_over_the_tier():
    assert server_fact("0.34.4", env={"OLLAMA_CONTEXT_LENGTH": "8192"}, vram_total=48 * GiB)["default_ctx_why"] == "env"
    fact = server_fact("0.34.4", env={"OLLAMA_CONTEXT_LENGTH": "8192"}, modelfile_num_ctx=2048, vram_total=0)
    assert (fact["default_ctx"], fact["default_ctx_why"]) == (2048, "modelfile")


def test_legacy_defaults():
    fact = validate(server_fact("0.11.4", env={"OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_KV_CACHE_TYPE": "q8_0"}))
    assert (fact["engine"], fact["default_ctx"], fact["default_ctx_why"]) == ("runner", 4096, "legacy_default")
    assert (fact["flash_attention"], fact["kv_cache_type"], fact["sizes"]) == ("on", "q8_0", "estimate")
    assert fact["fit_target"] is None and "fit" in fact["unknown"]["fit_target"]
    assert fact["knobs"]["LLAMA_ARG_FIT_TARGET"]["effect"] == "none"


def test_a_foreign_server_leaves_its_settings_unknown_with_reasons():
    fact = validate(server_fact("0.34.4", env=None, vram_total=None, local=False))
    for key in ("default_ctx", "flash_attention", "kv_cache_type", "num_parallel", "fit_target"):
        assert fact[key] is None and fact["unknown"][key]
    assert fact["local"] is False


def test_the_log_tells_what_the_environment_cannot():
    log = parse((DATA / "serverlog_current.txt").read_text().splitlines())
    fact = server_fact("0.34.4", env=None, log=log)
    assert (fact["default_ctx"], fact["default_ctx_why"]) == (4096, "vram_tier")
    assert (fact["flash_attention"], fact["kv_cache_type"], fact["num_parallel"]) == ("auto", "q8_0", 2)


def test_the_process_list_corrects_a_version_that_says_nothing():
    fact = server_fact("0.0.0", env={}, process_cmdlines=["/usr/lib/ollama/llama-server --model /b -c 4096 -np 1"])
    assert fact["engine"] == "llama-server" and "model process" in fact["engine_why"]


def test_knob_tables_differ_by_engine():
    current, legacy = knobs_for("llama-server"), knobs_for("runner")
    assert current["LLAMA_ARG_FIT_TARGET"]["effect"] == "yes" and legacy["OLLAMA_GPU_OVERHEAD"]["effect"] == "yes"
    assert current["LLAMA_ARG_KV_OFFLOAD"]["effect"] == "diagnostic" and "LLAMA_ARG_KV_OFFLOAD" not in legacy


def test_an_unreachable_server_has_no_version_and_says_why():
    def down():
        raise ServerUnreachable("no Ollama server answers at http://127.0.0.1:1")

    fact = validate(read_server(down, env={}))
    assert fact["version"] is None and "no Ollama server answers" in fact["unknown"]["version"]
