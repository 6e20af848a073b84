"""What the simulated Ollama says: the error texts and log spellings of
Ollama v0.11.4 (shared/ollama-notes.md section 4) and of the current
llama-server engine (shared/ollama-current.md 3.6), so that the probes'
classifier (:mod:`probes.oomtext`) reads the simulator as it reads a real server."""
from __future__ import annotations

from probes.units import fmt_size

# error texts of Ollama v0.11.4 (shared/ollama-notes.md section 4)
NOT_FOUND = "model '{name}' not found"
LOAD_OOM = "llama runner process has terminated: cudaMalloc failed: out of memory"
LOAD_OOM_METAL = "llama runner process has terminated: error loading model: unable to allocate backend buffer"
CRASH = ("model runner has unexpectedly stopped, this may be due to resource limitations or an internal "
         "error, check ollama server logs for details")
RUN_ERROR = "an error was encountered while running the model: {text}"
SYSTEM_RAM = "model requires more system memory ({need}) than is available ({have})"
# what the runtime prints when an allocation fails mid-request; Ollama's status
# writer captures it and the request's error ends with it (both engines)
RUNTIME_OOM_MSG = {"nvidia": "CUDA error: out of memory", "amd": "ROCm error: out of memory",
                   "apple": "error:Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"}
RUNTIME_OOM = RUN_ERROR.format(text=RUNTIME_OOM_MSG["nvidia"])
# the current llama-server engine (v0.30+, shared/ollama-current.md 3.6)
CURRENT_LOAD_OOM = ("llama-server reported out-of-memory during startup: ggml_backend_cuda_buffer_type_alloc_buffer: "
                    "allocating {mib:.2f} MiB on device 0: cudaMalloc failed: out of memory")
CURRENT_LOAD_OOM_METAL = ("llama-server reported out-of-memory during startup: ggml_metal_buffer_init: error: "
                          "failed to allocate buffer, size = {mib:.2f} MiB")
CURRENT_HOST_OOM = ("llama-server reported out-of-memory during startup: ggml_backend_cpu_buffer_type_alloc_buffer: "
                    "failed to allocate buffer of size {size}")
CURRENT_KV_NEEDS_FA = ("llama-server process has terminated: exit status 1: llama_init_from_model: failed to "
                       "initialize the context: quantized V cache requires flash_attn to be enabled")


def human_bytes2(n: int) -> str:
    """Ollama's ``format.HumanBytes2`` (1024-based, one decimal), as its log lines print sizes."""
    return fmt_size(n, digits=1)


def _library(vendor: str) -> str:
    return {"nvidia": "cuda", "amd": "rocm", "apple": "metal"}.get(vendor, "cpu")

