"""--budget strings, the limit they give against what the device can give,
and one clear line with exit code 2 for every bad one."""
from __future__ import annotations

import pytest

from assistant.cli import main
from probes.budget import Budget, Limit, parse_budget, resolve_limit
from common.errors import ProbeError
from probes.memory.base import DeviceInfo, Reading
from probes.units import SizeError

MiB, GiB = 1 << 20, 1 << 30

GPU = DeviceInfo("NVIDIA GeForce RTX 4090", "nvidia", 24 * GiB, False, "nvml")
HOST = DeviceInfo("host memory (Xeon)", "cpu", 32 * GiB, False, "host")
MAC = DeviceInfo("Apple M2 Pro (unified memory)", "apple", 32 * GiB, True, "host")


@pytest.mark.parametrize("text, nbytes, fraction", [
    ("6GiB", 6 * GiB, None),
    ("600MiB", 600 * MiB, None),
    ("7.5G", int(7.5 * GiB), None),
    ("80%", None, 0.8),
    (" 12.5 % ", None, 0.125),
    ("100%", None, 1.0),
])
def test_budget_forms_people_write(text, nbytes, fraction):
    b = parse_budget(text)
    assert (b.bytes, b.fraction) == (nbytes, fraction)


BAD = ["abc", "", "   ", "0", "0GiB", "-1G", "150%", "0%", "6 parsecs", "12", "1e9", "GiB", "%"]


@pytest.mark.parametrize("text", BAD)
def test_bad_budget_is_a_size_error_with_one_line(text):
    with pytest.raises(SizeError) as err:
        parse_budget(text)
    assert isinstance(err.value, ProbeError) and err.value.exit_code == 2
    assert "--budget" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["abc", "150%", "-1G", "12", "0"])
def test_bad_budget_on_the_command_line_prints_one_line_and_exits_2(text, capsys, monkeypatch):
    monkeypatch.delenv("OOMVET_RAISE", raising=False)
    rc = main(["devices", f"--budget={text}", "--json"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oomvet: --budget")
    assert "Traceback" not in err


def test_budget_smaller_than_free_gpu_is_the_limit():
    reading = Reading(0.0, 2 * GiB, 24 * GiB, 22 * GiB)
    limit = resolve_limit(parse_budget("6GiB"), GPU, reading)
    assert (limit.bytes, limit.source) == (6 * GiB, "budget")
    assert limit.device_bytes == 22 * GiB
    assert limit.ceiling_bytes == 8 * GiB  # others' 2 GiB + our 6 GiB
    assert "6.00 GiB from --budget 6GiB" in limit.note


def test_budget_larger_than_the_device_can_give_is_capped():
    reading = Reading(0.0, 20 * GiB, 24 * GiB, 4 * GiB)   # a shared GPU, 20 GiB taken by others
    limit = resolve_limit(parse_budget("6GiB"), GPU, reading)
    assert (limit.bytes, limit.source) == (4 * GiB, "device")
    assert limit.budget_bytes == 6 * GiB
    assert "more than" in limit.note and "4.00 GiB" in limit.note


def test_percent_budget_is_of_the_device_total():
    reading = Reading(0.0, 0, 24 * GiB, 24 * GiB)
    limit = resolve_limit(parse_budget("50%"), GPU, reading)
    assert limit.bytes == 12 * GiB and limit.source == "budget"


def test_percent_budget_without_a_device_total_is_a_clear_error():
    info = DeviceInfo("NVIDIA GB10", "nvidia", None, False, "nvidia-smi")
    with pytest.raises(ProbeError, match="give a size|device total"):
        resolve_limit(parse_budget("80%"), info, Reading(0.0, None, None, None))


def test_no_budget_on_gpu_is_what_the_device_can_give():
    limit = resolve_limit(None, GPU, Reading(0.0, 1 * GiB, 24 * GiB, 23 * GiB))
    assert (limit.bytes, limit.source) == (23 * GiB, "device")
    assert limit.note.startswith("no --budget")


def test_no_gpu_and_no_budget_uses_host_available_memory_and_says_so():
    # the runner already holds 1 GiB: ours to reuse, so it counts as available
    reading = Reading(0.0, 1 * GiB, 32 * GiB, 16 * GiB)
    limit = resolve_limit(None, HOST, reading)
    assert (limit.bytes, limit.source) == (17 * GiB, "host-available")
    assert limit.note == "no GPU and no --budget: the limit is the host's available memory, 17.00 GiB"
    assert limit.text("zh").startswith("没有 GPU")
    assert limit.ceiling_bytes == 17 * GiB  # host readings are the runner's RSS only


def test_host_with_budget_is_how_the_method_runs_without_gpu():
    limit = resolve_limit(parse_budget("600MiB"), HOST, Reading(0.0, 0, 32 * GiB, 20 * GiB))
    assert (limit.bytes, limit.source, limit.ceiling_bytes) == (600 * MiB, "budget", 600 * MiB)


def test_unified_memory_without_budget_names_the_shared_pool():
    limit = resolve_limit(None, MAC, Reading(0.0, 0, 32 * GiB, 20 * GiB))
    assert limit.source == "host-available" and limit.note.startswith("unified memory")


def test_gpu_with_no_free_figure_derives_it_from_total_and_used():
    limit = resolve_limit(None, GPU, Reading(0.0, 4 * GiB, 24 * GiB, None))
    assert limit.bytes == 20 * GiB


def test_nothing_known_and_no_budget_asks_for_one():
    info = DeviceInfo("NVIDIA GB10", "nvidia", None, False, "nvidia-smi")
    with pytest.raises(ProbeError) as err:
        resolve_limit(None, info, Reading(0.0, None, None, None))
    assert "--budget" in err.value.hint


def test_own_model_memory_counts_as_what_the_device_can_give():
    reading = Reading(0.0, 10 * GiB, 24 * GiB, 14 * GiB)   # our model holds 8 of the 10 GiB
    limit = resolve_limit(None, GPU, reading, own_bytes=8 * GiB)
    assert limit.bytes == 22 * GiB
    assert limit.ceiling_bytes == 2 * GiB + 22 * GiB


def test_budget_is_immutable():
    b = Budget(6 * GiB, None, "6GiB")
    with pytest.raises(AttributeError):
        b.bytes = 1  # type: ignore[misc]
