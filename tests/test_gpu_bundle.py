"""The GPU check bundle's pure parts (scripts/gpu/): the llama.cpp trim, the
configure line, which wheels travel, the step plan against the device
call's time, the CUDA worker's levels, the stand-in spec, step detection,
and how outputs are packed for the eight files a device call returns. No
GPU, no network, no server."""
from __future__ import annotations

import lzma
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import gguf
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "gpu"))
import build_cuda  # noqa: E402
import cuda_worker  # noqa: E402
import gpu_check  # noqa: E402
import layout  # noqa: E402
import part1  # noqa: E402
import part2  # noqa: E402
import standin  # noqa: E402

MiB = 1 << 20


# -- the trim and the configure line -----------------------------------------------

@pytest.mark.parametrize("rel", ["models/ggml-vocab-llama-bpe.gguf", "docs/build.md", "tests/test-backend-ops.cpp",
                                 "examples/simple/simple.cpp", "ggml/src/ggml-vulkan/ggml-vulkan.cpp",
                                 "ggml/src/ggml-metal/ggml-metal.m", "ggml/src/ggml-hip/CMakeLists.txt",
                                 "tools/ui/src/app.html", "tools/server/tests/unit/test_basic.py",
                                 "scripts/compare-llama-bench.py", "convert_hf_to_gguf.py", "gguf-py/gguf/gguf.py"])
def test_trim_drops_what_a_cuda_cpu_build_never_reads(rel):
    assert not layout.keep(rel)


@pytest.mark.parametrize("rel", ["CMakeLists.txt", "LICENSE", "cmake/common.cmake", "src/llama.cpp",
                                 "ggml/src/ggml-cuda/fattn.cu",
                                 "ggml/src/ggml-cuda/template-instances/mmq-instance-q4_1.cu",
                                 "ggml/src/ggml-cpu/ggml-cpu.c", "ggml/src/ggml.c", "ggml/include/ggml.h",
                                 "tools/server/server.cpp", "tools/mtmd/mtmd.cpp", "tools/ui/CMakeLists.txt",
                                 "tools/ui/ui.cpp.in", "scripts/ui-assets.cmake", "vendor/miniaudio/miniaudio.h",
                                 "licenses/LICENSE-jsonhpp", "common/arg.cpp"])
def test_trim_keeps_the_cuda_backend_the_server_and_what_cmake_reads(rel):
    assert layout.keep(rel)


def test_device_configure_is_ollamas_cuda_preset_for_sm90_on_a_prepatched_tree():
    cmd = layout.configure_cmd("cmake", Path("/w/glue"), Path("/w/llama.cpp"), Path("/w/b"), cuda=True)
    assert cmd[cmd.index("--preset") + 1] == "llama_cuda_v13_user_arch"
    assert "-DCMAKE_CUDA_ARCHITECTURES=90-real" in cmd and "-DGGML_CUDA=ON" in cmd
    assert "-DOLLAMA_LLAMA_CPP_SKIP_COMPAT_PATCH=ON" in cmd   # the device has no git to patch with
    assert "-DFETCHCONTENT_SOURCE_DIR_LLAMA_CPP=/w/llama.cpp" in cmd
    assert cmd[cmd.index("-S") + 1] == "/w/glue/llama/server"


def test_configure_follows_the_cuda_major_and_the_check_here_is_the_rigs_cpu_preset():
    v12 = layout.configure_cmd("cmake", Path("g"), Path("t"), Path("b"), cuda=True, cuda_major=12)
    assert v12[v12.index("--preset") + 1] == "llama_cuda_v12_user_arch"
    cpu = layout.configure_cmd("cmake", Path("g"), Path("t"), Path("b"), cuda=False, ninja=False)
    assert cpu[cpu.index("--preset") + 1] == "cpu"
    assert "-DGGML_CUDA=OFF" in cpu and "-G" not in cpu


def test_the_device_build_compiles_only_the_cuda_backend_and_places_it_when_install_fails(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.48'\n")
    (tools / "cmake").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n'
                                 'case "$1" in --build) mkdir -p "$2/bin" && : > "$2/bin/libggml-cuda.so";; '
                                 '--install) exit 1;; esac\n')
    for tool in ("nvcc", "cmake"):
        (tools / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    monkeypatch.delenv("CUDACXX", raising=False)   # the build sets it; monkeypatch puts it back
    prefix = tmp_path / "prefix"
    build = build_cuda.CudaBuild(tmp_path / "glue", tmp_path / "llama.cpp", tmp_path / "b", prefix,
                                 tmp_path / "build.log", jobs=3)
    build.run()   # in this thread: start() would run the same in another
    assert build.error is None, build.error
    configure, compile_, install = (tmp_path / "calls").read_text().splitlines()
    assert "--preset llama_cuda_v13_user_arch" in configure and "-DCMAKE_CUDA_ARCHITECTURES=90-real" in configure
    assert compile_.endswith("--target ggml-cuda -j 3")
    assert install.startswith("--install") and "install failed" in build.install_error
    assert (prefix / "lib" / "ollama" / "cuda_v13" / "libggml-cuda.so").is_file()
    assert set(build.timings) == {"configure", "build ggml-cuda", "install", "total"}


# -- wheels ---------------------------------------------------------------------------

def test_wheels_skip_what_the_image_has_but_carry_the_pins_it_may_hold_too_old():
    carry = layout.to_carry({"numpy": "2.4.6", "torch": "2.11.0", "pydantic": "2.14.4",
                             "typing-extensions": "4.16.0", "durable-rules": "2.0.28"})
    assert carry == {"durable-rules": "2.0.28", "pydantic": "2.14.4", "typing-extensions": "4.16.0"}


def test_package_names_compare_in_their_canonical_form():
    assert layout.canonical("Typing_Extensions") == "typing-extensions"
    assert layout.canonical("durable.rules") == "durable-rules"
    assert layout.to_carry({"PyYAML": "6.0.4"}) == {}


def test_dependency_closure_follows_the_rig_extra_and_leaves_test_and_llm_out():
    import make_bundle
    found = make_bundle.closure()
    assert {"durable-rules", "pydantic", "pydantic-core", "gguf", "tenacity", "platformdirs"} <= set(found)
    assert not {"pytest", "hypothesis", "langchain-ollama", "oomvet"} & set(found)


# -- the plan and the clock -------------------------------------------------------------

def test_the_prepared_plan_ends_inside_the_budget_check_sh_gives_it():
    p = gpu_check.plan({1, 2}, 580)   # check.sh: 590 s of the call's 600, less the wheels' install
    assert p["fits"], p["expected_s"]
    names = [s["name"] for s in p["steps"]]
    assert names.index("part1") < names.index("serve") < names.index("build_wait") < names.index("restart") \
        < names.index("diagnose") < names.index("fa_off")


def test_the_build_overlaps_part1_so_waiting_for_it_costs_only_the_rest():
    steps = {s["name"]: s for s in gpu_check.plan({1, 2}, 580)["steps"]}
    build = next(s for s in gpu_check.STEPS if s.name == "build")
    assert steps["build_wait"]["ends_at_s"] == max(steps["serve"]["ends_at_s"],
                                                    steps["unpack"]["ends_at_s"] + build.estimate_s)
    assert steps["serve"]["ends_at_s"] < steps["build"]["ends_at_s"]   # the tags are made while it compiles


def test_part1_alone_has_no_build_and_no_ollama():
    names = {s["name"] for s in gpu_check.plan({1}, 200)["steps"]}
    assert names == {"unpack", "worker", "part1", "pack"}


def test_a_step_that_no_longer_fits_the_deadline_is_skipped_and_said_to_be(tmp_path):
    now = [0.0]
    args = gpu_check.parse_args(["run", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "out"),
                                 "--budget-s", "100"])
    check = gpu_check.Check(args)
    check.clock = gpu_check.Clock(100, now=lambda: now[0])
    ran = []
    assert check.step("part1", lambda: ran.append("part1"))
    now[0] = 100 - gpu_check.RESERVE_S - 10   # 10 s left: diagnose needs 45 to start
    assert not check.step("diagnose", lambda: ran.append("diagnose"))
    assert ran == ["part1"]
    assert check.result["steps"][-1] == {"step": "diagnose", "skipped": "10s left, needs 45s"}
    assert (tmp_path / "out" / "summary.json").is_file()


def test_a_failing_step_is_recorded_and_the_run_goes_on(tmp_path):
    args = gpu_check.parse_args(["run", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o")])
    check = gpu_check.Check(args)
    assert not check.step("part1", lambda: 1 / 0)
    assert check.result["steps"][-1]["error"] == "ZeroDivisionError: division by zero"
    assert "ZeroDivisionError" in (tmp_path / "w" / "errors.txt").read_text()


def test_arguments_refuse_an_unknown_part_and_give_the_dry_run_a_budget():
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["run", "--parts", "3"])
    dry = gpu_check.parse_args(["run", "--dry-run"])
    assert dry.diagnose_budget == "480MiB" and dry.parts == "1,2"
    assert gpu_check.parse_args(["run"]).diagnose_budget is None   # on the card the limit is its free memory


# -- packing what comes back ------------------------------------------------------------

def test_a_long_log_keeps_its_head_and_tail(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"H" * 1000 + b"M" * 5000 + b"T" * 1000)
    assert gpu_check.cap_file(log, 2000)
    text = log.read_bytes()
    assert text.startswith(b"H" * 1000) and text.endswith(b"T" * 1000) and b"5000 bytes cut" in text
    assert not gpu_check.cap_file(log, 10_000)


def test_pack_leaves_out_the_largest_file_when_the_archive_is_still_too_big(tmp_path):
    folder = tmp_path / "part2"
    (folder / "journal").mkdir(parents=True)
    (folder / "diagnose.json").write_text('{"verified": true}')
    (folder / "journal" / "s.jsonl").write_text("{}\n")
    (folder / "noise.bin").write_bytes(np.random.default_rng(0).bytes(40_000))   # does not compress
    rec = gpu_check.pack(folder, tmp_path / "part2.tar.gz", max_bytes=20_000)
    assert rec["left_out"] == ["noise.bin"]
    with tarfile.open(tmp_path / "part2.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["part2/diagnose.json", "part2/journal/s.jsonl"]


def test_unpack_lays_out_ollamas_prefix_once(tmp_path):
    bundle, src = tmp_path / "bundle", tmp_path / "src"
    bundle.mkdir()
    (bundle / layout.PARTS["ollama"]).write_bytes(lzma.compress(b"#!/bin/sh\necho 0.34.4\n"))
    for part, name in (("cpu_payload", "llama-server"), ("glue", "LLAMA_CPP_VERSION"), ("llama_cpp", "CMakeLists.txt")):
        (src / part).mkdir(parents=True)
        (src / part / name).write_text(part)
        with tarfile.open(bundle / layout.PARTS[part], "w:xz") as tar:
            tar.add(src / part / name, arcname=name)
    (src / "cpu_payload" / "libllama.so.0").symlink_to("llama-server")
    with tarfile.open(bundle / layout.PARTS["cpu_payload"], "w:xz") as tar:
        tar.add(src / "cpu_payload" / "llama-server", arcname="llama-server")
        tar.add(src / "cpu_payload" / "libllama.so.0", arcname="libllama.so.0")
    work = tmp_path / "work"
    assert gpu_check.unpack(bundle, work) == {"reused": False}
    ollama = work / "prefix" / "bin" / "ollama"
    assert ollama.read_bytes().startswith(b"#!/bin/sh") and ollama.stat().st_mode & 0o111
    assert (work / "prefix" / "lib" / "ollama" / "libllama.so.0").is_symlink()
    assert (work / "glue" / "LLAMA_CPP_VERSION").is_file() and (work / "llama.cpp" / "CMakeLists.txt").is_file()
    assert gpu_check.unpack(bundle, work) == {"reused": True}


# -- what part 1 and part 2 compute ----------------------------------------------------------

def test_a_step_counts_as_caught_only_by_a_reading_of_its_level_inside_its_window():
    base = 600 * MiB
    summary = SimpleNamespace(started_monotonic=0.0, timeline=[
        (0.00, base), (0.05, base), (0.12, base + 1024 * MiB), (0.16, base + 1024 * MiB),
        (0.30, base + 1024 * MiB), (0.34, base + 4096 * MiB)])
    steps = [{"mib": 1024, "t0": 0.10, "t1": 0.30}, {"mib": 4096, "t0": 0.30, "t1": 0.33}]
    caught = part1.steps_caught(summary, steps, base)
    assert [c["caught"] for c in caught] == [True, False]   # the 4096 reading came after its window
    assert caught[0]["latency_s"] == pytest.approx(0.02) and caught[0]["readings_in_window"] == 3
    assert caught[1]["latency_s"] is None


class _Card:
    """A device and the worker on it: the worker's level moves, readers read it."""

    def __init__(self, pid=4242, context_mib=500, other_mib=300):
        self.pid, self.context, self.other, self.level = pid, context_mib * MiB, other_mib * MiB, 0

    def ask(self, cmd):   # the worker's side
        import time
        done = []
        for mib, hold_s in cmd["steps"]:
            self.level = mib * MiB
            t0 = time.monotonic()
            time.sleep(hold_s)
            done.append({"mib": mib, "t0": t0, "t1": time.monotonic(), "reserved": self.level + 2 * MiB})
        return {"steps": done, "reserved": self.level + 2 * MiB, "free": None, "total": None}

    def reader(self, name):
        from probes.memory.base import ProcessUsage, Reading
        card = self

        class _Reader:
            def read(self):
                used = card.other + card.context + 2 * MiB + card.level
                return Reading(0.0, used, 80 << 30, (80 << 30) - used)

            def processes(self):
                return [ProcessUsage(card.pid, "python3", card.context + 2 * MiB + card.level)]
        r = _Reader()
        r.name = name
        return r


def test_levels_give_each_readers_error_against_the_allocator_per_process_and_device_wide():
    card = _Card()
    rows = part1.process_levels(card, card.reader("nvml"), card.reader("nvidia-smi"), card.pid,
                                levels=(0, 1024, 0), hold_s=0)
    assert [r["nvml"]["error_mib"] for r in rows] == [0.0, 0.0, 0.0]
    assert [r["nvidia-smi"]["device_error_mib"] for r in rows] == [0.0, 0.0, 0.0]
    assert rows[1]["nvml"]["process_bytes"] == (500 + 2 + 1024) * MiB and rows[1]["nvml"]["process_seen"]


def test_the_sampler_run_catches_steps_held_longer_than_its_period_on_the_pid_reading():
    card = _Card()
    plan = ((0, 0.3), (1024, 0.3), (2048, 0.3), (0, 0.3))
    rec = part1.sample_run(card, part1.PidReader(card.reader("nvml"), card.pid), 20.0, plan=plan)
    assert (rec["steps_caught"], rec["steps"], rec["errors"]) == (4, 4, 0)
    assert rec["reader"] == "nvml/pid" and rec["cpu_percent_of_core"] is not None
    assert rec["base_bytes"] == 502 * MiB


def test_a_readers_error_is_its_move_since_idle_less_what_the_allocator_took():
    # context 500 MiB and a 2 MiB first block at idle; 1 GiB more taken, the reader saw 1026 MiB more
    assert part1.error_mib((500 + 2 + 1026) * MiB, 502 * MiB, (2 + 1024) * MiB, 2 * MiB) == 2.0
    assert part1.error_mib(None, 502 * MiB, 1026 * MiB, 2 * MiB) is None   # the reader did not see the process


def _load(process_mib):
    return {"during": {"nvml": {"model_process_bytes": [None if process_mib is None else process_mib * MiB]}}}


def test_the_hog_leaves_room_for_the_context_that_fits_and_half_the_way_to_the_wanted_one():
    assert part2.leave_mib(_load(900), _load(1100)) == 1000
    assert part2.leave_mib(_load(900), _load(1100), share=0.0) == 900


def test_without_both_readings_the_hog_leaves_the_default():
    assert part2.leave_mib(None, _load(1100)) == part2.DEFAULT_LEAVE_MIB
    assert part2.leave_mib(_load(900), _load(None)) == part2.DEFAULT_LEAVE_MIB
    assert part2.leave_mib(_load(900), _load(800)) == part2.DEFAULT_LEAVE_MIB   # no growth: nothing to split


def test_a_command_past_its_time_is_terminated_and_one_ignoring_that_is_killed():
    sleeper = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"]
    rc, out, err = part2.run_bounded(sleeper, None, timeout_s=1.0, grace_s=5)
    assert rc == "timeout" and "stopped after 1s" in err
    stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('up', flush=True); time.sleep(30)"]
    rc, out, _ = part2.run_bounded(stubborn, None, timeout_s=1.0, grace_s=0.5)
    assert rc == "timeout" and out == "up\n"
    assert part2.run_bounded([sys.executable, "-c", "print(7)"], None, timeout_s=30)[:2] == (0, "7\n")


class _FakeTorch:
    """The slice of torch the worker's Holder uses, counting allocations."""

    uint8 = "uint8"

    def __init__(self):
        self.allocs: list[int] = []
        self.cuda = SimpleNamespace(synchronize=lambda: None, empty_cache=lambda: None)

    def empty(self, n, dtype, device):
        self.allocs.append(n // MiB)
        return SimpleNamespace(fill_=lambda v: None)


def test_the_worker_reaches_each_level_freeing_newest_blocks_first():
    torch = _FakeTorch()
    holder = cuda_worker.Holder(torch)
    for level in (1024, 4096, 1024, 8192, 512, 0):
        holder.set_level(level)
        assert holder.held_mib == level
    # 1024 -> 4096 adds 3072; back to 1024 frees it; 8192 adds 7168; 512 replaces the 1024 block
    assert torch.allocs == [1024, 3072, 7168, 512]


def test_results_yield_the_closing_notes_figures():
    result = {"part1": {"levels": [{"mib": 1024, "nvml": {"error_mib": 0.0, "device_error_mib": 0.0},
                                    "nvidia-smi": {"error_mib": 2.0, "device_error_mib": 1.0}}],
                        "sampling": [{"reader": "nvml", "hz": 100.0, "hz_achieved": 98.1, "steps_caught": 12,
                                      "steps": 12, "cpu_percent_of_core": 3.2, "errors": 0, "timeline": []}]},
              "part2": {"leave_mib": 700, "loads": [{"label": "free card", "ctx": 4096, "ps": [], "status": 200,
                                                     "log": {"buffers": [{"device": "CUDA0", "kind": "compute",
                                                                          "bytes": 17 * MiB}]}}],
                        "diagnose": {"rc": 0, "verified": True, "diagnosis": {"cause": "weights"}}}}
    h = gpu_check.headline(result)
    assert h["per_process_error_mib"] == [{"mib": 1024, "nvml": 0.0, "nvidia-smi": 2.0, "nvml device": 0.0,
                                           "nvidia-smi device": 1.0}]
    assert h["sampling"][0]["steps_caught"] == 12 and "timeline" not in h["sampling"][0]
    assert h["loads"][0]["buffers_mib"] == {"CUDA0 compute": 17.0}
    assert (h["verified"], h["diagnosis"], h["leave_mib"]) == (True, {"cause": "weights"}, 700)


# -- the stand-in ---------------------------------------------------------------------------------

def _tiny_gguf(path: Path) -> Path:
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_token_list(["<s>", "</s>", "a"])
    rng = np.random.default_rng(0)
    emb = gguf.quants.quantize(rng.standard_normal((3, 64), dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("token_embd.weight", emb, raw_shape=emb.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    q = gguf.quants.quantize(rng.standard_normal((64, 64), dtype=np.float32), gguf.GGMLQuantizationType.Q4_1)
    w.add_tensor("blk.0.attn_q.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_1)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_stand_in_has_the_real_files_shapes_types_metadata_and_size(tmp_path):
    src = _tiny_gguf(tmp_path / "Tiny.Q4_1.gguf")
    spec = standin.load_spec(standin.save_spec(standin.spec_of(src), tmp_path / "spec.json.xz"))
    files = standin.write_levels(spec, tmp_path / "out")
    assert files["Q4_1"].stat().st_size == src.stat().st_size
    made, real = gguf.GGUFReader(files["Q4_1"]), gguf.GGUFReader(src)
    assert files["Q4_1"].read_bytes()[:real.data_offset] == src.read_bytes()[:real.data_offset]
    assert [(t.name, list(t.shape), t.tensor_type) for t in made.tensors] == \
        [(t.name, list(t.shape), t.tensor_type) for t in real.tensors]
    assert made.fields["tokenizer.ggml.tokens"].contents() == ["<s>", "</s>", "a"]
    assert not np.array_equal(made.tensors[1].data, real.tensors[1].data)   # shapes, not the weights
    f16 = gguf.GGUFReader(files["F16"])
    assert {t.name: t.tensor_type.name for t in f16.tensors}["blk.0.attn_q.weight"] == "F16"
