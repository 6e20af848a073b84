"""The NVML reader against the queue-driven fake: readings, per-field errors,
a missing library, and a clean shutdown."""
from __future__ import annotations

import pytest

from probes.memory.nvml import NvmlReader
from tests.fake_nvml import GiB, FakeNvml


def test_reading_reports_used_total_and_free_in_bytes():
    nvml = FakeNvml().enqueue_memory(used=3 * GiB, total=24 * GiB)
    reader = NvmlReader(lib=nvml)
    r = reader.read()
    assert (r.used_bytes, r.total_bytes, r.free_bytes) == (3 * GiB, 24 * GiB, 21 * GiB)


def test_consecutive_readings_follow_the_queue():
    nvml = FakeNvml()
    for used in (1 * GiB, 5 * GiB, 2 * GiB):
        nvml.enqueue_memory(used=used, total=24 * GiB)
    reader = NvmlReader(lib=nvml)
    assert [reader.read().used_bytes for _ in range(3)] == [1 * GiB, 5 * GiB, 2 * GiB]


def test_missing_library_is_not_usable_with_one_line_reason():
    reader = NvmlReader(lib=FakeNvml(missing=True))
    assert reader.probe() == (False, "NVML: library not found")


def test_pynvml_not_installed_reads_as_library_not_found():
    def no_pynvml():
        raise ImportError("No module named 'pynvml'")
    reader = NvmlReader(import_lib=no_pynvml)
    assert reader.probe() == (False, "NVML: library not found")
    # and reading anyway gives "n/a", not a crash
    r = reader.read()
    assert (r.used_bytes, r.total_bytes, r.free_bytes) == (None, None, None)
    assert reader.processes() == []


def test_driver_not_loaded_at_init_is_the_reason_shown():
    nvml = FakeNvml()
    nvml.enqueue_error("Driver Not Loaded", call="nvmlInit")
    usable, reason = NvmlReader(lib=nvml).probe()
    assert not usable
    assert reason == "NVML: Driver Not Loaded"


def test_no_gpu_found_is_not_usable():
    nvml = FakeNvml(gpus=())
    usable, reason = NvmlReader(lib=nvml).probe()
    assert (usable, reason) == (False, "NVML: no NVIDIA GPU found")
    assert nvml.calls("nvmlShutdown") == 1  # init succeeded, so it is undone


def test_probe_names_the_gpu_and_driver():
    nvml = FakeNvml(gpus=("NVIDIA GeForce RTX 4090",)).enqueue_memory(1 * GiB, 24 * GiB)
    usable, reason = NvmlReader(lib=nvml).probe()
    assert usable
    assert reason == "NVML: 1 GPU, NVIDIA GeForce RTX 4090, driver 550.54.14"


def test_not_supported_memory_field_reads_as_none_not_a_crash():
    nvml = FakeNvml()
    nvml.enqueue_error("Not Supported", call="nvmlDeviceGetMemoryInfo")
    nvml.enqueue_memory(used=2 * GiB, total=24 * GiB)
    reader = NvmlReader(lib=nvml)
    first, second = reader.read(), reader.read()
    assert (first.used_bytes, first.total_bytes, first.free_bytes) == (None, None, None)
    assert second.used_bytes == 2 * GiB


def test_gpu_lost_mid_sampling_gives_na_then_recovers_reading():
    nvml = FakeNvml().enqueue_memory(used=1 * GiB, total=8 * GiB)
    reader = NvmlReader(lib=nvml)
    assert reader.read().used_bytes == 1 * GiB
    nvml.enqueue_error("GPU is lost")
    assert reader.read().used_bytes is None
    assert reader.read().used_bytes == 1 * GiB  # the device's last state again


def test_name_not_available_still_gives_device_info():
    nvml = FakeNvml().enqueue_memory(used=0, total=16 * GiB)
    nvml.enqueue_error("Not Supported", call="nvmlDeviceGetName")
    info = NvmlReader(lib=nvml).info()
    assert info.name == "NVIDIA GPU (name n/a)"
    assert (info.vendor, info.total_bytes, info.unified, info.source) == ("nvidia", 16 * GiB, False, "nvml")


def test_bytes_names_from_old_pynvml_are_decoded():
    nvml = FakeNvml(gpus=(b"Tesla T4",)).enqueue_memory(used=0, total=15 * GiB)
    assert NvmlReader(lib=nvml).info().name == "Tesla T4"


def test_two_gpus_are_summed_and_named_once():
    nvml = FakeNvml(gpus=("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"))
    nvml.enqueue_memory(used=10 * GiB, total=80 * GiB, gpu=0)
    nvml.enqueue_memory(used=30 * GiB, total=80 * GiB, gpu=1)
    reader = NvmlReader(lib=nvml)
    r = reader.read()
    assert (r.used_bytes, r.total_bytes) == (40 * GiB, 160 * GiB)
    info = reader.info()
    assert info.name == "2 x NVIDIA A100-SXM4-80GB"
    assert info.count == 2


def test_index_reads_one_gpu_only():
    nvml = FakeNvml(gpus=("A", "B"))
    nvml.enqueue_memory(used=10 * GiB, total=80 * GiB, gpu=0)
    nvml.enqueue_memory(used=30 * GiB, total=40 * GiB, gpu=1)
    r = NvmlReader(lib=nvml, index=1).read()
    assert (r.used_bytes, r.total_bytes) == (30 * GiB, 40 * GiB)


def test_one_gpu_na_makes_the_sum_na_rather_than_too_small():
    nvml = FakeNvml(gpus=("A", "B"))
    nvml.enqueue_memory(used=10 * GiB, total=80 * GiB, gpu=0)
    nvml.enqueue_error("Not Supported", gpu=1)
    assert NvmlReader(lib=nvml).read().used_bytes is None


def test_processes_list_pids_with_device_memory_and_na_for_hidden_values():
    nvml = FakeNvml().enqueue_memory(used=6 * GiB, total=24 * GiB)
    nvml.enqueue_processes([(4242, 5 * GiB), (777, None)])
    names = {4242: "ollama", 777: "Xorg"}
    procs = NvmlReader(lib=nvml, pid_name=names.get).processes()
    assert [(p.pid, p.name, p.used_bytes) for p in procs] == [(777, "Xorg", None), (4242, "ollama", 5 * GiB)]


def test_process_query_not_supported_gives_empty_list():
    nvml = FakeNvml().enqueue_memory(used=0, total=24 * GiB)
    nvml.enqueue_error("Not Supported", call="nvmlDeviceGetComputeRunningProcesses")
    assert NvmlReader(lib=nvml).processes() == []


def test_init_happens_once_and_close_shuts_down():
    nvml = FakeNvml().enqueue_memory(used=0, total=24 * GiB)
    reader = NvmlReader(lib=nvml)
    reader.probe()
    for _ in range(5):
        reader.read()
    assert nvml.calls("nvmlInit") == 1
    reader.close()
    reader.close()
    assert nvml.calls("nvmlShutdown") == 1
    assert nvml.initialized == 0


def test_missing_library_is_never_shut_down():
    nvml = FakeNvml(missing=True)
    reader = NvmlReader(lib=nvml)
    reader.probe()
    reader.close()
    assert nvml.calls("nvmlShutdown") == 0


def test_a_non_nvml_bug_in_a_query_is_not_hidden():
    class Broken(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle):
            raise TypeError("bug in the caller")
    with pytest.raises(TypeError):
        NvmlReader(lib=Broken()).read()
