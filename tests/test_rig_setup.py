"""How the rig picks an engine, finds a finished build in its cache, and turns
a broken one into a setup error (never an out-of-memory): all without
building anything."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from oomrig import CURRENT_VERSION, LEGACY_VERSION, Rig, RigError, RigPaths, check_engine, engine_binary, find_ollama, resolve_version
from oomrig.build import _Step, ggml_isa_flags

REPO = Path(__file__).resolve().parents[1]


def _exe(path: Path, script: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_current_engine_is_the_default_and_legacy_is_one_word_away(monkeypatch):
    monkeypatch.delenv("OOMVET_RIG_VERSION", raising=False)
    assert resolve_version() == CURRENT_VERSION == "0.34.4"
    assert resolve_version("legacy") == resolve_version("v0.11.4") == LEGACY_VERSION
    monkeypatch.setenv("OOMVET_RIG_VERSION", "0.11.4")
    assert resolve_version() == LEGACY_VERSION
    assert Rig().version == LEGACY_VERSION
    assert resolve_version("current") == CURRENT_VERSION  # an explicit choice wins over the variable


def test_unknown_version_is_one_clear_error(monkeypatch):
    with pytest.raises(RigError, match="0.34.4 .* or 0.11.4") as err:
        resolve_version("0.20.0")
    assert err.value.exit_code == 2


def test_rig_version_flag_refuses_a_bad_value_without_a_traceback():
    proc = subprocess.run([sys.executable, "scripts/rig.py", "serve", "--rig-version", "0.2"], cwd=REPO,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "0.34.4" in proc.stderr


def test_each_engine_has_its_own_binary_and_model_store(tmp_path):
    cur, old = RigPaths(tmp_path, CURRENT_VERSION), RigPaths(tmp_path, LEGACY_VERSION)
    assert cur.ollama_bin == tmp_path / "ollama-0.34.4" / "prefix" / "bin" / "ollama"
    assert cur.llama_server == tmp_path / "ollama-0.34.4" / "prefix" / "lib" / "ollama" / "llama-server"
    assert old.ollama_bin == tmp_path / "ollama" / "bin" / "ollama"
    assert cur.models_dir != old.models_dir
    assert cur.gguf_dir == old.gguf_dir  # the GGUF files are the same for both


def test_a_finished_prefix_is_reused_and_a_half_one_is_not(tmp_path, monkeypatch):
    monkeypatch.delenv("OLLAMA_BIN", raising=False)
    paths = RigPaths(tmp_path, CURRENT_VERSION)
    assert find_ollama(paths) is None
    _exe(paths.ollama_bin)
    assert find_ollama(paths) is None  # go install done, llama-server not yet: a build still running
    _exe(paths.llama_server)
    assert find_ollama(paths) == paths.ollama_bin
    assert engine_binary(paths.ollama_bin) == paths.llama_server
    assert check_engine(paths, paths.ollama_bin) == paths.llama_server


def test_missing_llama_server_is_a_setup_error_not_an_oom(tmp_path):
    paths = RigPaths(tmp_path, CURRENT_VERSION)
    ollama = _exe(tmp_path / "elsewhere" / "bin" / "ollama")
    with pytest.raises(RigError, match="no llama-server") as err:
        check_engine(paths, ollama)
    assert "setup" in err.value.hint and "memory" not in str(err.value)


def test_llama_server_that_cannot_start_is_a_setup_error(tmp_path):
    paths = RigPaths(tmp_path, CURRENT_VERSION)
    _exe(paths.ollama_bin)
    _exe(paths.llama_server, "#!/bin/sh\necho 'error while loading shared libraries: libllama.so.0' >&2\nexit 127\n")
    with pytest.raises(RigError, match="libllama.so.0"):
        check_engine(paths, paths.ollama_bin)


def test_legacy_engine_needs_no_llama_server(tmp_path):
    paths = RigPaths(tmp_path, LEGACY_VERSION)
    _exe(paths.ollama_bin)
    assert check_engine(paths, paths.ollama_bin) is None


def test_failed_build_step_raises_with_the_log_tail_and_a_hint(tmp_path):
    seen = []
    step = _Step(seen.append, tmp_path / "build.log", started=0.0, every_s=0.1)
    with pytest.raises(RigError) as err:
        step.run("build llama-server", [sys.executable, "-c",
                                        "import sys, time; print('[1/2] compiling'); time.sleep(0.3); "
                                        "print('ggml.c:1: error: boom'); sys.exit(1)"])
    assert "ggml.c:1: error: boom" in str(err.value)
    assert "apt-get install cmake" in err.value.hint and str(tmp_path / "build.log") in err.value.hint
    assert any("step 1/2" in line for line in seen)  # progress on the console while it ran


def test_isa_flags_follow_the_cpu():
    flags = ggml_isa_flags("processor: 0\nflags\t\t: fpu sse4_2 avx avx2 fma f16c bmi2 avx512f\n")
    assert "-DGGML_AVX2=ON" in flags and "-DGGML_BMI2=ON" in flags and "-DGGML_AVX512=OFF" in flags
    old = ggml_isa_flags("flags\t\t: fpu sse4_2 avx\n")
    assert "-DGGML_AVX=ON" in old and "-DGGML_AVX2=OFF" in old and "-DGGML_FMA=OFF" in old
    assert ggml_isa_flags("Features: fp asimd\n") == []
