"""Each GPU read apart (issue 34): two cards of different sizes, the
``*_VISIBLE_DEVICES`` variables read as CUDA and ROCm read them, MIG
instances as devices of their own, a device that refuses a field, and the
``devices`` command's JSON and 80-column text in both languages. The
environment is always a mapping handed in, never the process's own."""
from __future__ import annotations

import json

import pytest
from rich.cells import cell_len

from assistant.commands.devices import build_report, render
from probes.memory.base import DeviceReading, devices_of
from probes.memory.host import HostReader
from probes.memory.nvidia_smi import NvidiaSmiReader
from probes.memory.nvml import NvmlReader
from probes.memory.rocm_smi import RocmSmiReader, parse_uniqueid
from probes.memory.select import Selection, SourceStatus, select_reader
from probes.memory.visible import Candidate, visible
from tests.fake_nvml import GiB, MiB, FakeNvml
from tests.test_memory_smi_parsers import _runner

A100, RTX = "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"
MIG_3G, MIG_2G = "NVIDIA A100-SXM4-80GB MIG 3g.40gb", "NVIDIA A100-SXM4-80GB MIG 2g.20gb"


def two_cards() -> FakeNvml:
    nvml = FakeNvml(gpus=(A100, RTX))
    nvml.enqueue_memory(used=10 * GiB, total=80 * GiB, gpu=0)
    nvml.enqueue_memory(used=2 * GiB, total=24 * GiB, gpu=1)
    return nvml


def mig_card() -> FakeNvml:
    """GPU 0 in MIG mode with instances in slots 0 and 2 (slot 1 empty), GPU 1 a card without MIG."""
    nvml = two_cards().with_mig(0, {0: MIG_3G, 2: MIG_2G})
    nvml.enqueue_memory(used=1 * GiB, total=40 * GiB, gpu=0, mig=0)
    nvml.enqueue_memory(used=3 * GiB, total=20 * GiB, gpu=0, mig=2)
    return nvml


def rows(devices: list[DeviceReading]) -> list[tuple]:
    return [(d.label, d.name, d.total_bytes, d.used_bytes, d.free_bytes) for d in devices]


# --- reading each card apart ---------------------------------------------------------

def test_two_cards_of_different_sizes_are_read_apart():
    nvml = two_cards()
    reader = NvmlReader(lib=nvml, env={})
    assert rows(reader.devices()) == [("0", A100, 80 * GiB, 10 * GiB, 70 * GiB),
                                      ("1", RTX, 24 * GiB, 2 * GiB, 22 * GiB)]
    assert [d.uuid for d in reader.devices()] == nvml.uuids


def test_the_summed_view_is_the_visible_cards_only():
    # the server given CUDA_VISIBLE_DEVICES=1 uses the 24 GiB card alone: that is its device and its limit
    reader = NvmlReader(lib=two_cards(), env={"CUDA_VISIBLE_DEVICES": "1"})
    r, info = reader.read(), reader.info()
    assert (r.used_bytes, r.total_bytes, info.count) == (2 * GiB, 24 * GiB, 1)
    everything = NvmlReader(lib=two_cards(), env={})
    assert (everything.read().total_bytes, everything.info().count) == (104 * GiB, 2)
    assert [d.index for d in reader.devices()] == [1]


def test_an_unusable_library_has_no_devices():
    assert NvmlReader(lib=FakeNvml(missing=True), env={}).devices() == []


# --- CUDA_VISIBLE_DEVICES ------------------------------------------------------------

@pytest.mark.parametrize("spec, seen", [
    ("1", [1]), ("1,0", [1, 0]), (" 0 , 1 ", [0, 1]),
    ("1gpu", [1]), ("+1", [1]), ("-0", [0]),                # read like strtoul
    ("", []), ("  ", []),                                   # set but empty: no GPU
    ("0,-1,1", [0]), ("0,two,1", [0]), ("0,7,1", [0]),      # an entry naming nothing ends the list
    ("1,1", []), ("0,1,0", []),                             # one device twice: CUDA sees none
])
def test_cuda_visible_devices_by_index(spec, seen):
    reader = NvmlReader(lib=two_cards(), env={"CUDA_VISIBLE_DEVICES": spec})
    assert [d.index for d in reader.devices()] == seen


def test_cuda_visible_devices_by_uuid_whole_or_a_unique_leading_part():
    nvml = two_cards()
    whole = NvmlReader(lib=nvml, env={"CUDA_VISIBLE_DEVICES": nvml.uuids[1]})
    assert [d.index for d in whole.devices()] == [1]
    part = NvmlReader(lib=nvml, env={"CUDA_VISIBLE_DEVICES": f"{nvml.uuids[1][:12]},0"})
    assert [d.index for d in part.devices()] == [1, 0]
    both = NvmlReader(lib=nvml, env={"CUDA_VISIBLE_DEVICES": "1,GPU-0000000"})  # a part two cards share
    assert [d.index for d in both.devices()] == [1]
    nobody = NvmlReader(lib=nvml, env={"CUDA_VISIBLE_DEVICES": "GPU-ffff,0"})
    assert nobody.devices() == []


def test_unset_means_every_gpu():
    assert [c.item for c in visible(None, [Candidate(0, None, "a"), Candidate(1, None, "b")])] == ["a", "b"]


def test_nvidia_smi_reads_each_gpu_and_honours_cuda_visible_devices():
    csv = ("index, uuid, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
           "0, GPU-8932f937-d72c-4106-c12f-20bd9faed9f6, NVIDIA A100-SXM4-80GB, 81920 MiB, 10240 MiB, 71126 MiB\n"
           "1, GPU-1c7f0e2a-0000-4000-8000-000000000001, NVIDIA GeForce RTX 4090, 24564 MiB, [N/A], [N/A]\n")
    run = _runner({"--query-gpu=index,uuid": csv})
    every = NvidiaSmiReader(runner=run, env={}).devices()
    assert rows(every) == [("0", A100, 81920 * MiB, 10240 * MiB, 71126 * MiB),
                           ("1", RTX, 24564 * MiB, None, None)]
    one = NvidiaSmiReader(runner=run, env={"CUDA_VISIBLE_DEVICES": "GPU-8932f937"}).devices()
    assert [(d.index, d.uuid) for d in one] == [(0, "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6")]


# --- ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES ------------------------------------------

ROCM_MEM = json.dumps({
    "card0": {"VRAM Total Memory (B)": str(24 * GiB), "VRAM Total Used Memory (B)": str(4 * GiB)},
    "card1": {"VRAM Total Memory (B)": str(16 * GiB), "VRAM Total Used Memory (B)": str(1 * GiB)}})
ROCM_NAMES = json.dumps({"card0": {"Card Series": "Radeon RX 7900 XTX"},
                         "card1": {"Card Series": "Radeon RX 7800 XT"}})
ROCM_IDS = "WARNING: some noise\n" + json.dumps({"card0": {"Unique ID": "0x18f68e602b8a790f"},
                                                 "card1": {"Unique ID": "0xabc"}})


def rocm(env) -> RocmSmiReader:
    return RocmSmiReader(runner=_runner({"--showmeminfo": ROCM_MEM, "--showproductname": ROCM_NAMES,
                                         "--showuniqueid": ROCM_IDS}), env=env)


def test_rocm_cards_are_read_apart_with_their_uuids():
    assert rows(rocm({}).devices()) == [("0", "Radeon RX 7900 XTX", 24 * GiB, 4 * GiB, 20 * GiB),
                                        ("1", "Radeon RX 7800 XT", 16 * GiB, 1 * GiB, 15 * GiB)]
    assert parse_uniqueid(ROCM_IDS) == {0: "GPU-18f68e602b8a790f", 1: "GPU-0000000000000abc"}


@pytest.mark.parametrize("env, seen", [
    ({"ROCR_VISIBLE_DEVICES": "1"}, [1]),
    ({"ROCR_VISIBLE_DEVICES": "GPU-18F68E602B8A790F"}, [0]),
    ({"ROCR_VISIBLE_DEVICES": "1,GPU-18f68e602b8a790f"}, [1, 0]),
    ({"ROCR_VISIBLE_DEVICES": ""}, []),
    ({"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0"}, [1]),   # HIP numbers what ROCR left
    ({"HIP_VISIBLE_DEVICES": "1"}, [1]),
    ({"CUDA_VISIBLE_DEVICES": "1"}, [0, 1]),                           # NVIDIA's variable: not read here
])
def test_rocr_and_hip_visible_devices(env, seen):
    assert [d.index for d in rocm(env).devices()] == seen


def test_rocm_without_unique_ids_still_lists_the_cards():
    run = _runner({"--showmeminfo": ROCM_MEM})
    devices = RocmSmiReader(runner=run, env={}).devices()
    assert [(d.index, d.name, d.uuid) for d in devices] == [(0, "AMD GPU", None), (1, "AMD GPU", None)]


# --- MIG -----------------------------------------------------------------------------

def test_a_mig_card_gives_its_instances_and_skips_empty_slots():
    nvml = mig_card()
    devices = NvmlReader(lib=nvml, env={}).devices()
    assert rows(devices) == [("0:0", MIG_3G, 40 * GiB, 1 * GiB, 39 * GiB),
                             ("0:2", MIG_2G, 20 * GiB, 3 * GiB, 17 * GiB),
                             ("1", RTX, 24 * GiB, 2 * GiB, 22 * GiB)]
    assert devices[0].uuid == nvml.mig_uuid(0, 0) and devices[0].uuid.startswith("MIG-")
    assert (devices[0].mig_parent, devices[2].mig_parent) == (0, None)
    assert ("nvmlDeviceGetMigDeviceHandleByIndex", 0, 1) in nvml.history   # Not Found, skipped
    assert nvml.calls("nvmlDeviceGetMigDeviceHandleByIndex") == 7          # every slot up to the maximum


def test_cuda_visible_devices_picks_one_mig_instance_or_a_whole_mig_card():
    nvml = mig_card()
    one = NvmlReader(lib=nvml, env={"CUDA_VISIBLE_DEVICES": nvml.mig_uuid(0, 2)[:14]})
    assert [d.label for d in one.devices()] == ["0:2"]
    card = NvmlReader(lib=nvml, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert [d.label for d in card.devices()] == ["0:0", "0:2"]
    twice = NvmlReader(lib=nvml, env={"CUDA_VISIBLE_DEVICES": f"0,{nvml.mig_uuid(0, 0)}"})
    assert [d.label for d in twice.devices()] == ["0:0", "0:2"]


def test_a_mig_capable_card_with_mig_off_is_one_device():
    nvml = two_cards().with_mig(0, enabled=False)
    assert [d.label for d in NvmlReader(lib=nvml, env={}).devices()] == ["0", "1"]
    assert nvml.nvmlDeviceGetMigMode(nvml.nvmlDeviceGetHandleByIndex(0)) == [0, 0]


def test_the_fake_refuses_mig_calls_as_pynvml_does():
    nvml = mig_card()
    rtx, a100 = nvml.nvmlDeviceGetHandleByIndex(1), nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetMigMode(rtx)
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(rtx) == 0
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(a100, 1)
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(a100, 7)
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(2)


def test_a_pynvml_stand_in_without_mig_calls_reads_as_cards_without_mig():
    class NoMig(FakeNvml):
        nvmlDeviceGetMigMode = nvmlDeviceGetUUID = None  # e.g. the GPU simulator's module
    devices = NvmlReader(lib=NoMig(gpus=(A100, RTX)).enqueue_memory(1, 2, gpu=0).enqueue_memory(1, 2, gpu=1),
                         env={}).devices()
    assert [(d.label, d.uuid) for d in devices] == [("0", None), ("1", None)]


# --- a device that refuses a field ----------------------------------------------------

def refusing() -> FakeNvml:
    """GPU 1 refuses its memory once, GPU 0 its name and UUID; then both answer."""
    nvml = FakeNvml(gpus=(A100, RTX))
    nvml.enqueue_error("Not Supported", call="nvmlDeviceGetMemoryInfo", gpu=1)
    nvml.enqueue_error("Not Supported", call="nvmlDeviceGetName", gpu=0)
    nvml.enqueue_error("Not Supported", call="nvmlDeviceGetUUID", gpu=0)
    nvml.enqueue_memory(used=10 * GiB, total=80 * GiB, gpu=0)
    nvml.enqueue_memory(used=2 * GiB, total=24 * GiB, gpu=1)
    return nvml


def test_a_device_that_refuses_memory_or_name_reads_as_none_not_a_crash():
    nvml = refusing()
    reader = NvmlReader(lib=nvml, env={})
    first = reader.devices()
    assert rows(first) == [("0", "NVIDIA GPU (name n/a)", 80 * GiB, 10 * GiB, 70 * GiB),
                           ("1", RTX, None, None, None)]
    assert (first[0].uuid, first[1].uuid) == (None, nvml.uuids[1])
    assert rows(reader.devices())[1] == ("1", RTX, 24 * GiB, 2 * GiB, 22 * GiB)


def test_a_refused_uuid_cannot_be_named_so_the_list_ends_there():
    nvml = two_cards()
    nvml.enqueue_error("Not Supported", call="nvmlDeviceGetUUID", gpu=1)
    reader = NvmlReader(lib=nvml, env={"CUDA_VISIBLE_DEVICES": f"0,{nvml.uuids[1]}"})
    assert [d.index for d in reader.devices()] == [0]


def test_the_host_is_one_device():
    (host,) = HostReader(pids=[]).devices()
    assert host.index == 0 and host.mig_parent is None and host.uuid is None
    assert host.used_bytes + host.free_bytes == host.total_bytes


# --- oomvet devices ------------------------------------------------------------------

LONG = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition Server Variant"


def _report(nvml, env=None) -> dict:
    sel = select_reader(nvml_lib=nvml, smi_runner=_runner({}), env=env or {})
    return build_report(sel, ollama_host="http://127.0.0.1:11434")


def test_devices_json_has_a_row_per_device():
    report = json.loads(json.dumps(_report(mig_card())))
    assert [(d["label"], d["index"], d["mig_parent"], d["total_bytes"]) for d in report["devices"]] == [
        ("0:0", 0, 0, 40 * GiB), ("0:2", 2, 0, 20 * GiB), ("1", 1, None, 24 * GiB)]
    assert report["per_device"] is True
    assert set(report["devices"][0]) == {"index", "name", "total_bytes", "used_bytes", "free_bytes",
                                         "uuid", "mig_parent", "label"}


def _table_rows(text: str, title: str) -> list[list[str]]:
    """The device table's rows as cells, a name wrapped onto more lines joined again."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    out: list[list[str]] = []
    for line in lines[start + 4:]:
        if not line.startswith("│"):
            break
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells[0]:
            out.append(cells)
        else:
            out[-1] = [a if not b else f"{a} {b}".strip() for a, b in zip(out[-1], cells)]
    return out


@pytest.mark.parametrize("lang, title, note", [
    ("en", "Devices, each read on its own (nvml)", "A number like 0:0 is a MIG instance: instance 0 of GPU 0"),
    ("zh", "各设备分别读数（nvml）", "形如 0:0 的编号是 MIG 实例：GPU 0 上的 0 号实例"),
])
def test_devices_text_fits_80_columns_with_nothing_cut_off(lang, title, note):
    nvml = FakeNvml(gpus=(A100, LONG)).with_mig(0, {0: MIG_3G, 2: MIG_2G})
    nvml.enqueue_memory(10 * GiB, 80 * GiB, gpu=0).enqueue_memory(5 * GiB, 96 * GiB, gpu=1)
    nvml.enqueue_memory(1 * GiB, 40 * GiB, gpu=0, mig=0).enqueue_memory(3 * GiB, 20 * GiB, gpu=0, mig=2)
    text = render(_report(nvml), lang, width=80)
    assert max(cell_len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    assert _table_rows(text, title) == [
        ["0:0", MIG_3G, "40.00 GiB", "1.00 GiB", "39.00 GiB"],
        ["0:2", MIG_2G, "20.00 GiB", "3.00 GiB", "17.00 GiB"],
        ["1", LONG, "96.00 GiB", "5.00 GiB", "91.00 GiB"]]
    assert note in " ".join(text.split())


def test_a_refused_field_shows_as_na():
    report = _report(two_cards())
    report["devices"] = [d.to_dict() for d in NvmlReader(lib=refusing(), env={}).devices()]
    assert ["1", RTX, "n/a", "n/a", "n/a"] in _table_rows(render(report, "en", width=80), "Devices,")


@pytest.mark.parametrize("lang, words", [("en", "No device is visible here: check CUDA_VISIBLE_DEVICES"),
                                         ("zh", "此处看不到任何设备：请检查 CUDA_VISIBLE_DEVICES")])
def test_nothing_visible_says_which_variables_to_check(lang, words):
    report = _report(two_cards(), env={"CUDA_VISIBLE_DEVICES": ""})
    assert report["devices"] == []
    assert words in " ".join(render(report, lang, width=80).split())


@pytest.mark.parametrize("lang, words", [("en", "ollama-ps cannot read the devices one by one."),
                                         ("zh", "ollama-ps 无法逐个读取设备。")])
def test_a_source_that_cannot_tell_devices_apart_says_so(lang, words):
    class Estimate:
        """Reads like Ollama's /api/ps: one summed figure, no devices."""
        name = "ollama-ps"

        def __init__(self):
            self._reader = NvmlReader(lib=two_cards(), env={})

        def __getattr__(self, attr):
            if attr == "devices":
                raise AttributeError(attr)
            return getattr(self._reader, attr)

    reader = Estimate()
    assert devices_of(reader) == []
    sel = Selection(reader, (SourceStatus("ollama-ps", True, "ollama-ps: estimate"),), "remote", "first-usable")
    report = build_report(sel, ollama_host="x")
    assert report["devices"] == [] and report["per_device"] is False
    assert words in render(report, lang, width=80)


def _sliced() -> FakeNvml:
    nvml = FakeNvml(gpus=(A100,)).with_mig(0, {0: MIG_3G, 2: MIG_2G})
    nvml.enqueue_memory(used=30 * GiB, total=80 * GiB, gpu=0)  # the parent: what the sum must not read
    nvml.enqueue_memory(used=1 * GiB, total=40 * GiB, gpu=0, mig=0)
    nvml.enqueue_memory(used=3 * GiB, total=20 * GiB, gpu=0, mig=2)
    return nvml


def test_the_summed_reading_of_a_mig_card_is_the_one_instance_a_process_gets():
    # a CUDA process (Ollama's) gets one MIG instance, the first visible: 40 GiB, not the card's 80 nor 40 + 20
    reader = NvmlReader(lib=_sliced(), env={})
    reading = reader.read()
    assert (reading.total_bytes, reading.used_bytes, reading.free_bytes) == (40 * GiB, 1 * GiB, 39 * GiB)
    assert reader.info().total_bytes == 40 * GiB and reader.info().count == 1
    assert [d.label for d in reader.devices()] == ["0:0", "0:2"]  # every instance is still listed


def test_the_instance_the_servers_cuda_visible_devices_names_is_the_one_summed():
    nvml = _sliced()
    second = NvmlReader(lib=nvml, env={}).devices()[1].uuid
    reader = NvmlReader(lib=_sliced(), env={"CUDA_VISIBLE_DEVICES": second})
    assert reader.read().total_bytes == 20 * GiB and reader.read().used_bytes == 3 * GiB
