"""The CUDA backend of llama-server, built on the device machine from the bundle.

Ollama ships llama-server as its packages do: the CPU build in
``lib/ollama`` (carried, built here by the rig) and each GPU backend
alone in ``lib/ollama/cuda_v<N>/libggml-cuda.so``, built by Ollama's
``llama_cuda_v<N>`` preset from the same patched tree. So the device
compiles only ``ggml-cuda`` (and the ``ggml-base`` it links), for sm_90
alone. If the carried llama-server does not run there (another C library),
the fallback builds llama-server and its libraries too, from the same
configure. Runs in a thread beside part 1; every command's output goes to
one log with timestamps.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from layout import configure_cmd

def find_nvcc() -> str | None:
    """nvcc on PATH, else where CUDA images install it without putting it there."""
    found = shutil.which("nvcc")
    if found:
        return found
    return "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None


def nvcc_major(nvcc: str | None) -> int | None:
    if not nvcc:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.", out)
    return int(m.group(1)) if m else None


def missing_libs(lib: Path) -> list[str]:
    """Sonames ``ldd`` cannot find for ``lib``."""
    out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
    return [ln.split("=>")[0].strip() for ln in out.splitlines() if "not found" in ln]


def find_lib(soname: str, roots: list[Path]) -> Path | None:
    for root in roots:
        if root.is_dir():
            for path in sorted(root.rglob(soname + "*")):
                if path.name.startswith(soname) and path.is_file():
                    return path
    return None


class CudaBuild(threading.Thread):
    """configure -> build -> install -> check, each step timed; ``error`` is
    the first failure in one line, ``timings`` seconds per step."""

    def __init__(self, glue: Path, tree: Path, build: Path, prefix: Path, log_path: Path, *,
                 jobs: int, full: bool = False, arch: str = "90-real", isa: tuple[str, ...] = ()):
        super().__init__(name="cuda-build", daemon=True)
        self.glue, self.tree, self.build_dir, self.prefix = glue, tree, build, prefix
        self.log_path, self.jobs, self.full, self.arch, self.isa = log_path, jobs, full, arch, isa
        self.timings: dict[str, float] = {}
        self.error: str | None = None
        self.cuda_major: int | None = None
        self.missing: list[str] = []   # sonames libggml-cuda.so still cannot find after the build
        self.install_error: str | None = None
        self.started = time.monotonic()
        self.proc: subprocess.Popen | None = None

    def _run(self, label: str, cmd: list[str]) -> None:
        t0 = time.monotonic()
        with open(self.log_path, "a", encoding="utf-8", errors="replace") as out:
            out.write(f"\n[{time.strftime('%H:%M:%S')}] $ {' '.join(cmd)}\n")
            out.flush()
            # low priority: part 1's sampler runs beside the compilers and must keep its rate
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=lambda: os.nice(10))
            rc = self.proc.wait()
        self.timings[label] = round(time.monotonic() - t0, 1)
        if rc != 0:
            raise RuntimeError(f"{label} failed (exit {rc}) after {self.timings[label]}s; see {self.log_path.name}")

    def run(self) -> None:
        try:
            self._build()
        except Exception as exc:  # noqa: BLE001 - reported by the caller, in the summary
            self.error = str(exc)
        self.timings["total"] = round(time.monotonic() - self.started, 1)

    def _build(self) -> None:
        nvcc = find_nvcc()
        self.cuda_major = nvcc_major(nvcc)
        if self.cuda_major is None:
            raise RuntimeError("nvcc not found: no CUDA build here")
        cmake = shutil.which("cmake")
        if cmake is None:
            raise RuntimeError("cmake not found")
        os.environ["CUDACXX"] = nvcc   # CMake's CUDA language finds nvcc off PATH only so
        self._run("configure", configure_cmd(cmake, self.glue, self.tree, self.build_dir, cuda=True,
                                             cuda_major=self.cuda_major, arch=self.arch,
                                             ninja=bool(shutil.which("ninja")), extra=self.isa))
        targets = ["ggml-cuda"] + (["llama-server"] if self.full else [])
        self._run("build " + " ".join(targets),
                  [cmake, "--build", str(self.build_dir), "--target", *targets, "-j", str(self.jobs)])
        try:
            self._run("install", [cmake, "--install", str(self.build_dir), "--component", "llama-server",
                                  "--prefix", str(self.prefix)])
        except RuntimeError as exc:
            # its runtime-dependency scan fails where cuBLAS lives outside the toolkit (pip's
            # nvidia-* wheels); the backend itself is built: put it where Ollama looks
            self.install_error = str(exc)
            dest = self.prefix / "lib" / "ollama" / f"cuda_v{self.cuda_major}"
            dest.mkdir(parents=True, exist_ok=True)
            for path in (self.build_dir / "bin").glob("libggml-cuda*"):
                shutil.copy2(path, dest / path.name, follow_symlinks=True)
        if self.full:
            self._install_cpu_side()
        self._complete_runtime()

    def _install_cpu_side(self) -> None:
        """The fallback: llama-server and its libraries from this build, beside the CUDA backend."""
        lib = self.prefix / "lib" / "ollama"
        lib.mkdir(parents=True, exist_ok=True)
        for path in (self.build_dir / "bin").iterdir():
            if path.name == "llama-server" or (path.name.startswith("lib") and ".so" in path.name
                                               and "ggml-cuda" not in path.name):
                shutil.copy2(path, lib / path.name, follow_symlinks=True)

    def _complete_runtime(self) -> None:
        """Copy cudart/cuBLAS beside libggml-cuda.so when the install found none
        and the loader cannot find them either."""
        backend = next((self.prefix / "lib" / "ollama").glob("cuda_v*/libggml-cuda.so"), None)
        if backend is None:
            raise RuntimeError("the install put no libggml-cuda.so under lib/ollama/cuda_v*")
        roots = [Path("/usr/local/cuda/lib64"), Path("/usr/local/cuda/targets/x86_64-linux/lib"),
                 Path("/usr/lib/x86_64-linux-gnu"), *Path(sys.prefix).glob("lib/python3*/site-packages/nvidia")]
        nvcc = find_nvcc()
        if nvcc:
            roots.insert(0, Path(nvcc).resolve().parents[1])
        for soname in missing_libs(backend):
            found = find_lib(soname, roots)
            if found is not None:
                shutil.copy2(found, backend.parent / soname)
        self.missing = missing_libs(backend)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
