"""nvidia-smi and rocm-smi parsers on output as the real tools print it, and
the readers built on them fed through an injected command runner."""
from __future__ import annotations

import pytest

from probes.memory.base import CommandError
from probes.memory.nvidia_smi import NvidiaSmiReader, parse_apps_csv, parse_gpu_csv
from probes.memory.rocm_smi import (RocmParseError, RocmSmiReader, parse_meminfo, parse_pids,
                                    parse_productname)

MiB = 1 << 20

# --- nvidia-smi samples (format as printed by driver 535-570) -------------
GPU_ONE = """memory.used [MiB], memory.total [MiB]
7825 MiB, 24564 MiB
"""
GPU_TWO = """memory.used [MiB], memory.total [MiB]
18432 MiB, 81559 MiB
3 MiB, 81559 MiB
"""
GPU_NOUNITS = """memory.used [MiB], memory.total [MiB]
7825, 24564
"""
# unified-memory parts (e.g. GB10 / Jetson) print [N/A] for framebuffer memory
GPU_NA = """memory.used [MiB], memory.total [MiB]
[N/A], [N/A]
"""
INFO_ONE = """index, name, memory.total [MiB]
0, NVIDIA GeForce RTX 4090, 24564 MiB
"""
APPS = """pid, process_name, used_gpu_memory [MiB]
2231, /usr/lib/xorg/Xorg, 4 MiB
918273, /usr/local/bin/ollama, 5412 MiB
"""
APPS_NONE = """pid, process_name, used_gpu_memory [MiB]
"""
# Windows (WDDM) hides per-process memory
APPS_WDDM = """pid, process_name, used_gpu_memory [MiB]
27220, C:\\Users\\me\\AppData\\Local\\Programs\\Ollama\\ollama.exe, [N/A]
"""
SMI_FAILED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")


def test_nvidia_gpu_csv_reads_mib_values_as_bytes():
    assert parse_gpu_csv(GPU_ONE) == [{"memory.used": 7825 * MiB, "memory.total": 24564 * MiB}]


def test_nvidia_gpu_csv_nounits_takes_the_unit_from_the_header():
    assert parse_gpu_csv(GPU_NOUNITS) == parse_gpu_csv(GPU_ONE)


def test_nvidia_na_field_is_none():
    assert parse_gpu_csv(GPU_NA) == [{"memory.used": None, "memory.total": None}]


def test_nvidia_apps_csv_lists_processes():
    procs = parse_apps_csv(APPS)
    assert [(p.pid, p.name, p.used_bytes) for p in procs] == [
        (2231, "/usr/lib/xorg/Xorg", 4 * MiB), (918273, "/usr/local/bin/ollama", 5412 * MiB)]


def test_nvidia_gpu_with_no_processes_prints_only_the_header():
    assert parse_apps_csv(APPS_NONE) == []
    assert parse_apps_csv("") == []
    assert parse_apps_csv("No running processes found\n") == []


def test_nvidia_hidden_process_memory_is_none():
    (p,) = parse_apps_csv(APPS_WDDM)
    assert p.pid == 27220 and p.used_bytes is None and p.name.endswith("ollama.exe")


def test_nvidia_process_name_with_a_comma_stays_whole():
    text = "pid, process_name, used_gpu_memory [MiB]\n42, python -c a, b, 10 MiB\n"
    (p,) = parse_apps_csv(text)
    assert (p.pid, p.name, p.used_bytes) == (42, "python -c a, b", 10 * MiB)


def _runner(outputs):
    """An smi_runner that answers by the query flag and records argv."""
    calls = []

    def run(argv):
        calls.append(list(argv))
        for key, out in outputs.items():
            if any(key in a for a in argv):
                if isinstance(out, BaseException):
                    raise out
                return out
        raise FileNotFoundError(argv[0])
    run.calls = calls
    return run


def test_nvidia_smi_reader_sums_gpus_and_derives_free():
    reader = NvidiaSmiReader(runner=_runner({"--query-gpu=memory.used": GPU_TWO}))
    r = reader.read()
    assert r.used_bytes == (18432 + 3) * MiB
    assert r.total_bytes == 2 * 81559 * MiB
    assert r.free_bytes == r.total_bytes - r.used_bytes


def test_nvidia_smi_reader_runs_the_documented_query():
    run = _runner({"--query-gpu=memory.used": GPU_ONE})
    NvidiaSmiReader(runner=run).read()
    assert run.calls == [["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv"]]


def test_nvidia_smi_reader_na_reading_is_none_not_a_crash():
    r = NvidiaSmiReader(runner=_runner({"--query-gpu=memory.used": GPU_NA})).read()
    assert (r.used_bytes, r.total_bytes, r.free_bytes) == (None, None, None)


def test_nvidia_smi_probe_and_info_name_the_gpu():
    reader = NvidiaSmiReader(runner=_runner({"--query-gpu=index": INFO_ONE}))
    assert reader.probe() == (True, "nvidia-smi: 1 GPU, NVIDIA GeForce RTX 4090")
    info = reader.info()
    assert (info.name, info.vendor, info.total_bytes) == ("NVIDIA GeForce RTX 4090", "nvidia", 24564 * MiB)


def test_nvidia_smi_not_on_path_is_the_reason():
    assert NvidiaSmiReader(runner=_runner({})).probe() == (False, "nvidia-smi: not found on PATH")


def test_nvidia_smi_driver_failure_is_its_own_first_line():
    run = _runner({"--query-gpu": CommandError(SMI_FAILED)})
    usable, reason = NvidiaSmiReader(runner=run).probe()
    assert not usable
    assert reason == "nvidia-smi: " + SMI_FAILED
    assert NvidiaSmiReader(runner=run).read().used_bytes is None


def test_nvidia_smi_processes():
    reader = NvidiaSmiReader(runner=_runner({"--query-compute-apps": APPS}))
    assert [p.pid for p in reader.processes()] == [2231, 918273]


# --- rocm-smi samples (rocm-smi 6.x --json) --------------------------------
ROCM_MEM = """{"card0": {"VRAM Total Memory (B)": "25753026560", "VRAM Total Used Memory (B)": "1073741824"}}
"""
ROCM_MEM_TWO_WITH_WARNING = """WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status

{"card0": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "11190272"}, "card1": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "29225381888"}}
"""
ROCM_MEM_NA = """{"card0": {"VRAM Total Memory (B)": "N/A", "VRAM Total Used Memory (B)": "N/A"}}"""
ROCM_NAME = """{"card0": {"Card Series": "Radeon RX 7900 XTX", "Card Model": "0x744c", "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "D70301", "Subsystem ID": "0x5304", "Device Rev": "0xc8", "Node ID": "1", "GUID": "45280", "GFX Version": "gfx1100"}}"""
ROCM_NAME_NA_SERIES = """{"card0": {"Card Series": "N/A", "Card Model": "0x7551", "Card SKU": "APM107573", "GFX Version": "gfx1201"}}"""
ROCM_PIDS = """{"system": {"PID3344": "ollama, 1, 5368709120, 0, 0", "PID77": "python3, 1, unknown, unknown, unknown"}}"""
ROCM_PIDS_NONE = """{}"""


def test_rocm_meminfo_reads_bytes_per_card():
    assert parse_meminfo(ROCM_MEM) == [{"card": 0, "total": 25753026560, "used": 1073741824}]


def test_rocm_warning_line_before_json_is_skipped():
    cards = parse_meminfo(ROCM_MEM_TWO_WITH_WARNING)
    assert [c["card"] for c in cards] == [0, 1]
    assert cards[1]["used"] == 29225381888


def test_rocm_na_value_is_none():
    assert parse_meminfo(ROCM_MEM_NA) == [{"card": 0, "total": None, "used": None}]


def test_rocm_productname_prefers_series_and_skips_na():
    assert parse_productname(ROCM_NAME) == {0: "Radeon RX 7900 XTX"}
    assert parse_productname(ROCM_NAME_NA_SERIES) == {0: "0x7551"}


def test_rocm_pids_with_known_and_unknown_vram():
    procs = parse_pids(ROCM_PIDS)
    assert [(p.pid, p.name, p.used_bytes) for p in procs] == [(77, "python3", None),
                                                             (3344, "ollama", 5368709120)]


def test_rocm_no_processes_is_empty():
    assert parse_pids(ROCM_PIDS_NONE) == []
    assert parse_pids("") == []


def test_rocm_garbage_output_is_a_parse_error():
    with pytest.raises(RocmParseError):
        parse_meminfo("rocm-smi: command failed\n")


def test_rocm_reader_sums_cards_and_names_them():
    run = _runner({"--showmeminfo": ROCM_MEM_TWO_WITH_WARNING, "--showproductname": ROCM_NAME})
    reader = RocmSmiReader(runner=run)
    r = reader.read()
    assert r.used_bytes == 11190272 + 29225381888
    assert r.free_bytes == 2 * 68702699520 - r.used_bytes
    info = reader.info()
    assert info.vendor == "amd" and info.count == 2 and info.total_bytes == 2 * 68702699520
    usable, reason = reader.probe()
    assert usable and reason.startswith("rocm-smi: 2 GPUs")


def test_rocm_reader_not_on_path_and_na_reading():
    assert RocmSmiReader(runner=_runner({})).probe() == (False, "rocm-smi: not found on PATH")
    r = RocmSmiReader(runner=_runner({"--showmeminfo": ROCM_MEM_NA})).read()
    assert (r.used_bytes, r.total_bytes, r.free_bytes) == (None, None, None)


def test_rocm_reader_without_cards_is_not_usable():
    usable, reason = RocmSmiReader(runner=_runner({"--showmeminfo": "{}"})).probe()
    assert (usable, reason) == (False, "rocm-smi: no AMD GPU listed")
