"""The ready-to-apply files, their atomic writing, and ``oomvet apply``."""
from __future__ import annotations

import configparser
import io
import os
import re
import shlex

import pytest
import yaml

from assistant.files.atomic import AtomicWriter
from assistant.commands.apply import Applier, ApplyError
from assistant.config import OLLAMA_ENV_VARS, build_config, dump_config
from common.errors import ServerUnreachable, UsageError
from assistant.files.outputs import created_model_name, render_files, write_outputs
from tests.test_config_check import FakeRunner
from tests.test_config_roundtrip import sample_result

EXPECTED_FILES = {"oomvet.yaml", "Modelfile", "ollama.env", "oomvet-ollama.conf", "llama-server.txt", "vllm.txt"}


def doc_with(**config):
    """The files for ``config`` on a server whose settings were not read: every setting written."""
    result = sample_result(server_env=None)
    result["config"].update(config)
    return build_config(result)


# ---------------------------------------------------------------- the files

def test_render_gives_config_modelfile_env_dropin_and_translations():
    assert set(render_files(doc_with())) == EXPECTED_FILES


def test_modelfile_is_from_the_chosen_tag_with_context_and_batch():
    text = render_files(doc_with(max_context_len=1024))["Modelfile"]
    commands = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert commands == ["FROM neohorse-1:q8_0", "PARAMETER num_ctx 1024", "PARAMETER num_batch 512"]


def test_env_file_keys_are_real_ollama_variables_including_the_optional_ones():
    text = render_files(doc_with(kv_cache="q8_0"))["ollama.env"]
    active = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    optional = re.findall(r"^# (OLLAMA_[A-Z_]+)=", text, re.M)

    assert active == {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_KV_CACHE_TYPE": "q8_0"}
    assert optional == ["OLLAMA_CONTEXT_LENGTH", "OLLAMA_GPU_OVERHEAD"]
    assert set(active) | set(optional) <= OLLAMA_ENV_VARS


def test_env_file_is_readable_by_a_posix_shell(tmp_path):
    env_file = tmp_path / "ollama.env"
    env_file.write_text(render_files(doc_with(max_concurrency=2))["ollama.env"])
    import subprocess
    out = subprocess.run(["sh", "-c", f"set -a; . {shlex.quote(str(env_file))}; set +a; "
                                      "echo $OLLAMA_NUM_PARALLEL $OLLAMA_KV_CACHE_TYPE"],
                         capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    assert out.stdout.split() == ["2", "f16"]


def test_systemd_dropin_sets_the_same_variables_under_service():
    text = render_files(doc_with(max_concurrency=2))["oomvet-ollama.conf"]
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string(text)
    lines = [ln for ln in text.splitlines() if ln.startswith("Environment=")]

    assert parser.sections() == ["Service"]
    assert lines == ['Environment="OLLAMA_NUM_PARALLEL=2"', 'Environment="OLLAMA_KV_CACHE_TYPE=f16"']


def test_llama_server_flags_are_translated_and_marked_not_measured():
    text = render_files(doc_with(max_context_len=4096, max_concurrency=2, kv_cache="q8_0"))["llama-server.txt"]
    command = shlex.split(text.splitlines()[-1])

    assert "TRANSLATED, NOT MEASURED" in text
    # llama-server's -c is shared by all slots: 4096 per slot x 2 slots
    assert command[command.index("-c") + 1] == "8192"
    assert command[command.index("-b") + 1] == "512"
    assert command[command.index("-np") + 1] == "2"
    assert command[command.index("--cache-type-k") + 1] == "q8_0"
    assert command[command.index("--cache-type-v") + 1] == "q8_0"
    assert "-fa" in command


def test_vllm_flags_are_translated_and_marked_not_measured():
    text = render_files(doc_with(max_concurrency=3, kv_cache="q8_0"))["vllm.txt"]
    command = shlex.split(text.splitlines()[-1])

    assert "TRANSLATED, NOT MEASURED" in text
    assert command[:2] == ["vllm", "serve"]
    assert command[command.index("--max-model-len") + 1] == "4096"
    assert command[command.index("--max-num-seqs") + 1] == "3"
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.62"
    assert command[command.index("--kv-cache-dtype") + 1] == "fp8"
    assert "--quantization" in command


def test_nothing_fits_renders_only_the_config():
    doc = build_config(sample_result(config=None, verified=False, fits=False))
    assert set(render_files(doc)) == {"oomvet.yaml"}


def test_created_model_name_keeps_the_tag_and_drops_the_registry():
    assert created_model_name({"model": "neohorse-1:q8_0"}) == "neohorse-1-oomvet:q8_0"
    assert created_model_name({"model": "hf.co/bartowski/SmolLM2:Q4_K_M"}) == "SmolLM2-oomvet:Q4_K_M"
    assert created_model_name({"model": "neohorse-1"}) == "neohorse-1-oomvet"


# ---------------------------------------------------------------- atomic writes

def test_write_outputs_creates_the_folder_and_every_file(tmp_path):
    files = render_files(doc_with())
    written = write_outputs(tmp_path / "out" / "deep", files)

    assert {p.name for p in written} == EXPECTED_FILES
    assert {p.name for p in (tmp_path / "out" / "deep").iterdir()} == EXPECTED_FILES
    assert (tmp_path / "out" / "deep" / "Modelfile").read_text() == files["Modelfile"]


def test_existing_file_is_kept_as_bak(tmp_path):
    (tmp_path / "Modelfile").write_text("FROM mine\n")
    write_outputs(tmp_path, {"Modelfile": "FROM neohorse-1:q8_0\n"})

    assert (tmp_path / "Modelfile").read_text() == "FROM neohorse-1:q8_0\n"
    assert (tmp_path / "Modelfile.bak").read_text() == "FROM mine\n"


def test_rewriting_the_same_content_keeps_the_older_bak(tmp_path):
    (tmp_path / "Modelfile").write_text("FROM mine\n")
    write_outputs(tmp_path, {"Modelfile": "FROM new\n"})
    written = write_outputs(tmp_path, {"Modelfile": "FROM new\n"})

    assert written == []
    assert (tmp_path / "Modelfile.bak").read_text() == "FROM mine\n"


def test_no_temporary_files_are_left_behind(tmp_path):
    write_outputs(tmp_path, render_files(doc_with()))
    write_outputs(tmp_path, render_files(doc_with(max_context_len=2048)))
    names = {p.name for p in tmp_path.iterdir()}
    assert not [n for n in names if n.startswith(".oomvet-")]
    assert "oomvet.yaml.bak" in names


def test_a_file_where_the_folder_should_be_is_one_line_and_nothing_written(tmp_path):
    blocker = tmp_path / "out"
    blocker.write_text("not a folder")
    with pytest.raises(UsageError) as info:
        write_outputs(blocker, render_files(doc_with()))
    assert "\n" not in str(info.value) and "is not a folder" in str(info.value)
    assert blocker.read_text() == "not a folder"
    assert {p.name for p in tmp_path.iterdir()} == {"out"}


def test_a_folder_under_a_file_cannot_be_created_and_nothing_is_left(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="cannot create the output folder"):
        write_outputs(tmp_path / "file" / "out", {"oomvet.yaml": "a: 1\n"})
    assert {p.name for p in tmp_path.iterdir()} == {"file"}


def test_a_folder_in_the_way_of_one_file_stops_all_of_them(tmp_path):
    (tmp_path / "Modelfile").mkdir()
    with pytest.raises(UsageError, match="a folder or special file is in the way"):
        write_outputs(tmp_path, render_files(doc_with()))
    assert {p.name for p in tmp_path.iterdir()} == {"Modelfile"}


def test_a_failure_halfway_through_the_renames_restores_every_file(tmp_path):
    (tmp_path / "oomvet.yaml").write_text("old config\n")
    (tmp_path / "Modelfile").write_text("FROM old\n")
    calls = []

    def flaky_replace(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        os.replace(src, dst)

    with pytest.raises(UsageError, match="No space left on device; nothing was written"):
        AtomicWriter(replace=flaky_replace).write(tmp_path, render_files(doc_with()))

    assert (tmp_path / "oomvet.yaml").read_text() == "old config\n"
    assert (tmp_path / "Modelfile").read_text() == "FROM old\n"
    assert {p.name for p in tmp_path.iterdir()} == {"oomvet.yaml", "Modelfile"}


def test_file_names_cannot_escape_the_output_folder(tmp_path):
    with pytest.raises(UsageError, match="plain names"):
        write_outputs(tmp_path, {"../evil": "x"})
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- oomvet apply

def _config_on_disk(tmp_path, with_files=True, **config):
    doc = doc_with(**config)
    if with_files:
        write_outputs(tmp_path, render_files(doc))
    else:
        (tmp_path / "oomvet.yaml").write_text(dump_config(doc, "en"))
    return tmp_path / "oomvet.yaml"


def _fake_ollama(tmp_path):
    binary = tmp_path / "bin" / "ollama"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    return str(binary)


def test_dry_run_prints_the_exact_create_command_and_env_changes_and_runs_nothing(tmp_path):
    path = _config_on_disk(tmp_path, max_concurrency=2)
    runner, out = FakeRunner(), io.StringIO()

    code = Applier(runner=runner, out=out, environ={"PATH": ""}).apply(
        path, dry_run=True, host="http://127.0.0.1:18434", lang="en")

    text = out.getvalue()
    assert code == 0 and runner.history == []
    assert (f"OLLAMA_HOST=http://127.0.0.1:18434 ollama create neohorse-1-oomvet:q8_0 -f "
            f"{(tmp_path / 'Modelfile').resolve()}") in text
    assert "sudo systemctl daemon-reload && sudo systemctl restart ollama" in text
    assert "OLLAMA_NUM_PARALLEL=2 OLLAMA_KV_CACHE_TYPE=f16 ollama serve" in text
    assert "launchctl setenv OLLAMA_NUM_PARALLEL 2" in text


def test_dry_run_without_a_matching_modelfile_prints_it_inline(tmp_path):
    path = _config_on_disk(tmp_path, with_files=False)
    out = io.StringIO()
    Applier(runner=FakeRunner(), out=out, environ={"PATH": ""}).apply(path, dry_run=True, lang="en")
    text = out.getvalue()
    assert "cat > \"$f\" <<'EOF'\n" in text
    assert "FROM neohorse-1:q8_0\nPARAMETER num_ctx 4096\nPARAMETER num_batch 512\nEOF\n" in text
    assert 'create neohorse-1-oomvet:q8_0 -f "$f"' in text


def test_the_printed_systemd_command_writes_the_same_dropin_as_the_file(tmp_path):
    path = _config_on_disk(tmp_path)
    out = io.StringIO()
    Applier(runner=FakeRunner(), out=out, environ={"PATH": ""}).apply(path, dry_run=True, lang="en")
    printf_line = next(line for line in out.getvalue().splitlines() if line.startswith("printf"))
    printed = shlex.split(printf_line.split(" | ")[0])[2:]
    dropin = (tmp_path / "oomvet-ollama.conf").read_text().splitlines()
    assert printed == [line for line in dropin if line and not line.startswith("#")]


def test_apply_runs_ollama_create_against_the_chosen_host(tmp_path):
    path = _config_on_disk(tmp_path)
    binary = _fake_ollama(tmp_path)
    runner = FakeRunner().enqueue(0, "gathering model components\nsuccess\n")
    out = io.StringIO()

    code = Applier(runner=runner, out=out, environ={"PATH": "", "OLLAMA_BIN": binary}).apply(
        path, host="127.0.0.1:18434", name="nh:ctx4k", lang="en")

    (argv, env), = runner.history
    assert code == 0
    assert argv == [binary, "create", "nh:ctx4k", "-f", str((tmp_path / "Modelfile").resolve())]
    assert env["OLLAMA_HOST"] == "http://127.0.0.1:18434"
    assert "created nh:ctx4k on http://127.0.0.1:18434" in out.getvalue()
    assert "sudo systemctl daemon-reload" in out.getvalue()


def test_apply_without_files_beside_uses_a_temporary_modelfile_with_the_same_text(tmp_path):
    path = _config_on_disk(tmp_path, with_files=False)
    binary = _fake_ollama(tmp_path)
    seen = {}

    class ReadingRunner(FakeRunner):
        def run(self, argv, env, timeout_s):
            seen["modelfile"] = open(argv[-1]).read()
            return super().run(argv, env, timeout_s)

    runner = ReadingRunner().enqueue(0, "success")
    Applier(runner=runner, out=io.StringIO(), environ={"OLLAMA_BIN": binary}).apply(path, lang="en")

    assert seen["modelfile"] == render_files(doc_with())["Modelfile"]
    assert not os.path.exists(runner.history[0][0][-1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "oomvet.yaml"]


def test_apply_maps_a_refused_connection_to_server_unreachable(tmp_path):
    path = _config_on_disk(tmp_path)
    runner = FakeRunner().enqueue(1, "Error: could not connect to ollama app, is it running?\n")
    with pytest.raises(ServerUnreachable) as info:
        Applier(runner=runner, out=io.StringIO(), environ={"OLLAMA_BIN": _fake_ollama(tmp_path)}).apply(
            path, host="http://127.0.0.1:9", lang="en")
    assert info.value.exit_code == 3
    assert "http://127.0.0.1:9 did not answer: could not connect" in str(info.value)


def test_apply_reports_a_failed_create_in_one_line(tmp_path):
    path = _config_on_disk(tmp_path)
    runner = FakeRunner().enqueue(1, "gathering model components\nError: pull model manifest: file does not exist\n")
    with pytest.raises(ApplyError) as info:
        Applier(runner=runner, out=io.StringIO(), environ={"OLLAMA_BIN": _fake_ollama(tmp_path)}).apply(path, lang="en")
    assert str(info.value) == ("ollama create neohorse-1-oomvet:q8_0 failed: "
                               "pull model manifest: file does not exist")


def test_apply_without_an_ollama_binary_says_how_to_get_one(tmp_path):
    path = _config_on_disk(tmp_path)
    runner = FakeRunner()
    with pytest.raises(UsageError) as info:
        Applier(runner=runner, out=io.StringIO(), environ={"PATH": str(tmp_path)}).apply(path, lang="en")
    assert "cannot find the ollama program" in str(info.value) and "OLLAMA_BIN" in info.value.hint
    assert runner.history == []


def test_apply_refuses_a_bad_model_name_before_running_anything(tmp_path):
    path = _config_on_disk(tmp_path)
    runner = FakeRunner()
    with pytest.raises(UsageError, match="not a valid Ollama model name"):
        Applier(runner=runner, out=io.StringIO(), environ={}).apply(path, name="bad name!", lang="en")
    assert runner.history == []


def test_apply_of_a_nothing_fits_record_exits_1_and_runs_nothing(tmp_path):
    doc = build_config(sample_result(config=None, verified=False, fits=False))
    path = tmp_path / "oomvet.yaml"
    path.write_text(dump_config(doc, "en"))
    runner, out = FakeRunner(), io.StringIO()
    assert Applier(runner=runner, out=out, environ={}).apply(path, lang="en") == 1
    assert runner.history == [] and "nothing to apply" in out.getvalue()


def test_apply_warns_when_the_config_is_not_verified(tmp_path):
    result = sample_result(verified=False)
    path = tmp_path / "oomvet.yaml"
    path.write_text(dump_config(build_config(result), "en"))
    out = io.StringIO()
    Applier(runner=FakeRunner(), out=out, environ={}).apply(path, dry_run=True, lang="en")
    assert out.getvalue().startswith("warning: this config is NOT verified")


def test_host_comes_from_flag_then_environment_then_the_config(tmp_path):
    path = _config_on_disk(tmp_path)

    def host_used(environ, flag=None):
        out = io.StringIO()
        Applier(runner=FakeRunner(), out=out, environ=environ).apply(path, dry_run=True, host=flag, lang="en")
        return re.search(r"OLLAMA_HOST=(\S+) ", out.getvalue()).group(1)

    assert host_used({"OLLAMA_HOST": "10.0.0.2:11434"}, "http://127.0.0.1:1") == "http://127.0.0.1:1"
    assert host_used({"OLLAMA_HOST": "10.0.0.2:11434"}) == "http://10.0.0.2:11434"
    assert host_used({}) == "http://127.0.0.1:18434"  # where the config was verified


def test_dry_run_in_chinese_keeps_the_commands_and_translates_the_comments(tmp_path):
    path = _config_on_disk(tmp_path)
    out = io.StringIO()
    Applier(runner=FakeRunner(), out=out, environ={"PATH": ""}).apply(path, dry_run=True, lang="zh")
    text = out.getvalue()
    assert "# Linux（由 systemd 运行服务器）：" in text and "# 演练：未运行或更改任何内容" in text
    assert "sudo systemctl daemon-reload && sudo systemctl restart ollama" in text


def test_check_out_dir_refuses_what_could_not_be_written_and_creates_nothing(tmp_path, monkeypatch):
    from assistant.files.atomic import check_out_dir
    from common.errors import UsageError

    check_out_dir(tmp_path / "new" / "deeper")  # a folder that can be made: fine, and not made yet
    assert not (tmp_path / "new").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="it exists and is not a folder"):
        check_out_dir(blocker)
    with pytest.raises(UsageError, match="is not a folder"):
        check_out_dir(blocker / "sub")  # its parent is a file
    monkeypatch.setattr("os.access", lambda path, mode: False)  # as for a user without write permission
    with pytest.raises(UsageError, match="permission denied|read-only file system"):
        check_out_dir(tmp_path)


def test_apply_prints_a_hand_edited_env_as_the_files_write_it(tmp_path):
    # YAML true is the server's "1", as in ollama.env; a null value is no setting
    path = _config_on_disk(tmp_path, with_files=False)
    doc = yaml.safe_load(path.read_text())
    doc["ollama"]["env"].update({"OLLAMA_NOHISTORY": True, "OLLAMA_NOPRUNE": None})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = io.StringIO()
    assert Applier(runner=FakeRunner(), out=out, environ={"PATH": ""}).apply(path, dry_run=True, lang="en") == 0
    step = next(line for line in out.getvalue().splitlines() if "OLLAMA_NOHISTORY" in line)
    assert "OLLAMA_NOHISTORY=1" in step and "True" not in step
    assert "OLLAMA_NOPRUNE" not in out.getvalue()
