"""What the GPU check bundle holds and how both sides read it (issue 32).

The bundle is built here by ``make_bundle.py`` and carried to the device
machine, where ``check.sh`` and ``gpu_check.py`` unpack it. This module is
the contract between the two: the names of the parts, which files of the
llama.cpp tree a CUDA ``llama-server`` build needs (the trim), the CMake
configure line both sides use (here to check the trimmed tree configures,
there to build the CUDA backend), and which wheels the device image already
has. Pure functions and constants only: the unit tests read them directly.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath

BUNDLE_DIR = ".gpu-bundle"   # carried: git-ignored, named in the run call's carry list
WORK_DIR = ".gpu-work"       # on the device only: unpacked parts and the CUDA build; not carried

#: part -> file in the bundle (each compressed: the carry limit counts bytes, not files)
PARTS = {
    "ollama": "ollama.xz",                  # the stripped v0.34.4 Go server
    "cpu_payload": "lib-ollama-cpu.tar.xz",  # the rig's lib/ollama: llama-server + CPU backend, as built here
    "glue": "ollama-llama-glue.tar.xz",     # Ollama's llama/server CMake project, compat shim and patch
    "llama_cpp": "llama-cpp-trimmed.tar.xz",  # llama.cpp b11076, compat patch applied, trimmed
    "wheels": "wheels",                     # a folder of cp312 manylinux wheels
    "standin": "standin-neohorse-1.json.xz",  # NeoHorse-1's metadata and tensor shapes, no weights
    "manifest": "manifest.json",
}

CARRY_LIMIT_BYTES = 64 << 20   # the device README: tracked + untracked-not-ignored + carried paths

# -- the trim ------------------------------------------------------------------

#: top-level folders and files of llama.cpp no CMake configure of llama/server reads
#: (tests, docs, examples and pocs are behind LLAMA_BUILD_TESTS/EXAMPLES=OFF; models/
#: holds vocab GGUFs for tests, the largest part of the tree)
_DROP_TOP = {"models", "docs", "tests", "examples", "pocs", "benches", "media", "gguf-py", "conversion",
             ".github", ".devops", "ci", "requirements", "skills", "grammars", "app"}
#: ggml backends a CUDA + CPU build never adds (ggml_add_backend skips a backend switched off)
_OTHER_BACKENDS = {"ggml-blas", "ggml-cann", "ggml-et", "ggml-hexagon", "ggml-hip", "ggml-metal", "ggml-musa",
                   "ggml-opencl", "ggml-openvino", "ggml-rpc", "ggml-sycl", "ggml-virtgpu", "ggml-vulkan",
                   "ggml-webgpu", "ggml-zdnn", "ggml-zendnn"}
#: parts of kept tools that only the web UI build or the tool's own tests read
_DROP_UNDER = ("tools/ui/src/", "tools/ui/tests/", "tools/ui/static/", "tools/ui/scripts/",
               "tools/server/tests/", "tools/server/bench/")


def keep(rel: str) -> bool:
    """Whether a path of the llama.cpp tree (relative, POSIX) goes into the
    trimmed tree. ``scripts/`` keeps only its CMake scripts (the UI step runs
    ``scripts/ui-assets.cmake`` even with the UI off); top-level Python files
    are converters."""
    p = PurePosixPath(rel)
    parts = p.parts
    if not parts:
        return True
    top = parts[0]
    if top in _DROP_TOP:
        return False
    if len(parts) == 1 and p.suffix in (".py", ".md", ".nix", ".toml", ".ini"):
        return False
    if top == "scripts":
        return len(parts) == 1 or (len(parts) == 2 and p.suffix == ".cmake")
    if len(parts) >= 3 and parts[:2] == ("ggml", "src") and parts[2] in _OTHER_BACKENDS:
        return False
    return not any(rel.startswith(prefix) or rel + "/" == prefix for prefix in _DROP_UNDER)


# -- the CMake configure line ------------------------------------------------------

def configure_cmd(cmake: str, glue: Path, tree: Path, build: Path, *, cuda: bool,
                  cuda_major: int = 13, arch: str = "90-real", ninja: bool = True,
                  extra: tuple[str, ...] = ()) -> list[str]:
    """The configure of Ollama's ``llama/server`` project on a prepared tree.

    The compat patch is already in the tree (applied when the bundle was
    built, with Ollama's own ``apply-git-patches.cmake``), so configure is
    told to skip it and the device needs no git. ``cuda``: Ollama's
    ``llama_cuda_v<N>_user_arch`` preset for one architecture (sm_90 on the
    H200: no PTX, no other SASS), whose install step puts only
    ``libggml-cuda.so`` (and cuBLAS/cudart) under ``lib/ollama/cuda_v<N>``,
    beside the CPU payload built here; else the ``cpu`` preset as the rig
    builds it."""
    preset = f"llama_cuda_v{cuda_major}_user_arch" if cuda else "cpu"
    cmd = [cmake, "-S", str(glue / "llama" / "server"), "--preset", preset, "-B", str(build),
           f"-DFETCHCONTENT_SOURCE_DIR_LLAMA_CPP={tree}", "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
           "-DOLLAMA_LLAMA_CPP_SKIP_COMPAT_PATCH=ON", "-DGGML_CCACHE=OFF", "-DGGML_NATIVE=OFF"]
    if cuda:
        cmd += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}"]
    else:
        cmd += ["-DGGML_CUDA=OFF", "-DGGML_CPU_ALL_VARIANTS=OFF"]
    if ninja:
        cmd += ["-G", "Ninja"]
    return cmd + list(extra)


# -- wheels ---------------------------------------------------------------------------

#: what the device image already has (KINDS.md, "Python packages already there",
#: read 2026-11-17): its python3 is 3.12 and a wheel for these would only shadow it
DEVICE_HAS = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2
joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas
nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless
optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson
six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision
tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())

#: on the device image, but carried anyway: oomvet's own pins need versions newer than
#: an image built months earlier may hold (pydantic 2.14 needs typing-extensions>=4.16,
#: httpx2 anyio>=4.10 and idna>=3.18, httpcore2 h11>=0.16); each is small and pure Python
CARRY_ANYWAY = frozenset({"typing-extensions", "anyio", "idna", "h11"})


def canonical(name: str) -> str:
    """PEP 503 name: ``Typing_Extensions`` -> ``typing-extensions``."""
    out = name.strip().lower()
    for ch in "_.":
        out = out.replace(ch, "-")
    while "--" in out:
        out = out.replace("--", "-")
    return out


def to_carry(closure: dict[str, str]) -> dict[str, str]:
    """name -> version of the wheels to carry, from oomvet's dependency closure."""
    return {n: v for n, v in sorted(closure.items())
            if canonical(n) not in DEVICE_HAS or canonical(n) in CARRY_ANYWAY}
