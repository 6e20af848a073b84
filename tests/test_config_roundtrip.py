"""oomvet.yaml: what the session decided is what is written, and what is read back."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from assistant.config import (
    OLLAMA_ENV_VARS, ConfigError, build_config, check_config, dump_config, gpu_overhead_bytes,
    load_config,
)

MiB = 1 << 20
GiB = 1 << 30


def sample_result(**changes) -> dict:
    """A session result shaped like the session loop's, with a few probes and facts."""
    result = {
        "tool": "oomvet 0.1.0", "created": "2026-11-30T05:12:00Z", "host": "http://127.0.0.1:18434",
        "config": {"model": "neohorse-1:q8_0", "max_context_len": 4096, "max_batch_size": 512,
                   "max_concurrency": 1, "quant_type": "Q8_0", "kv_cache": "f16",
                   "gpu_memory_utilization": 0.62},
        "verified": True, "fits": True,
        "diagnosis": {"cause": "kv_cache", "summary": "short ok, long fails: the KV cache outgrows the budget",
                      "advice": None},
        "server_env": {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KV_CACHE_TYPE": "f16"},
        "steps": [
            {"n": 1, "action": "probe", "probe": "baseline", "summary": "idle 100 MiB, loaded 380 MiB",
             "peak": 380 * MiB, "ok": True},
            {"n": 5, "action": "change", "knob": "num_ctx", "from": 8192, "to": 4096,
             "effect": "peak 1.15 GiB -> 620 MiB", "ok": True},
        ],
        "evidence": {
            "device": {"name": "NVIDIA GeForce RTX 4060", "vendor": "nvidia", "total": 8 * GiB, "source": "nvml"},
            "limit": 1 * GiB, "limit_note": "--budget 1GiB",
            "readings": {"idle": 100 * MiB, "after_load": 380 * MiB, "settled": 381 * MiB, "peak": 620 * MiB},
            "stability": {"kind": "stability", "config": {"num_ctx": 4096, "num_batch": 512}, "eval_count": 256,
                          "done_reason": "length", "answered": True, "prompt_tokens": 500, "task_tokens": 500,
                          "repeat_share": 0.0, "errors": [], "measured": True, "_seq": 6},
        },
        # what the probes measured (no verdict), and below how the rules read each one
        "facts": [
            {"kind": "load", "model": "neohorse-1:q8_0", "options": {"num_ctx": 2048}, "answered": True,
             "error": None, "size": 300 * MiB, "size_vram": 300 * MiB, "used_after": 380 * MiB,
             "used_settled": 381 * MiB, "drift_per_min": 0.0, "placement": "gpu", "_seq": 1},
            {"kind": "tier", "name": "short", "num_ctx": 2048, "prompt_tokens": 300, "sent_tokens": 300,
             "peak": 420 * MiB, "answered": True, "error": None, "_seq": 2},
            {"kind": "tier", "name": "long", "num_ctx": 8192, "prompt_tokens": 7000, "sent_tokens": 7000,
             "peak": 1180 * MiB, "answered": True, "error": None, "_seq": 3},
            {"kind": "quant_trial", "tag": "neohorse-1:q4_1", "level": "Q4_1", "answered": True, "weights": 90 * MiB,
             "repeat_share": 0.9, "_seq": 4},
            {"kind": "knob_trial", "knob": "num_batch", "old": 512, "new": 256, "peak": 1100 * MiB, "answered": True,
             "_seq": 5},
        ],
        "readings": [
            {"seq": 1, "rule": "load_fits", "note": "neohorse-1:q8_0 loaded within the limit with margin (972.8 MiB)",
             "note_zh": "neohorse-1:q8_0 在留余量后的上限（972.8 MiB）内加载成功"},
            {"seq": 2, "rule": "tier_fits", "note": "tier short (2048 tokens): peak 420.0 MiB fits",
             "note_zh": "档位 short（2048 token）：峰值 420.0 MiB，在上限内"},
            {"seq": 3, "rule": "tier_out_of_memory",
             "note": "tier long (8192 tokens): out of memory, the peak 1.2 GiB passed the limit",
             "note_zh": "档位 long（8192 token）：内存不足，峰值 1.2 GiB 超过上限"},
            {"seq": 4, "rule": "quant_repeats_itself",
             "note": "neohorse-1:q4_1 (Q4_1) is not coherent: 0.9 of its 4-word sequences repeat",
             "note_zh": "neohorse-1:q4_1（Q4_1）输出不连贯：0.9 的四词序列在重复"},
            {"seq": 5, "rule": "knob_above_limit", "note": "num_batch = 256: peak 1.1 GiB is above the limit with margin",
             "note_zh": "num_batch = 256：峰值 1.1 GiB 超过留余量后的上限"},
            {"seq": 6, "rule": "retest_passed",
             "note": "the retest ran: 256 tokens, length, peak ? (compared with the previous retest next)",
             "note_zh": "复测完成：256 个 token，length，峰值 ?（接着与上一次复测比较）"},
        ],
        "why": [
            {"n": 1, "rule": "short_ok_long_fails", "because": [{"kind": "tier", "name": "short", "answered": True},
                                                                  {"kind": "tier", "name": "long", "answered": True}],
             "next": {"action": "change", "knob": "num_ctx", "to": 4096},
             "reason": "short ok and long fails means the KV cache", "reason_zh": "短输入正常、长输入失败说明是 KV 缓存"},
        ],
        "probes": [
            {"name": "baseline", "limit": GiB, "baseline": 100 * MiB, "peak": 380 * MiB,
             "timeline": [[0.0, 100 * MiB], [0.5, 100 * MiB], [1.0, 250 * MiB], [1.5, 380 * MiB], [3.0, 381 * MiB]],
             "marks": [[0.4, "load"], [1.6, "settled"]]},
            {"name": "context:long", "limit": GiB, "baseline": 100 * MiB, "peak": 1180 * MiB,
             "timeline": [[0.0, 100 * MiB], [0.5, 400 * MiB], [1.0, 1180 * MiB], [2.0, 1100 * MiB], [2.5, 110 * MiB]],
             "marks": [[0.2, "load"], [0.8, "request"]]},
        ],
        "transcript": [{"role": "user", "content": "it dies on long inputs"}],
        "lang": "en",
    }
    result.update(changes)
    return result


def test_config_written_then_read_back_equals_what_was_decided(tmp_path):
    doc = build_config(sample_result())
    path = tmp_path / "oomvet.yaml"
    path.write_text(dump_config(doc, "en"), encoding="utf-8")

    back = load_config(path, "en")

    assert back == doc
    decided = sample_result()["config"]
    assert {k: back[k] for k in decided} == decided
    assert back["verified"] is True
    assert back["evidence"]["stability"]["eval_count"] == 256


def test_header_comment_says_what_produced_it_and_when():
    text = dump_config(build_config(sample_result()), "en")
    header = [line for line in text.splitlines() if line.startswith("#")][:4]

    assert "oomvet 0.1.0" in header[1] and "2026-11-30T05:12:00Z" in header[1]
    assert "http://127.0.0.1:18434" in header[1]
    assert header[2].startswith("# verified: true")


def test_ollama_section_maps_each_value_to_its_real_knob():
    section = build_config(sample_result())["ollama"]

    assert section["from"] == "neohorse-1:q8_0"
    assert section["parameters"] == {"num_ctx": 4096, "num_batch": 512}
    assert section["options"] == {"num_ctx": 4096, "num_batch": 512}
    assert section["env"]["OLLAMA_NUM_PARALLEL"] == "1"
    assert section["optional_env"]["OLLAMA_CONTEXT_LENGTH"] == "4096"
    # (1 - 0.62) x 8 GiB reserved: Ollama's nearest thing to gpu_memory_utilization
    assert section["optional_env"]["OLLAMA_GPU_OVERHEAD"] == str(round(0.38 * 8 * GiB))
    assert set(section["knobs"]) == {"model", "max_context_len", "max_batch_size", "max_concurrency",
                                     "quant_type", "kv_cache", "gpu_memory_utilization"}
    assert set(section["env"]) | set(section["optional_env"]) <= OLLAMA_ENV_VARS


def test_quantized_kv_cache_turns_flash_attention_on():
    # what a session on the legacy runner (flash attention unset is off there) finds to change
    result = sample_result(server_env={"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KV_CACHE_TYPE": "q8_0",
                                       "OLLAMA_FLASH_ATTENTION": "1"})
    result["config"]["kv_cache"] = "q8_0"
    doc = build_config(result)

    assert doc["ollama"]["env"]["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
    assert doc["ollama"]["env"]["OLLAMA_FLASH_ATTENTION"] == "1"
    assert check_config(doc) == []


def test_values_win_over_a_disagreeing_server_env():
    result = sample_result(server_env={"OLLAMA_NUM_PARALLEL": "4"})
    assert build_config(result)["ollama"]["env"]["OLLAMA_NUM_PARALLEL"] == "1"


def test_server_env_with_a_made_up_variable_is_refused():
    with pytest.raises(ValueError, match="OLLAMA_NUM_PARALEL"):
        build_config(sample_result(server_env={"OLLAMA_NUM_PARALEL": "1"}))


def test_cpu_device_gets_no_gpu_overhead_suggestion():
    result = sample_result()
    result["evidence"]["device"] = {"name": "host", "vendor": "cpu", "total": 16 * GiB, "source": "host"}
    assert "OLLAMA_GPU_OVERHEAD" not in build_config(result)["ollama"]["optional_env"]


def test_nothing_fits_is_recorded_with_empty_values_and_round_trips(tmp_path):
    result = sample_result(config=None, verified=False, fits=False,
                           diagnosis={"cause": "weights", "summary": "the weights alone exceed the limit",
                                      "advice": "use a Q4 tag or a larger GPU"})
    doc = build_config(result)
    path = tmp_path / "oomvet.yaml"
    path.write_text(dump_config(doc, "en"), encoding="utf-8")

    assert doc["model"] is None and doc["ollama"] is None and doc["fits"] is False
    assert load_config(path, "en") == doc
    assert "no config fits" in path.read_text(encoding="utf-8").splitlines()[0]


def test_numpy_numbers_tuples_and_chinese_text_survive_the_round_trip(tmp_path):
    result = sample_result()
    result["evidence"]["readings"]["peak"] = np.int64(620 * MiB)
    result["steps"][0]["peak"] = np.int64(380 * MiB)
    result["steps"].append({"n": 6, "action": "probe", "probe": "stability", "window": (0.5, 2.5),
                            "summary": "稳定性复测通过", "ok": True})
    doc = build_config(result)
    path = tmp_path / "oomvet.yaml"
    path.write_text(dump_config(doc, "zh"), encoding="utf-8")

    back = load_config(path, "en")

    assert back == doc
    assert back["steps"][-1]["window"] == [0.5, 2.5]
    assert back["evidence"]["readings"]["peak"] == 620 * MiB
    assert "稳定性复测通过" in path.read_text(encoding="utf-8")


def test_timestamp_like_and_yes_like_strings_stay_strings():
    result = sample_result(created="2026-11-30T05:12:00Z")
    result["diagnosis"]["summary"] = "yes"
    back = yaml.safe_load(dump_config(build_config(result), "en"))

    assert back["generated"]["at"] == "2026-11-30T05:12:00Z"
    assert back["diagnosis"]["summary"] == "yes"


def test_invalid_decision_is_refused_before_anything_is_written():
    result = sample_result()
    result["config"]["max_context_len"] = 0
    with pytest.raises(ValueError, match="max_context_len"):
        build_config(result)


def test_load_config_names_the_first_problem_and_counts_the_rest(tmp_path):
    doc = copy.deepcopy(build_config(sample_result()))
    doc["max_context_len"] = -1
    doc["kv_cache"] = "fp32"
    path = tmp_path / "oomvet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")

    with pytest.raises(ConfigError) as info:
        load_config(path, "en")

    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path)) and "max_context_len must be between 1 and" in message
    assert "1 more problem" in info.value.hint
    assert info.value.exit_code == 2


def test_gpu_overhead_is_the_unused_fraction_of_the_total():
    assert gpu_overhead_bytes(0.75, 8 * GiB) == 2 * GiB
    assert gpu_overhead_bytes(None, 8 * GiB) is None
    assert gpu_overhead_bytes(0.5, None) is None
