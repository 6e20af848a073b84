"""The server log parser and readers, on lines captured from the rig's real
v0.34.4 and v0.11.4 servers (paths shortened) and from the failure texts of
shared/ollama-current.md section 4."""
from __future__ import annotations

from pathlib import Path

from probes.serverlog import FileLog, JournalLog, MemoryLog, find_log, parse, parse_cmdline
from rules.facts import validate

DATA = Path(__file__).parent / "data"
MiB = 1 << 20


def lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def test_current_engine_command_line_gives_per_slot_context_and_cache_types():
    d = parse(lines("serverlog_current.txt"))
    cmd = d.cmdline
    assert cmd["engine"] == "llama-server" and d.engine == "llama-server"
    assert (cmd["ctx_total"], cmd["num_parallel"], cmd["num_ctx"]) == (4096, 2, 2048)
    assert (cmd["cache_type_k"], cmd["cache_type_v"], cmd["flash_attn"]) == ("q8_0", "q8_0", "auto")
    assert (cmd["batch"], cmd["ubatch"], cmd["load_mode"]) == (512, 512, "none")
    assert "n_gpu_layers" not in cmd  # no -ngl: fit decides


def test_current_engine_buffers_fit_and_clamp():
    d = parse(lines("serverlog_current.txt"))
    assert d.buffer_total("CPU", "model") == round(136.40 * MiB)
    assert d.buffer_total(kind="KV") == 45 * MiB
    assert d.buffer_total(kind="compute") == round(15.51 * MiB)
    assert d.buffer_total(kind="output") == round(0.19 * MiB)
    assert d.fit == {"projected": 196 * MiB, "available": 24105 * MiB, "memory": "host", "target": 1024 * MiB,
                     "leaves": 23908 * MiB}
    assert d.ctx_clamped == {"num_ctx": 100000, "n_ctx_train": 8192}
    assert d.default_ctx == {"total_vram": "0 B", "default_num_ctx": 4096}
    assert d.errors == [] and d.oom_lines == [] and not d.runtime_oom and d.auto_backoff is None


def test_back_off_runtime_oom_and_the_second_start_win():
    d = parse(lines("serverlog_current_failures.txt"))
    assert d.auto_backoff == {"old_num_ctx": 262144, "new_num_ctx": 32768}
    assert d.runtime_oom
    assert d.cmdline["num_ctx"] == 32768  # buffers are the retried load's
    assert d.buffer_total("CUDA0") == round((7800 + 4096 + 1100.50) * MiB)
    assert d.buffer_total("CUDA_Host", "compute") == round(72.01 * MiB)
    assert d.fit["layers_gpu"] == 33
    assert any("failed to allocate buffer of size" in line for line in d.oom_lines)
    assert any("CUDA error: out of memory" in line for line in d.oom_lines)
    assert any("runtime OOM detected" in line for line in d.oom_lines)


def test_fit_shortfall_is_read():
    d = parse(lines("serverlog_current_failures.txt")[:4])
    assert d.fit["short_by"] == 8124 * MiB and d.fit["memory"] == "device"


def test_legacy_runner_command_line_and_buffers():
    d = parse(lines("serverlog_legacy.txt"))
    assert d.cmdline["engine"] == "runner"
    assert (d.cmdline["num_ctx"], d.cmdline["num_parallel"], d.cmdline["batch"]) == (2048, 1, 512)
    assert d.cmdline["load_mode"] == "none"
    assert d.buffer_total(kind="KV") == 45 * MiB  # llama_kv_cache_unified: the prefix does not matter
    assert d.buffer_total(kind="compute") == round(98.25 * MiB)


def test_legacy_flash_attention_is_a_bare_flag():
    cmd = parse_cmdline("/x/ollama runner --model m --ctx-size 8192 --flash-attn --kv-cache-type q8_0 --parallel 2 "
                        "--n-gpu-layers 20")
    assert (cmd["flash_attn"], cmd["cache_type_k"], cmd["cache_type_v"]) == ("on", "q8_0", "q8_0")
    assert (cmd["num_ctx"], cmd["n_gpu_layers"]) == (4096, 20)


def test_the_digest_is_a_valid_log_fact():
    fact = parse(lines("serverlog_current_failures.txt")).fact("rig", model="neohorse-1:latest")
    assert validate(fact)["kind"] == "log"


def test_a_file_log_reads_only_what_one_load_wrote(tmp_path):
    path = tmp_path / "serve.log"
    path.write_text("old line: CUDA error: out of memory\n")
    log = FileLog(path)
    mark = log.offset()
    with open(path, "a") as fh:
        fh.write("\n".join(lines("serverlog_current.txt")) + "\n")
    new = log.lines_since(mark)
    assert new[0].startswith("time=") and not any("old line" in line for line in new)
    assert parse(new).oom_lines == []


def test_a_rotated_file_is_read_from_its_start(tmp_path):
    path = tmp_path / "serve.log"
    path.write_text("a\nb\nc\n")
    log = FileLog(path)
    mark = log.offset()
    path.write_text("d\n")
    assert log.lines_since(mark) == ["d"]


def test_memory_log_offsets():
    buf: list[str] = ["x"]
    log = MemoryLog(lambda: buf)
    mark = log.offset()
    buf += ["y", "z"]
    assert log.lines_since(mark) == ["y", "z"] and log.read() == ["x", "y", "z"]


def test_journal_reader_follows_the_cursor():
    calls = []

    def run(argv):
        calls.append(argv)
        if "-n" in argv and argv[argv.index("-n") + 1] == "0":
            return "-- cursor: s=abc;i=1\n"
        return "line one\nline two\n-- cursor: s=abc;i=3\n"

    log = JournalLog(run=run)
    mark = log.offset()
    assert mark == "s=abc;i=1"
    assert log.lines_since(mark) == ["line one", "line two"]
    assert calls[-1][-2:] == ["--after-cursor", "s=abc;i=1"]


def test_find_log_says_why_it_found_none(tmp_path):
    log, why = find_log(tmp_path / "missing.log")
    assert log is None and "no server log at" in why
    log, why = find_log(platform="darwin", home=tmp_path)
    assert log is None and "server.log" in why
    (tmp_path / ".ollama" / "logs").mkdir(parents=True)
    (tmp_path / ".ollama" / "logs" / "server.log").write_text("x\n")
    log, why = find_log(platform="darwin", home=tmp_path)
    assert isinstance(log, FileLog)
    log, why = find_log(platform="linux", which=lambda name: None)
    assert log is None and "--server-log" in why
    log, why = find_log(platform="linux", which=lambda name: "/bin/journalctl", run=lambda argv: "")
    assert log is None and "no lines" in why


def test_a_number_flag_without_a_number_is_left_out_not_raised_on():
    # found by the fuzzer: "-np ." made the per-slot context division raise
    from probes.serverlog import parse_cmdline
    got = parse_cmdline("/usr/lib/ollama/llama-server --model /m -c 8192 -np . -ngl ²")
    assert got["ctx_total"] == 8192 and "num_parallel" not in got and "n_gpu_layers" not in got
    assert got["num_ctx"] == 8192


def test_a_buffer_line_without_a_number_is_ignored_not_raised_on():
    # found by the fuzz test: "size=.MiB" once reached float(".")
    digest = parse(["A KV buffer size=.MiB", "CUDA0 KV buffer size = 1.2.3 MiB"])
    assert digest.buffers == []


def test_the_go_engines_weight_and_graph_lines_count_as_buffers():
    # v0.11.x ollamarunner (gemma3 and the other Go-engine models) logs its buffers in slog, not llama.cpp's words
    lines = ['time=2026-12-05T10:00:00Z level=INFO source=ggml.go:379 msg="model weights" buffer=CPU size="2.3 GiB"',
             'time=2026-12-05T10:00:01Z level=INFO source=ggml.go:668 msg="compute graph" backend=CPU '
             'buffer_type=CPU size="106.0 MiB"']
    d = parse(lines)
    assert d.buffer_total(kind="model") == int(2.3 * (1 << 30))
    assert d.buffer_total(kind="compute") == 106 * (1 << 20)
