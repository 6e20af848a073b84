"""Which source the selector picks, in order, and the one-line reasons it
gives for the others."""
from __future__ import annotations

import pytest

from common.errors import ProbeError
from probes.memory.host import is_unified_memory_host
from probes.memory.select import SOURCE_ORDER, select_reader
from tests.fake_nvml import GiB, FakeNvml
from tests.test_memory_smi_parsers import GPU_ONE, INFO_ONE, ROCM_MEM, ROCM_NAME, _runner

NO_TOOLS = _runner({})
NVIDIA_SMI = _runner({"--query-gpu=index": INFO_ONE, "--query-gpu=memory.used": GPU_ONE})
ROCM_SMI = _runner({"--showmeminfo": ROCM_MEM, "--showproductname": ROCM_NAME})


def _gpu():
    return FakeNvml().enqueue_memory(used=1 * GiB, total=24 * GiB)


def test_nvml_comes_first_when_it_works():
    sel = select_reader(nvml_lib=_gpu(), smi_runner=NVIDIA_SMI)
    assert sel.reader.name == "nvml"
    assert sel.why_code == "first-usable"
    assert [s.name for s in sel.statuses] == list(SOURCE_ORDER)
    assert all(s.usable for s in sel.statuses if s.name in ("nvml", "nvidia-smi", "host"))


def test_nvidia_smi_is_used_when_nvml_library_is_missing():
    sel = select_reader(nvml_lib=FakeNvml(missing=True), smi_runner=NVIDIA_SMI)
    assert sel.reader.name == "nvidia-smi"
    by_name = {s.name: s for s in sel.statuses}
    assert by_name["nvml"].reason == "NVML: library not found"
    assert by_name["rocm-smi"].reason == "rocm-smi: not found on PATH"


def test_rocm_smi_is_used_on_an_amd_machine():
    sel = select_reader(nvml_lib=FakeNvml(missing=True), smi_runner=ROCM_SMI)
    assert sel.reader.name == "rocm-smi"
    assert sel.reader.info().vendor == "amd"


def test_no_gpu_source_falls_back_to_host_and_says_why():
    sel = select_reader(nvml_lib=FakeNvml(missing=True), smi_runner=NO_TOOLS)
    assert sel.reader.name == "host"
    expected = "unified" if is_unified_memory_host() else "host-fallback"
    assert sel.why_code == expected
    assert sel.why.startswith("host: ")
    assert [s.usable for s in sel.statuses] == [False, False, False, True]


def test_forced_source_wins_over_the_order_and_the_unused_nvml_is_shut_down():
    nvml = _gpu()
    sel = select_reader("nvidia-smi", nvml_lib=nvml, smi_runner=NVIDIA_SMI)
    assert sel.reader.name == "nvidia-smi"
    assert sel.why_code == "forced"
    assert nvml.calls("nvmlShutdown") == 1


def test_forced_source_that_cannot_work_here_is_one_clear_error():
    with pytest.raises(ProbeError) as err:
        select_reader("nvml", nvml_lib=FakeNvml(missing=True), smi_runner=NO_TOOLS)
    assert str(err.value) == "--memory-source nvml cannot be used here: NVML: library not found"
    assert err.value.exit_code == 2
    assert "\n" not in str(err.value)


def test_unknown_source_name_is_refused():
    with pytest.raises(ProbeError, match="unknown memory source 'gpu'"):
        select_reader("gpu", nvml_lib=FakeNvml(missing=True), smi_runner=NO_TOOLS)


def test_ollama_ps_is_never_the_measurement():
    with pytest.raises(ProbeError, match="estimate"):
        select_reader("ollama-ps", nvml_lib=FakeNvml(missing=True), smi_runner=NO_TOOLS)


def test_selection_serializes_for_json():
    data = select_reader(nvml_lib=_gpu(), smi_runner=NO_TOOLS).to_dict()
    assert data["selected"] == "nvml"
    assert [s["selected"] for s in data["sources"]] == [True, False, False, False]
