"""The one place that reads an Ollama error text (and the server log lines
behind it) and says what kind of failure it was.

Both engines are known: the legacy in-process runner (v0.11.x: ``llama runner
process has terminated: ...``, ``model requires more system memory ...``) and
the current llama-server engine (v0.30+: ``llama-server reported
out-of-memory during startup: ...``, ``llama-server process has terminated:
signal: killed``), plus the allocation failures llama.cpp, CUDA, ROCm, Metal
and Vulkan print. A text that only says the runner stopped ("this may be due
to resource limitations or an internal error") is out-of-memory only when an
out-of-memory marker stands in the error itself or in the log lines of that
load or request; ``signal: killed`` is the kernel's OOM killer only with a
kernel or cgroup OOM line as evidence, otherwise a crash. Probes call
:func:`classify` and post its result in their facts (``failure``, ``oom``,
``oom_marker``); the rules read those fields and never re-parse error texts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable


# the kinds are part of the fact contract, so they are spelled once, in rules/facts.py
from rules.facts import FAILURES as KINDS  # noqa: E402,F401
from rules.facts import OOM_FAILURES as OOM_KINDS  # noqa: E402

#: substrings (lower case) that mean an allocation failed, in any era or runtime
OOM_MARKERS = (
    "out of memory",                  # CUDA/ROCm "error: out of memory", cudaMalloc/hipMalloc failed: out of memory
    "out of device memory",
    "cudamalloc failed",
    "hipmalloc failed",
    "failed to allocate",             # llama.cpp: ... buffer of size N, CUDA0 buffer, buffer for kv cache, compute pp buffers
    "unable to allocate",             # llama_model_load: error loading model: unable to allocate CUDA0 buffer
    "allocation failed",
    "not enough memory",
    "insufficient memory",            # Metal: Insufficient Memory (kIOGPUCommandBufferCallbackErrorOutOfMemory)
    "vk_error_out_of_device_memory",
    "erroroutofmemory",               # vulkan.hpp, and Metal's kIOGPUCommandBufferCallbackErrorOutOfMemory
    "erroroutofdevicememory",
    "failed to reserve graph",
    "requires more system memory",    # v0.11.x precheck: model requires more system memory (A) than is available (B)
    "was unable to fit model into system memory",
    "memory layout cannot be allocated",  # v0.13 - v0.24
    "std::bad_alloc",
    "cannot allocate memory",         # ENOMEM
)

#: log lines in which Ollama itself says it judged a failure out-of-memory
OLLAMA_OOM_LOG = (
    "runtime oom detected",
    "reducing automatic context and retrying once",
    "evicting all other loaded models for oom retry",
)

#: kernel / cgroup lines (dmesg, journalctl -k) that prove the OOM killer acted
_KERNEL_OOM = re.compile(r"out of memory: kill(?:ed)? process|invoked oom-killer|oom-kill:|oom_reaper|"
                         r"memory cgroup out of memory", re.I)

#: settings the engine refuses: a fix in the config, not more memory
_CONFIG = ("quantized v cache requires flash_attn", "unsupported cache type",
           "kv cache type not supported by model",
           "error while handling environment variable")  # a LLAMA_ARG_* value llama-server refuses

_ENGINE_MISSING = ("llama-server binary not found", "error starting llama-server")
_NOT_FOUND = re.compile(r"model ['\"]?[^'\"]*['\"]? not found|not found, try pulling it first", re.I)
_TIMEOUT = ("timed out waiting for llama runner to start", "timed out waiting for llama-server to start")
_BUSY = "server busy, please try again"
_KILLED = "signal: killed"
#: texts that say the model process went away during a load
_AT_LOAD = ("llama runner process has terminated", "llama runner process no longer running",
            "llama-server process has terminated", "llama-server process no longer running",
            "llama-server startup failed", "error loading model", "failed to load model")
#: texts that say it went away while answering
_AT_REQUEST = ("model runner has unexpectedly stopped", "an error was encountered while running the model",
               "connection dropped")


@dataclass(frozen=True)
class Failure:
    """What one failed load or request was.

    ``marker`` is the text that decided it (an OOM marker, or the era's own
    wording), ``evidence`` where that marker was found: ``"error"`` (the text
    the client got) or ``"log"`` (a server log or kernel line passed in).
    ``era``: ``"legacy"`` (runner) / ``"current"`` (llama-server) / ``None``
    when the text names neither.
    """

    kind: str
    marker: str | None
    evidence: str | None
    era: str | None
    text: str

    @property
    def oom(self) -> bool:
        return self.kind in OOM_KINDS

    def fields(self) -> dict:
        """The fact fields a probe posts for this failure (see rules/facts.py)."""
        return {"failure": self.kind, "oom_marker": self.marker if self.oom else None}


def oom_marker(text: str | None) -> str | None:
    """The first allocation-failure marker in ``text`` (lower case), or None."""
    low = (text or "").lower()
    return next((mk for mk in OOM_MARKERS if mk in low), None)


def is_oom_text(text: str | None) -> bool:
    """Does this text alone say memory ran out? (No log: a generic "runner
    stopped" is not enough.)"""
    failure = classify(text)
    return failure is not None and failure.oom


def classify(error: str | None, log_lines: Iterable[str] = (), phase: str | None = None) -> Failure | None:
    """Classify an Ollama error text; None when there is no error.

    ``log_lines``: the server log lines of that load or request (read them
    with :meth:`probes.serverlog.ServerLog.lines_since`; older lines would
    lend a crash another failure's evidence), and/or kernel lines.
    ``phase``: ``"load"`` or ``"request"`` when the caller knows it; else it
    is read from the text.
    """
    if not error or not str(error).strip():
        return None
    text = str(error)
    low = text.lower()
    lines = [str(line) for line in log_lines or ()]
    era = _era(low)
    if phase not in ("load", "request"):
        phase = "request" if any(p in low for p in _AT_REQUEST) else "load"
    oom_kind = "startup_oom" if phase == "load" else "runtime_oom"

    def make(kind: str, marker: str | None, evidence: str | None = "error") -> Failure:
        return Failure(kind, marker, evidence, era, text)

    if any(p in low for p in _ENGINE_MISSING) and "binary not found" in low:
        return make("engine_missing", "llama-server binary not found")
    if _NOT_FOUND.search(text) and "error loading model" not in low:
        return make("not_found", _NOT_FOUND.search(text).group(0).lower())
    if _BUSY in low:
        return make("busy", _BUSY)
    config = next((c for c in _CONFIG if c in low), None) or _first(_CONFIG, lines)
    if config:
        return make("config", config, "error" if config in low else "log")
    if "reported out-of-memory during startup" in low:
        return make("startup_oom", oom_marker(text) or "llama-server reported out-of-memory during startup")
    if _KILLED in low:
        # SIGKILL: the kernel's OOM killer, or a person, or a supervisor; only a kernel line tells
        kernel = next((line for line in lines if _KERNEL_OOM.search(line)), None)
        if kernel:
            return make("killed", _KERNEL_OOM.search(kernel).group(0).lower(), "log")
        return make("crash", _KILLED)
    marker = oom_marker(text)
    if marker:
        return make(oom_kind, marker)
    if any(t in low for t in _TIMEOUT):
        return make("timeout", next(t for t in _TIMEOUT if t in low))
    stopped = any(p in low for p in _AT_LOAD + _AT_REQUEST)
    if stopped:
        kernel = next((line for line in lines if _KERNEL_OOM.search(line)), None)
        if kernel:
            return make("killed", _KERNEL_OOM.search(kernel).group(0).lower(), "log")
        logged = _first(OOM_MARKERS, lines) or _first(OLLAMA_OOM_LOG, lines)
        if logged:
            return make(oom_kind, logged, "log")
        return make("crash", None, None)
    return make("error", None, None)


def _first(needles: Iterable[str], lines: Iterable[str]) -> str | None:
    needles = tuple(needles)
    for line in lines:
        low = line.lower()
        for needle in needles:
            if needle in low:
                return needle
    return None


def _era(low: str) -> str | None:
    if "llama-server" in low:
        return "current"
    if "llama runner" in low or "requires more system memory" in low:
        return "legacy"
    return None
