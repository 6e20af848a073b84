"""Scenario files: the documented format loads, and every mistake is one line
naming the file and the field."""
from __future__ import annotations

import copy

import pytest

from common.errors import ProbeError
from oomsim.scenario import ScenarioError, load_scenario, scenario_from_dict

GiB, MiB = 1 << 30, 1 << 20

ISSUE_EXAMPLE = """\
device: {name: "NVIDIA GeForce RTX 4060", vendor: nvidia, total: 8GiB, used_by_others: 600MiB}
server: {version: 0.11.4, num_parallel: 1, flash_attention: false, kv_cache_type: f16, context_length: 4096}
models:
  neohorse-1:f16:    {arch: llama, block_count: 32, head_count: 32, head_count_kv: 8, embedding_length: 4096, context_length: 32768, vocab_size: 128256, weights: 14.9GiB, quantization: F16}
  neohorse-1:q4_K_M: {arch: llama, block_count: 32, head_count: 32, head_count_kv: 8, embedding_length: 4096, context_length: 32768, vocab_size: 128256, weights: 4.6GiB, quantization: Q4_K_M}
faults: {leak_per_request: 0, incoherent: []}
"""

BASE = {
    "device": {"name": "GPU", "vendor": "nvidia", "total": "8GiB"},
    "server": {},
    "models": {"m:a": {"arch": "llama", "block_count": 2, "head_count": 4, "head_count_kv": 2,
                       "embedding_length": 64, "context_length": 1024, "weights": "10MiB",
                       "quantization": "Q4_K_M"}},
}


def with_change(path: str, value):
    data = copy.deepcopy(BASE)
    node = data
    keys = path.split("/")
    for key in keys[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return data


_DELETE = object()


def test_the_issue_example_loads(tmp_path):
    path = tmp_path / "example.yaml"
    path.write_text(ISSUE_EXAMPLE)
    scn = load_scenario(path)
    assert scn.device.total_bytes == 8 * GiB and scn.device.used_by_others_bytes == 600 * MiB
    assert scn.server.version == "0.11.4" and scn.server.context_length == 4096
    q4 = scn.find("neohorse-1:q4_K_M")
    assert q4.weights_bytes == round(4.6 * GiB) and q4.quantization == "Q4_K_M"
    assert q4.arch.head_count_kv == 8 and q4.arch.vocab_size == 128256
    assert scn.find("NEOHORSE-1:F16").tag == "neohorse-1:f16"  # names are case-insensitive
    assert scn.find("neohorse-1") is None  # no :latest in this file


def test_defaults_fill_what_a_scenario_leaves_out():
    scn = scenario_from_dict(BASE)
    assert scn.server.num_parallel == 1 and scn.server.kv_cache_type == "f16"
    assert not scn.server.flash_attention
    assert scn.faults.leak_per_request_bytes == 0 and not scn.faults.incoherent
    assert scn.find("m:a").parameter_size.endswith("M")


@pytest.mark.parametrize("path, value, message", [
    ("models/m:a/weights", "14.9 gigs", "x.yaml: models.m:a.weights: not a size: '14.9 gigs'"),
    ("device/total", "lots", "x.yaml: device.total: not a size: 'lots'"),
    ("device/vendor", "intel", "x.yaml: device.vendor: must be one of nvidia, amd, apple, got 'intel'"),
    ("device/used_by_others", "9GiB", "x.yaml: device.used_by_others: must be less than device.total"),
    ("models/m:a/quantization", "Q9_Z", "x.yaml: models.m:a.quantization: unknown quantization level 'Q9_Z'"),
    ("models/m:a/block_count", "32", "x.yaml: models.m:a.block_count: must be a whole number, got '32'"),
    ("models/m:a/head_count", _DELETE, "x.yaml: models.m:a.head_count: missing"),
    ("models/m:a/vram", "1GiB", "x.yaml: models.m:a.vram: unknown key"),
    ("server/kv_cache_type", "q5_1", "x.yaml: server.kv_cache_type: must be one of f16, q8_0, q4_0"),
    ("server/num_parallel", 0, "x.yaml: server.num_parallel: must be at least 1, got 0"),
    ("server/keep_alive", "forever", "x.yaml: server.keep_alive: not a duration: 'forever'"),
    ("faults", {"incoherent": ["m:zz"]}, "x.yaml: faults.incoherent[0]: no model 'm:zz' in models"),
    ("faults", {"incoherent": {"m:a": "sleepy"}}, "x.yaml: faults.incoherent.m:a: must be one of repetitive, garbled"),
    ("faults", {"leak_per_request": "-5MiB"}, "x.yaml: faults.leak_per_request: not a size: '-5MiB'"),
    ("models", {}, "x.yaml: models: must map at least one tag"),
    ("device", _DELETE, "x.yaml: device: missing"),
])
def test_a_malformed_scenario_is_one_line_naming_the_field(path, value, message):
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(with_change(path, value), "x.yaml")
    text = str(err.value)
    assert text.startswith(message)
    assert "\n" not in text and err.value.hint is None
    assert isinstance(err.value, ProbeError) and err.value.exit_code == 2


def test_bad_yaml_says_where(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("device: {name: x\nserver: [\n")
    with pytest.raises(ScenarioError, match=r"broken.yaml: not valid YAML \(line \d+, column \d+\)"):
        load_scenario(path)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(ScenarioError, match="nope.yaml: no such scenario file"):
        load_scenario(tmp_path / "nope.yaml")


def test_empty_file_is_not_a_mapping(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(ScenarioError, match="empty.yaml: must be a mapping"):
        load_scenario(path)


def test_incoherent_list_means_repetitive_and_a_map_picks_the_kind():
    data = with_change("faults", {"incoherent": ["m:a"]})
    assert scenario_from_dict(data).faults.incoherent == {"m:a": "repetitive"}
    data = with_change("faults", {"incoherent": {"M:A": "garbled"}})
    assert scenario_from_dict(data).faults.incoherent == {"m:a": "garbled"}


def test_a_tag_listed_twice_is_refused():
    data = copy.deepcopy(BASE)
    data["models"]["M:A"] = dict(data["models"]["m:a"])
    with pytest.raises(ScenarioError, match="models.M:A: listed twice"):
        scenario_from_dict(data, "x.yaml")
